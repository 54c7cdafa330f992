"""N-gram prompt lookup: match the context's last n tokens earlier in the context and propose what followed.

Costs microseconds and no model. Tries n from ngram_max down to ngram_min and takes the most recent earlier
match of the longest n (recent text predicts the next tokens best). Feature per position: the match length.
"""
from __future__ import annotations

import numpy as np
import torch

from workers.proposers.base import DraftInput, Proposal, TokenMirror


def find_continuation(tokens: np.ndarray, n_min: int, n_max: int, k: int) -> tuple[np.ndarray, int]:
    """Return (up to k following tokens, matched n) for the longest suffix match, or (empty, 0)."""
    L = len(tokens)
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        suffix = tokens[L - n:]
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: L - 1], n)  # starts 0..L-1-n
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start:start + k], n
    return tokens[:0], 0


class NgramProposer:
    feature_names = ("match_len",)

    def __init__(self, k: int, ngram_min: int = 2, ngram_max: int = 4) -> None:
        self.k, self.n_min, self.n_max = k, ngram_min, ngram_max
        self._mirror = TokenMirror()
        self._arrays: dict[str, np.ndarray] = {}

    def propose(self, batch: list[DraftInput]) -> Proposal:
        out = Proposal.empty(len(batch), self.k)
        feats = torch.zeros(len(batch), self.k, 1)
        for b, d in enumerate(batch):
            toks = np.asarray(self._mirror.update(d), dtype=np.int64)
            if d.max_drafts <= 0:
                continue
            cont, n = find_continuation(toks, self.n_min, self.n_max, min(self.k, d.max_drafts))
            m = len(cont)
            out.draft_tokens[b, :m] = torch.from_numpy(cont.copy())
            out.num_drafts[b] = m
            feats[b, :m, 0] = n
        out.features = feats
        return out

    def release(self, req_id: str) -> None:
        self._mirror.release(req_id)
