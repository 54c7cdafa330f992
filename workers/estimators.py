"""Acceptance estimators: per request and draft position, the probability that the draft token is accepted
given the earlier ones were; survival = cumulative product (see budget.py). Both learn online from
verification outcomes.

- `LogisticEstimator` (model drafts): per position k, p = sigmoid(w_k . x + b_k) over the draft's features
  (top-1 probability, top1-top2 margin, entropy), refit by Newton/IRLS every `refit_every` outcomes, with a
  ridge of 1.0 (with 1e-2, deep positions, labelled only for confident requests, fitted near-separable
  models: predictions of 0.997 observed 0.75, and the simulator's adaptive lost 6% to fixed k=5). Until
  it has refit `warmup_refits` times it answers 1.0 for every position, so the policy verifies full drafts
  and its own trimming cannot censor the labels it learns from.
- `NgramEstimator` (n-gram drafts, no logits): historical acceptance keyed by (match length, position),
  smoothed with a Beta prior.
"""
from __future__ import annotations

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
        self._x: list[list[torch.Tensor]] = [[] for _ in range(k)]  # per position: feature rows
        self._y: list[list[torch.Tensor]] = [[] for _ in range(k)]
        self._since = 0

    @property
    def ready(self) -> bool:
        return self.refits >= self.warmup_refits

    def predict(self, features: torch.Tensor) -> torch.Tensor:  # [B, K, F] -> [B, K]
        if not self.ready:
            return torch.ones(features.shape[:2])
        x = torch.cat([features, torch.ones(features.shape[:2] + (1,))], dim=-1)
        return torch.sigmoid((x * self.weights[None, : features.shape[1]]).sum(-1))

    def observe(self, features: torch.Tensor, verified: torch.Tensor, accepted: torch.Tensor) -> None:
        """features [B, K, F]; verified [B] positions checked; accepted [B]."""
        seen, label = verification_labels(features.shape[1], verified, accepted)
        for i in range(min(self.k, features.shape[1])):
            rows = seen[:, i]
            if rows.any():
                self._x[i].append(features[rows, i])
                self._y[i].append(label[rows, i])
        self._since += int(verified.clamp(max=1).sum())
        if self._since >= self.refit_every:
            self._since = 0
            self.refit()

    def refit(self, iterations: int = 8) -> None:
        for i in range(self.k):
            if not self._x[i]:
                continue
            x = torch.cat(self._x[i])[-self.max_rows:]
            y = torch.cat(self._y[i])[-self.max_rows:]
            self._x[i], self._y[i] = [x], [y]
            xb = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
            w = self.weights[i].double()
            for _ in range(iterations):  # Newton / IRLS with a small ridge
                p = torch.sigmoid(xb @ w)
                grad = xb.T @ (p - y.double()) + self.l2 * w
                hess = (xb * (p * (1 - p))[:, None]).T @ xb + self.l2 * torch.eye(len(w), dtype=torch.float64)
                w = w - torch.linalg.solve(hess, grad)
            self.weights[i] = w.float()
        self.refits += 1


class NgramEstimator:
    """Acceptance by (match length, position), shrunk towards the position's overall rate (strength
    `prior_strength` outcomes): sparse cells start at what that position does on average, not at 0.5 (a
    flat Beta(1, 1) prior made rarely seen long matches look like coin flips and over-verified ShareGPT)."""

    def __init__(self, k: int, max_match: int = 16, prior_strength: float = 4.0) -> None:
        self.k = k
        self.max_match = max_match
        self.strength = prior_strength
        self.acc = torch.zeros(max_match + 1, k)
        self.tot = torch.zeros(max_match + 1, k)
        self._table: torch.Tensor | None = None  # predictions per (match length, position), until new outcomes

    def predict(self, features: torch.Tensor) -> torch.Tensor:  # features[..., 0] = match length
        if self._table is None:
            pos_rate = (self.acc.sum(0) + 1) / (self.tot.sum(0) + 2)  # [k], Beta(1, 1) per position
            self._table = (self.acc + self.strength * pos_rate) / (self.tot + self.strength)
        n = features[..., 0].long().clamp(0, self.max_match)
        pos = torch.arange(features.shape[1]).expand_as(n).clamp(max=self.k - 1)
        return self._table[n, pos]

    def observe(self, features: torch.Tensor, verified: torch.Tensor, accepted: torch.Tensor) -> None:
        seen, label = verification_labels(features.shape[1], verified, accepted)
        n = features[..., 0].long().clamp(0, self.max_match)
        p = torch.arange(features.shape[1]).expand_as(n).clamp(max=self.k - 1)
        self.tot.index_put_((n[seen], p[seen]), torch.ones(int(seen.sum())), accumulate=True)
        self.acc.index_put_((n[seen], p[seen]), label[seen], accumulate=True)
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
