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
    # Ties are broken towards earlier positions, so the chosen set is a prefix of every request's drafts.
    key = flat - torch.arange(K).repeat(B) * 1e-9
    order = key.argsort(descending=True)
    n_pos = int((flat > 0).sum())
    order = order[:n_pos]
    depth_of = order % K + 1  # [n_pos] draft depth each ranked position needs
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


def allocate_capacity(scores: list[torch.Tensor], capacity: int) -> list[torch.Tensor]:
    """Share `capacity` draft positions among several batches (e.g. replicas sharing one drafter GPU):
    the positions with the highest survival anywhere win. scores: [B_r, K] each -> per-request caps [B_r]."""
    if not scores:
        return []
    K = max(s.shape[1] for s in scores)
    padded = torch.cat([torch.nn.functional.pad(s, (0, K - s.shape[1])) for s in scores])
    flat = padded.flatten()
    order = (flat - torch.arange(K).repeat(len(padded)) * 1e-9).argsort(descending=True)
    chosen = order[: min(capacity, int((flat > 0).sum()))]
    caps = torch.bincount(chosen // K, minlength=len(padded))
    return list(caps.split([s.shape[0] for s in scores]))
