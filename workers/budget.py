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
) -> torch.Tensor:  # [B] verify length per request
    B, K = scores.shape
    if B == 0 or K == 0:
        return torch.zeros(B, dtype=torch.long)
    flat = scores.flatten()
    # Ties are broken towards earlier positions, so the chosen set is a prefix of every request's drafts.
    key = flat - torch.arange(K).repeat(B) * 1e-9
    order = key.argsort(descending=True)
    gains = flat[order]
    n_pos = int((gains > 0).sum())
    expected = base_emitted + torch.cat([torch.zeros(1), gains[:n_pos].cumsum(0)])  # [n_pos + 1]
    step_s = cost.lookup_many(num_requests, base_tokens + torch.arange(n_pos + 1)).float()
    best = int((expected / step_s.clamp_min(1e-9)).argmax())
    taken = order[:best] // K  # request of each chosen position
    return torch.bincount(taken, minlength=B)
