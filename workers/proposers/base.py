"""The proposer contract: context updates in, draft tokens (+ draft probabilities and features) out.

A proposer keeps its own copy of each request's committed tokens, updated with deltas, so that it can live in
another process (the cluster runs drafters as separate actors): one batched call per step exchanges token ids
and compact, exactly sparse probabilities, never whole-vocabulary tensors. Proposers never accept or reject.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from workers.rejection_sampler import SparseProbs


@dataclass(slots=True)
class DraftInput:
    req_id: str
    start: int  # the proposer's copy is truncated to this many tokens ...
    new_tokens: list[int]  # ... then these are appended: it then equals the request's committed tokens
    max_drafts: int  # how many draft tokens the engine can use for this request (<= k)
    temperature: float  # 0 = greedy
    seed: int
    out_pos: int  # output index the first draft token would take (keys the draft's own randomness)


@dataclass(slots=True)
class Proposal:
    draft_tokens: torch.Tensor  # [B, K] int64, -1 beyond num_drafts
    num_drafts: torch.Tensor  # [B] int64
    probs: SparseProbs | None  # None: deterministic drafts (q is one-hot)
    features: torch.Tensor | None  # [B, K, F] per-position features for acceptance estimation

    @classmethod
    def empty(cls, batch: int, k: int) -> "Proposal":
        return cls(torch.full((batch, k), -1, dtype=torch.long), torch.zeros(batch, dtype=torch.long), None, None)

    @classmethod
    def merge(cls, batch: int, k: int, parts: list[tuple[list[int], "Proposal"]]) -> "Proposal":
        """One proposal from several proposers' parts (rows[i] of the batch each); rows a part left without
        drafts get a one-hot q and zero features, which nothing reads (their num_drafts is 0)."""
        out = cls.empty(batch, k)
        like_p = next((p.probs for _, p in parts if p.probs is not None), None)
        like_f = next((p.features for _, p in parts if p.features is not None), None)
        if like_p is not None:
            idx = torch.zeros(batch, k, like_p.idx.shape[-1], dtype=torch.long)
            val = torch.zeros(batch, k, like_p.val.shape[-1])
            val[..., 0] = 1.0
            out.probs = SparseProbs(idx, val)
        if like_f is not None:
            out.features = torch.zeros(batch, k, like_f.shape[-1])
        for rows, p in parts:
            r = torch.tensor(rows, dtype=torch.long)
            out.draft_tokens[r], out.num_drafts[r] = p.draft_tokens, p.num_drafts
            if p.probs is not None and out.probs is not None:
                out.probs.idx[r], out.probs.val[r] = p.probs.idx, p.probs.val.float()
            if p.features is not None and out.features is not None:
                out.features[r] = p.features.float()
        return out


class Proposer(Protocol):
    k: int
    feature_names: tuple[str, ...]

    def propose(self, batch: list[DraftInput]) -> Proposal: ...

    def release(self, req_id: str) -> None: ...


class TokenMirror:
    """Per-request copies of committed tokens, kept in step by (start, new_tokens) deltas."""

    def __init__(self) -> None:
        self.tokens: dict[str, list[int]] = {}

    def update(self, d: DraftInput) -> list[int]:
        toks = self.tokens.setdefault(d.req_id, [])
        del toks[d.start:]
        toks.extend(d.new_tokens)
        return toks

    def release(self, req_id: str) -> None:
        self.tokens.pop(req_id, None)


class ArrayTokenMirror:
    """`TokenMirror` as growable int64 arrays, for proposers that search the context with numpy (n-gram),
    so no step copies a whole context from a list."""

    def __init__(self) -> None:
        self.buffers: dict[str, tuple[np.ndarray, int]] = {}

    def update(self, d: DraftInput) -> np.ndarray:
        buf, n = self.buffers.get(d.req_id, (np.empty(0, dtype=np.int64), 0))
        n = min(n, d.start)
        end = n + len(d.new_tokens)
        if end > len(buf):
            grown = np.empty(max(2 * len(buf), end, 64), dtype=np.int64)
            grown[:n] = buf[:n]
            buf = grown
        buf[n:end] = d.new_tokens
        self.buffers[d.req_id] = (buf, end)
        return buf[:end]

    def snapshot(self, req_id: str) -> list[int]:
        buf, n = self.buffers[req_id]
        return buf[:n].tolist()

    def release(self, req_id: str) -> None:
        self.buffers.pop(req_id, None)
