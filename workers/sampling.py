"""Batched sampling helpers without host syncs.

Randomness is counter-based: the uniform for (request seed, output position, purpose) is a hash, so a seeded
request samples the same tokens whatever else is in its batch and whether or not it speculates, and drawing
needs no per-request generator loop. Tokens are drawn by inverse CDF (one uniform per position), never by
per-vocabulary noise.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B  # < 2**27, so (x < 2**32) * _MUL stays inside int64

LANE_ACCEPT = 1  # accept/reject decision of a draft position
LANE_SAMPLE = 2  # recovered / bonus / plain sample of the target
LANE_DRAFT = 3  # the draft model's own sampling


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = (((x >> 16) ^ x) * _MUL) & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    return (x >> 16) ^ x


def hash_uniform(seed: torch.Tensor, counter: torch.Tensor, lane: int) -> torch.Tensor:
    """Uniform floats in (0, 1), a pure function of (seed, counter, lane); broadcasts seed with counter."""
    c = _mix32((counter & _M32) ^ ((lane * 0x9E3779B9) & _M32))
    x = _mix32((seed & _M32) ^ _mix32(((seed >> 32) & _M32) ^ c))
    return ((x.double() + 0.5) / 2.0**32).float().clamp(max=1.0 - 2.0**-24)


@dataclass(slots=True)
class BatchSampling:
    """Per-request sampling parameters as tensors, one row per request."""

    temperature: torch.Tensor  # [B] float, 0 = greedy
    top_k: torch.Tensor  # [B] int64, 0 = off
    top_p: torch.Tensor  # [B] float
    seed: torch.Tensor  # [B] int64
    out_pos: torch.Tensor  # [B] int64: index in the output of the next token to emit

    @property
    def greedy(self) -> torch.Tensor:
        return self.temperature == 0

    @classmethod
    def build(cls, rows: list[tuple[float, int, float, int, int]], device: torch.device) -> "BatchSampling":
        t, k, p, s, o = zip(*rows) if rows else ((), (), (), (), ())
        return cls(
            torch.tensor(t, dtype=torch.float32, device=device),
            torch.tensor(k, dtype=torch.long, device=device),
            torch.tensor(p, dtype=torch.float32, device=device),
            torch.tensor(s, dtype=torch.long, device=device),
            torch.tensor(o, dtype=torch.long, device=device),
        )


def logits_to_probs(
    logits: torch.Tensor,  # [N, V] float32
    temperature: torch.Tensor,  # [N]
    top_k: torch.Tensor,  # [N]
    top_p: torch.Tensor,  # [N]
) -> torch.Tensor:  # [N, V]
    """Target distribution after temperature, top-k and top-p (greedy rows use temperature 1)."""
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    logits = logits / t[:, None]
    V = logits.shape[-1]
    if bool((top_k > 0).any()):
        k = torch.where((top_k > 0) & (top_k < V), top_k, torch.full_like(top_k, V))
        kth = logits.topk(int(k.max()), dim=-1).values.gather(-1, (k - 1)[:, None])  # [N, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if bool((top_p < 1).any()):
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p[:, None]  # mass before this token already >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: probs [N, V] (unnormalised is fine), u [N] in (0,1) -> token ids [N]."""
    cdf = probs.cumsum(-1)
    x = u[:, None] * cdf[:, -1:]
    idx = torch.searchsorted(cdf, x.contiguous(), right=True)[:, 0]
    return idx.clamp(max=probs.shape[-1] - 1)
