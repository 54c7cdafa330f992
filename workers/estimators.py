"""Acceptance estimators: per request and draft position, the probability that the draft token is accepted
given the earlier ones were; survival = cumulative product (see budget.py). Both learn online from
verification outcomes.

- `LogisticEstimator` (model drafts): per position k, p = sigmoid(w_k . x + b_k) over the draft's features
  (top-1 probability, top1-top2 margin, entropy), refit by Newton/IRLS with a ridge of 1.0 (with 1e-2, deep
  positions, labelled only for confident requests, fitted near-separable models: predictions of 0.997
  observed 0.75, and the simulator's adaptive lost 6% to fixed k=5). Until
  it has refit `warmup_refits` times it answers 1.0 for every position, so the policy verifies full drafts
  and its own trimming cannot censor the labels it learns from. Those warm-up refits come every `refit_every`
  verified drafts, so it is ready as soon at c=16 as at c=1; after them, every `refit_every` steps that
  verified any (as vLLM's refit every 100 steps). Counted in drafts throughout, a batch of 16 refit every ~6
  steps: ~3.2 ms a refit after a forward, 0.39 ms a step of adaptive's ~1.8 ms of policy while it drafted
  (trained draft, ShareGPT c=16, this CPU; ad-hoc timers, not committed).
  Its labels are all it ever saw (up to max_rows a position), and where the depth plan drafts nothing no refit
  comes: warmed on 16 ShareGPT requests (the grid's warm-up), it rated fixed k=2's position-1 drafts of other
  ShareGPT prompts at c=2 at 0.203 on average where 0.342 were accepted, low in every probability bin (ad hoc,
  2026-12-07). A per-position logit offset that the outcomes moved between refits (damped Newton steps on the
  intercept) was tried and taken out: in an A/B there (4 cycles) neither engine came near fixed k=2, with it
  0.996 of no speculation, without 1.008 (docs/performance.md, "thirteenth session"). Its own labels there
  were accepted at 0.229 and it predicted 0.217 on them: calibrated on what it saw, the prompt sample differed.
  The depth plan now reads position 1 from the outcomes (workers/first_position.py).
- `NgramEstimator` (n-gram drafts, no logits): historical acceptance keyed by (match length, the request's
  last verification, position), smoothed with a Beta prior, over a fading memory of recent outcomes. It has
  no warm-up, so the verifier keeps its labels flowing by verifying one full draft now and then
  (`explores`; see exploration.py).
"""
from __future__ import annotations

import numpy as np
import torch


def verification_labels(num_positions: int, verified: torch.Tensor, accepted: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(seen [B, K], label [B, K]): position i is labelled only if it was verified and every earlier one
    was accepted (its conditional acceptance); label 1 = accepted."""
    pos = torch.arange(num_positions)
    seen = pos[None, :] < torch.minimum(verified, accepted + 1)[:, None]
    return seen, (pos[None, :] < accepted[:, None]).float()


class LogisticEstimator:
    def __init__(self, k: int, num_features: int, refit_every: int = 100, warmup_refits: int = 3,
                 l2: float = 1.0, max_rows: int = 20_000) -> None:
        self.k, self.f = k, num_features
        self.refit_every, self.warmup_refits, self.l2, self.max_rows = refit_every, warmup_refits, l2, max_rows
        self.weights = torch.zeros(k, num_features + 1)  # last column: bias
        self.refits = 0
        # the labelled rows: those kept by the last refit (positions [m], features [m, F], labels [m]), and those
        # observed since, in Python lists until the next refit reads them. A step costs a list conversion and a
        # loop over its few labelled cells: every small op is dear in the engine, where each call follows a
        # forward that left the caches cold (docs/architecture.md, "The policy's host time is paid cold"):
        # `observe` took 128 us a call with torch's eight small ops, 83 with numpy's fancy index of the cells
        # (trained draft, ShareGPT c=1, this CPU, a ~26 ms step; ad-hoc timers, not committed)
        self._kept: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._new: tuple[list[int], list[list[float]], list[float]] = ([], [], [])
        self._since = 0

    @property
    def ready(self) -> bool:
        return self.refits >= self.warmup_refits

    def predict(self, features: torch.Tensor) -> torch.Tensor:  # [B, K, F] -> [B, K]
        if not self.ready:
            return torch.ones(features.shape[:2])
        w = self.weights[: features.shape[1]]  # [K, F + 1]
        return torch.sigmoid((features * w[:, :-1]).sum(-1) + w[:, -1])

    def observe(self, features: torch.Tensor, verified: torch.Tensor | list[int], accepted: torch.Tensor | list[int]
                ) -> None:
        """features [B, K, F]; verified [B] positions checked; accepted [B] (tensors, or lists as the engine
        passes them: each small tensor made there cost ~30 us after a forward). As `verification_labels`."""
        v, a, k = _ints(verified), _ints(accepted), min(features.shape[1], self.k)
        f, (pos, x, y) = features.tolist(), self._new  # [B][K][F]
        for b, (n, m) in enumerate(zip(v, a)):
            for i in range(min(n, m + 1, k)):
                pos.append(i)
                x.append(f[b][i])
                y.append(float(i < m))
        verified_drafts = sum(1 for n in v if n > 0)
        self._since += verified_drafts if not self.ready else int(verified_drafts > 0)  # (see the module's doc)
        if self._since >= self.refit_every:
            self._since = 0
            self.refit()

    def labelled(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows labelled at `position`, oldest first (at most `max_rows`): features [m, F], labels [m]."""
        return self._at(self._merged(), position)

    def _merged(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every labelled row: positions [m], features [m, F], labels [m]."""
        pos, x, y = self._new
        new = (torch.tensor(pos, dtype=torch.long), torch.tensor(x, dtype=torch.float32).reshape(len(pos), self.f),
               torch.tensor(y, dtype=torch.float32))
        return new if self._kept is None else tuple(torch.cat(t) for t in zip(self._kept, new))

    def _at(self, merged: tuple[torch.Tensor, torch.Tensor, torch.Tensor], position: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
        pos, x, y = merged
        at = pos == position
        return x[at][-self.max_rows:], y[at][-self.max_rows:]

    def refit(self, iterations: int = 8) -> None:
        merged, kept = self._merged(), []
        for i in range(self.k):
            x, y = self._at(merged, i)
            if not len(x):
                continue
            kept.append((torch.full((len(x),), i), x, y))
            xb = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
            w = self.weights[i].double()
            for _ in range(iterations):  # Newton / IRLS with a small ridge
                p = torch.sigmoid(xb @ w)
                grad = xb.T @ (p - y.double()) + self.l2 * w
                hess = (xb * (p * (1 - p))[:, None]).T @ xb + self.l2 * torch.eye(len(w), dtype=torch.float64)
                w = w - torch.linalg.solve(hess, grad)
            self.weights[i] = w.float()
        self._kept = tuple(torch.cat(t) for t in zip(*kept)) if kept else None
        self._new = ([], [], [])
        self.refits += 1


def _ints(values: torch.Tensor | list[int]) -> list[int]:
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


HISTORY_BUCKETS = 4  # a request's last verification: none yet, 0 accepted, 1-2 accepted, >= 3 (or all of >= 2)


def history_bucket(last: tuple[int, int] | None) -> int:
    """The n-gram estimator's history key from the request's last (verified, accepted) drafts: how far its
    last draft was accepted (a draft trimmed to 2 and accepted whole counts as far)."""
    if last is None:
        return 0
    verified, accepted = last
    return 3 if accepted >= 3 or accepted == verified >= 2 else 2 if accepted >= 1 else 1


class NgramEstimator:
    """Acceptance by (match length, the request's history bucket, position). Each cell is shrunk towards its
    (history, position) rate and that towards the position's overall rate (strength `prior_strength`
    outcomes each): sparse cells start at what similar drafts do on average, not at 0.5 (a flat Beta(1, 1)
    prior made rarely seen long matches look like coin flips and over-verified ShareGPT).

    Why the history key: match length alone does not tell workloads apart. After a ShareGPT history the
    2-token matches of repetitive prompts were rated at ShareGPT's rates (survival 0.52, 0.35, 0.23, ...),
    while repetitive drafts survived at 0.98, 0.93, 0.85, ...; adaptive ran at 0.89x of fixed k=7 at c=4.
    A key of "a later draft rejected" mixed repetitive's 5-of-7 with ShareGPT's 1-of-3 (0.88x, as without a
    key); keyed by how far it was accepted: 0.92x against 0.91x without (benchmarks/workload_shift.py;
    its rounds are too short to call that a gain).
    Old outcomes fade: once the table holds more than `memory` outcomes, all counts shrink to `memory`."""

    explores = True  # the verifier verifies an occasional full draft: this estimator has no warm-up
    uses_history = True  # features[..., 1] = history_bucket of the request (appended by the verifier)

    def __init__(self, k: int, max_match: int = 16, prior_strength: float = 4.0, memory: float = 2048.0) -> None:
        self.k = k
        self.max_match = max_match
        self.strength = prior_strength
        self.memory = memory
        # numpy, not torch: the table is tiny, and the trim and learning call this every drafting step, where
        # each torch op costs several microseconds (predict 0.12 + observe 0.16 ms a call in the engine under
        # cProfile with torch; hot, predict + observe 102 us with torch, 67 with numpy)
        self.acc = np.zeros((max_match + 1, HISTORY_BUCKETS, k))
        self.tot = np.zeros((max_match + 1, HISTORY_BUCKETS, k))
        self._table: np.ndarray | None = None  # predictions per cell (float32, flat), until new outcomes
        self._memo: tuple[torch.Tensor, np.ndarray] | None = None  # the last features seen and their cells

    def _cells(self, features: torch.Tensor) -> np.ndarray:  # [B, K] flat indices into the table
        """Each position's cell (match length, history bucket, position) as one flat index. The trim predicts
        from a proposal's features and learning observes the same tensor after verification, so the cells of
        the last tensor seen are kept for it (features are never changed in place once proposed)."""
        if self._memo is not None and self._memo[0] is features:
            return self._memo[1]
        f = features.detach().cpu().numpy()
        H, k = HISTORY_BUCKETS, self.k
        cells = np.clip(f[..., 0], 0, self.max_match).astype(np.int64) * (H * k)
        if f.shape[-1] > 1:
            cells += np.clip(f[..., 1], 0, H - 1).astype(np.int64) * k
        cells += np.minimum(np.arange(f.shape[1]), k - 1)
        self._memo = (features, cells)
        return cells

    def predict(self, features: torch.Tensor) -> torch.Tensor:  # [B, K, F] -> [B, K]
        if self._table is None:
            s = self.strength
            pos_rate = (self.acc.sum((0, 1)) + 1) / (self.tot.sum((0, 1)) + 2)  # [k], Beta(1, 1) per position
            hist_rate = (self.acc.sum(0) + s * pos_rate) / (self.tot.sum(0) + s)  # [H, k]
            self._table = ((self.acc + s * hist_rate) / (self.tot + s)).astype(np.float32).reshape(-1)
        return torch.from_numpy(self._table[self._cells(features)])

    def observe(self, features: torch.Tensor, verified: torch.Tensor | list[int], accepted: torch.Tensor | list[int]
                ) -> None:
        """As `verification_labels`, in numpy: a position is labelled if verified and all before it accepted."""
        cells = self._cells(features)
        accepted = np.asarray(accepted)
        pos = np.arange(cells.shape[1])
        seen = pos < np.minimum(np.asarray(verified), accepted + 1)[:, None]  # [B, K]
        cell, label = cells[seen], (pos < accepted[:, None])[seen]
        tot, acc = self.tot.reshape(-1), self.acc.reshape(-1)  # views
        tot += np.bincount(cell, minlength=tot.size)
        acc += np.bincount(cell, weights=label, minlength=acc.size)
        total = float(tot.sum())
        if total > self.memory:
            self.acc *= self.memory / total
            self.tot *= self.memory / total
        self._table = None


def calibration(pred: torch.Tensor, label: torch.Tensor, bins: int = 10) -> dict[str, object]:
    """Brier score and a reliability table (mean prediction vs observed rate per probability bin)."""
    pred, label = pred.flatten().float(), label.flatten().float()
    table = []
    edges = torch.linspace(0, 1, bins + 1)
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (pred >= lo) & ((pred < hi) | (hi == 1))
        if m.any():
            table.append({"bin": [round(float(lo), 2), round(float(hi), 2)], "n": int(m.sum()),
                          "mean_pred": round(float(pred[m].mean()), 4), "observed": round(float(label[m].mean()), 4)})
    return {"brier": round(float(((pred - label) ** 2).mean()), 5), "reliability": table}
