"""Several replicas sharing one drafter: global (budget actor) vs local allocation of draft capacity.

The global part of the budget actor: replicas whose drafts come from one shared drafter GPU (MPS) compete
for its capacity, C draft positions per step. Locally each replica can only assume its share C/R and spend
it on its own best positions; the actor sees every replica's survival scores and gives the capacity to the
positions where they add the most tokens per second to the cluster (survival priced with each replica's cost table: a position on a compute-bound replica is worth less) (`allocate_capacity`), among those each replica wants (its own
policy's choice, drafting priced in: a replica whose step is already compute-bound does not ask for deep
positions). Then each replica applies its own policy within its caps. Same estimator and policy code as the engine.
Replicas differ in how predictable their traffic is (a logit shift of the seed-notes profile per replica).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from workers.budget import allocate_capacity, choose_verify_lengths, survival
from workers.estimators import LogisticEstimator
from workers.simulator import K_MAX, Roofline, _request_profiles


@dataclass
class _Replica:
    p: torch.Tensor  # [c, k] conditional acceptance of its requests
    feat: torch.Tensor  # [c, k, 1]
    left: torch.Tensor  # tokens left per request
    est: LogisticEstimator
    shift: float
    t: float = 0.0
    tokens: float = 0.0


def _profiles(n: int, k: int, gen: torch.Generator, spread: float, shift: float):
    p, f = _request_profiles(n, K_MAX, gen, spread)
    return torch.sigmoid(torch.logit(p[:, :k]) + shift), f[:, :k].contiguous()


def simulate_shared(allocation: str, shifts: list[float], concurrency: int, capacity: int | None, hw: Roofline,
                    k: int = 7, steps: int = 800, warmup_steps: int = 200, seed: int = 0, spread: float = 0.8,
                    output_len: int = 128) -> float:
    """Total tokens/s of len(shifts) replicas; allocation: 'global' | 'local' | 'off' (no speculation).
    capacity: draft positions per step the shared drafter serves (None: unlimited)."""
    req_gen = torch.Generator().manual_seed(seed + 1)
    gen = torch.Generator().manual_seed(seed)
    table = hw.cost_table()
    reps = []
    for s in shifts:
        p, f = _profiles(concurrency, k, req_gen, spread, s)
        reps.append(_Replica(p, f, torch.full((concurrency,), output_len), LogisticEstimator(k, 1), s))
    c = concurrency
    for step in range(steps):
        if step == warmup_steps:
            for r in reps:
                r.t = r.tokens = 0.0
        scores = [survival(r.est.predict(r.feat), torch.full((c,), k)) for r in reps]
        if all(r.est.ready for r in reps):  # each replica offers only the positions it wants (as the engine)
            wanted = [choose_verify_lengths(s, table, c, c, float(c), draft_step_s=hw.draft_s(1)) for s in scores]
            scores = [s * (torch.arange(k)[None, :] < w[:, None]) for s, w in zip(scores, wanted)]
        if allocation == "off":
            caps = [torch.zeros(c, dtype=torch.long)] * len(reps)
        elif capacity is None or not all(r.est.ready for r in reps):
            caps = [torch.full((c,), k)] * len(reps)
        elif allocation == "global":
            caps = allocate_capacity(scores, capacity, [(table, c, c)] * len(reps))
        else:
            caps = [allocate_capacity([s], capacity // len(reps), [(table, c, c)])[0] for s in scores]
        ok_all = torch.rand(len(reps), c, K_MAX, generator=gen)[:, :, :k]
        for r, s, cap, ok in zip(reps, scores, caps, ok_all):
            capped = s * (torch.arange(k)[None, :] < cap[:, None])
            depth = choose_verify_lengths(capped, table, c, c, float(c), draft_step_s=hw.draft_s(1)) \
                if r.est.ready else cap
            lengths = choose_verify_lengths(survival(r.est.predict(r.feat), depth), table, c, c, float(c)) \
                if r.est.ready else depth
            acc = torch.minimum((ok < r.p).long().cumprod(1).sum(1), lengths)
            if allocation != "off":
                r.est.observe(r.feat, lengths, acc)
            r.t += hw.step_s(c, c + int(lengths.sum())) + hw.draft_s(int(depth.max()) if len(depth) else 0)
            r.tokens += float((acc + 1).sum())
            r.left -= acc + 1
            done = r.left <= 0
            if bool(done.any()):
                new_p, new_f = _profiles(int(done.sum()), k, req_gen, spread, r.shift)
                r.p[done], r.feat[done] = new_p, new_f
                r.left[done] = output_len
    return sum(r.tokens / r.t for r in reps)


def compare(hw: Roofline, shifts: list[float], concurrencies: list[int], capacity_per_request: float,
            **kw) -> list[dict]:
    """Per concurrency: off, local, global (shared drafter) and unlimited drafting, tokens/s summed."""
    rows = []
    for c in concurrencies:
        cap = max(1, int(capacity_per_request * c * len(shifts)))
        row = {"concurrency_per_replica": c, "replicas": len(shifts), "drafter_capacity": cap,
               "off": simulate_shared("off", shifts, c, cap, hw, **kw),
               "local": simulate_shared("local", shifts, c, cap, hw, **kw),
               "global": simulate_shared("global", shifts, c, cap, hw, **kw),
               "unlimited": simulate_shared("global", shifts, c, None, hw, **kw)}
        row["global_vs_local"] = round(row["global"] / row["local"], 4)
        rows.append(row)
    return rows
