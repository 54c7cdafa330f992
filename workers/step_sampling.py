"""The sampling half of an engine step: the target's logits rows -> each verified request's tokens.

Gathers, for every request that produced logits (a decode step with its drafts, or a prefill that just
completed: a verify with 0 drafts), its K+1 logits rows, its drafts and their probabilities, and runs the
rejection sampler (workers/rejection_sampler.py) once for the batch. Pure tensor work and one host sync; the
engine keeps the bookkeeping (appending, stop conditions, KV, learning).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from workers.proposers.base import Proposal
from workers.rejection_sampler import SparseProbs, greedy_verify, rejection_sample
from workers.sampling import BatchSampling

if TYPE_CHECKING:
    from workers.request import Request

# (row in the proposal or -1 for a completed prefill, request, drafts verified, first logits row)
VerifyRow = tuple[int, "Request", int, int]


def sample_verified(logits: torch.Tensor,  # [rows, V] the step's logits rows
                    verify: list[VerifyRow], proposal: Proposal | None) -> tuple[list[list[int]], list[int]]:
    """Every verified request's output tokens (padded with -1, K+1 wide) and its number of accepted drafts,
    as host lists (the step's one sync)."""
    dev = logits.device
    K = max(n for _, _, n, _ in verify)
    rows = torch.tensor([[r0 + min(j, n) for j in range(K + 1)] for _, _, n, r0 in verify], device=dev)
    drafts = torch.full((len(verify), K), -1, dtype=torch.long)
    probs = None
    if K > 0 and proposal is not None:
        src = torch.tensor([max(b, 0) for b, _, _, _ in verify])
        has = torch.tensor([b >= 0 for b, _, _, _ in verify])
        drafts = torch.where(has[:, None], proposal.draft_tokens[src, :K], -1)
        if proposal.probs is not None:
            probs = SparseProbs(proposal.probs.idx[src, :K].to(dev), proposal.probs.val[src, :K].to(dev))
    sampling = BatchSampling.build(
        [(r.params.temperature, r.params.top_k, r.params.top_p, r.seed, r.num_output) for _, r, _, _ in verify], dev)
    num_draft = torch.tensor([n for _, _, n, _ in verify], device=dev)
    if bool(sampling.greedy.all()):  # argmax before gathering: no [B, K+1, V] copy, no softmax
        out, num_acc = greedy_verify(logits.argmax(-1)[rows], drafts.to(dev), num_draft)
    else:
        out, num_acc = rejection_sample(logits[rows], drafts.to(dev), num_draft, probs, sampling)
    return out.tolist(), num_acc.tolist()
