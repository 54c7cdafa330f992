"""The budget policy (pure): which draft positions the target verifies this step.

Every candidate position of every speculating request is scored by its survival probability (the product
of the request's per-position acceptance estimates up to it, so scores never increase along a request).
All positions are ranked together; taking the N best gives expected tokens = (speculating requests, each
emits >= 1 token) + sum of the N scores, and expected time = cost table at (requests, step tokens + N).
The N maximising tokens per second wins; each request verifies the prefix of its drafts that was taken.
"""
from __future__ import annotations

import torch

from workers.cost_table import CostTable


def survival(accept_prob: torch.Tensor, num_drafts: torch.Tensor) -> torch.Tensor:
    """accept_prob [B, K] per-position estimates -> survival [B, K] (0 beyond each request's drafts)."""
    K = accept_prob.shape[1]
    s = accept_prob.clamp(0.0, 1.0).cumprod(dim=1)
    return s * (torch.arange(K)[None, :] < num_drafts[:, None])


def _ranked(flat: torch.Tensor, K: int) -> torch.Tensor:
    """Indices of the positive scores of a flattened [B, K], best first; ties go to earlier positions, so
    any top-N is a prefix of every request's drafts."""
    order = (flat - torch.arange(K).repeat(len(flat) // K) * 1e-9).argsort(descending=True)
    return order[: int((flat > 0).sum())]


def choose_verify_lengths(
    scores: torch.Tensor,  # [B, K] survival, non-increasing along K, 0 where no draft
    cost: CostTable,
    num_requests: int,  # requests in the step (speculating or not)
    base_tokens: int,  # tokens the step computes anyway: 1 per decoding request + prefill chunk tokens
    base_emitted: float,  # tokens emitted without any draft (1 per decoding request)
    fixed_s: float = 0.0,  # per-step time outside the target's forward (host work, sampling)
    draft_step_s: float = 0.0,  # seconds per draft iteration: > 0 when choosing how deep to DRAFT
) -> torch.Tensor:  # [B] verify (or draft) length per request
    """With `draft_step_s`, the same choice prices drafting too: taking positions up to depth d costs d
    draft iterations (the drafter runs one batched iteration per position). The best set is then not always
    a prefix of the survival ranking (one confident request's 6th position makes everyone pay 6 iterations),
    so the ranking is also searched under every depth cap d = 1..K and the best cap wins."""
    B, K = scores.shape
    if B == 0 or K == 0:
        return torch.zeros(B, dtype=torch.long)
    flat = scores.flatten()
    order = _ranked(flat, K)
    depth_of = order % K + 1  # draft depth each ranked position needs
    best_rate, best_taken = base_emitted / (float(cost.lookup(num_requests, base_tokens)) + fixed_s), order[:0]
    for cap in (range(1, K + 1) if draft_step_s > 0 else (K,)):
        ranked = order[depth_of <= cap] if cap < K else order
        expected = base_emitted + torch.cat([torch.zeros(1), flat[ranked].cumsum(0)])  # [n + 1]
        step_s = cost.lookup_many(num_requests, base_tokens + torch.arange(len(ranked) + 1)).float() + fixed_s
        if draft_step_s > 0:
            depth = torch.cat([torch.zeros(1), (ranked % K + 1).cummax(0).values.float()])
            step_s = step_s + draft_step_s * depth
        rate = expected / step_s.clamp_min(1e-9)
        best = int(rate.argmax())
        if float(rate[best]) > best_rate:
            best_rate, best_taken = float(rate[best]), ranked[:best]
    return torch.bincount(best_taken // K, minlength=B)


def allocate_capacity(scores: list[torch.Tensor], capacity: int,
                      costs: list[tuple[CostTable, int, int]] | None = None) -> list[torch.Tensor]:
    """Share `capacity` draft positions among several batches (e.g. replicas sharing one drafter GPU).
    scores: [B_r, K] survival each -> per-request caps [B_r].

    Without `costs`, the positions with the highest survival anywhere win. With each batch's (cost table,
    requests, step tokens), positions are ranked by what they add to the SUM of the batches' tokens per
    second: a position on a batch whose step is already compute-bound is worth less than a slightly less
    likely one on a memory-bound batch, where verifying it is nearly free. Each batch's marginal gains are
    made non-increasing (running minimum), so the positions taken are a prefix of its own ranking."""
    if not scores:
        return []
    K = max(s.shape[1] for s in scores)
    orders, keys = [], []
    for i, s in enumerate(scores):
        s = torch.nn.functional.pad(s, (0, K - s.shape[1]))
        flat = s.flatten()
        order = _ranked(flat, K)
        if costs is None:
            gain = flat[order]
        else:
            table, requests, base = costs[i]
            expected = requests + torch.cat([torch.zeros(1), flat[order].cumsum(0)])
            rate = expected / table.lookup_many(requests, base + torch.arange(len(order) + 1)).float()
            gain = torch.cummin(rate[1:] - rate[:-1], 0).values if len(order) else rate[:0]
        orders.append(order)
        keys.append(gain)
    owner = torch.cat([torch.full((len(o),), i) for i, o in enumerate(orders)])
    key = torch.cat(keys)
    rank = torch.cat([torch.arange(len(o)) for o in orders])
    chosen = (key - rank * 1e-12).argsort(descending=True)[: min(capacity, int((key > 0).sum()))]
    counts = torch.bincount(owner[chosen], minlength=len(scores))
    return [torch.bincount(o[: int(n)] // K, minlength=s.shape[0]) for o, n, s in zip(orders, counts, scores)]
