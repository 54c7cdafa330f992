"""Lossless verification of draft tokens (Leviathan et al. 2023; Chen et al. 2023), batched.

For one request with n verified drafts x_1..x_n, target distributions p_1..p_{n+1} and draft distributions q_i:
- a draft x_i is **accepted** with probability min(1, p_i(x_i) / q_i(x_i)) (greedy: iff x_i = argmax p_i),
  and verification stops at the first rejection;
- at the first rejected position i a **recovered** token is drawn from the residual
  max(0, p_i - q_i) / sum(max(0, p_i - q_i)) (greedy: argmax p_i);
- when all n drafts pass, a **bonus** token is drawn from p_{n+1}.
So every step emits between 1 and n+1 tokens and the output follows p exactly. Deterministic drafts (n-gram)
have q = one-hot. n = 0 is plain sampling. No per-request loop and no host sync in here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from workers.sampling import LANE_ACCEPT, LANE_SAMPLE, BatchSampling, hash_uniform, logits_to_probs, sample_from


@dataclass(slots=True)
class SparseProbs:
    """A draft distribution that is exactly sparse (the draft sampled from its top-S)."""

    idx: torch.Tensor  # [B, K, S] token ids
    val: torch.Tensor  # [B, K, S] probabilities (sum to 1 over S)

    def at(self, tokens: torch.Tensor) -> torch.Tensor:  # tokens [B, K] -> q(token) [B, K]
        return (self.val * (self.idx == tokens[..., None])).sum(-1)


def greedy_verify(
    target_tokens: torch.Tensor,  # [B, K+1] argmax of the target at each position
    draft_tokens: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature 0: accept while draft == target argmax; then emit the target's own token."""
    B, K1 = target_tokens.shape
    K = K1 - 1
    pos = torch.arange(K, device=target_tokens.device)
    accept = (draft_tokens == target_tokens[:, :K]) & (pos[None] < num_draft[:, None])
    num_acc = accept.long().cumprod(1).sum(1)
    out = torch.where(torch.arange(K1, device=pos.device)[None] <= num_acc[:, None], target_tokens, -1)
    return out, num_acc


def rejection_sample(
    target_logits: torch.Tensor,  # [B, K+1, V] float32
    draft_tokens: torch.Tensor,  # [B, K] int64 (-1 where absent)
    num_draft: torch.Tensor,  # [B] int64 in 0..K
    draft_probs: SparseProbs | None,  # None: deterministic drafts
    sampling: BatchSampling,
) -> tuple[torch.Tensor, torch.Tensor]:  # output [B, K+1] padded with -1, num_accepted [B]
    B, K1, V = target_logits.shape
    K = K1 - 1
    dev = target_logits.device
    rows = torch.arange(B, device=dev)
    greedy = sampling.greedy
    greedy_tok = target_logits.argmax(-1)  # [B, K+1]
    if bool(greedy.all()):  # no distribution needed: skip the softmax over the vocabulary
        return greedy_verify(greedy_tok, draft_tokens, num_draft)
    rep = lambda x: x.repeat_interleave(K1)  # noqa: E731  per-row params for each position
    probs = logits_to_probs(target_logits.reshape(B * K1, V), rep(sampling.temperature), rep(sampling.top_k),
                            rep(sampling.top_p)).view(B, K1, V)
    if K > 0:
        pos = torch.arange(K, device=dev)
        drafts = draft_tokens.clamp(min=0)
        p_d = probs[:, :K].gather(-1, drafts[..., None])[..., 0]  # [B, K]
        q_d = draft_probs.at(drafts) if draft_probs is not None else torch.ones_like(p_d)
        u = hash_uniform(sampling.seed[:, None], sampling.out_pos[:, None] + pos[None], LANE_ACCEPT)
        accept = torch.where(greedy[:, None], drafts == greedy_tok[:, :K], u * q_d < p_d)
        accept &= pos[None] < num_draft[:, None]
        num_acc = accept.long().cumprod(1).sum(1)  # [B]
    else:
        num_acc = torch.zeros(B, dtype=torch.long, device=dev)
    p_a = probs[rows, num_acc]  # [B, V] target distribution where the step ends
    if K > 0:
        at = num_acc.clamp(max=K - 1)
        q_a = torch.zeros_like(p_a)
        if draft_probs is None:
            q_a.scatter_(-1, drafts[rows, at][:, None], 1.0)
        else:
            q_a.scatter_(-1, draft_probs.idx[rows, at], draft_probs.val[rows, at])
        q_a *= (num_acc < num_draft)[:, None]  # bonus position: sample p itself
        residual = (p_a - q_a).clamp_min(0)
        p_a = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_a)
    u2 = hash_uniform(sampling.seed, sampling.out_pos + num_acc, LANE_SAMPLE)
    last = torch.where(greedy, greedy_tok[rows, num_acc], sample_from(p_a, u2))
    out = torch.full((B, K1), -1, dtype=torch.long, device=dev)
    if K > 0:
        out[:, :K] = torch.where(pos[None] < num_acc[:, None], draft_tokens, -1)
    out.scatter_(1, num_acc[:, None], last[:, None])
    return out, num_acc
