"""A draft model proposer: any causal LM with the target's tokenizer, with its own paged KV cache.

Each step it first catches up on the tokens committed since its last call (usually the accepted drafts plus
the target's token; the whole prompt the first time), then drafts autoregressively. Its KV cache keeps the
longest prefix that still matches the committed context, so accepted drafts are never recomputed.
Greedy requests draft argmax; sampling requests draw from the draft's top-S at their temperature, so the
draft distribution q sent to the verifier is exactly sparse. Features per position: top-1 probability,
top1-top2 logit margin, entropy (of the temperature-1 draft distribution).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workers.block_pool import NoFreeBlocksError
from workers.model_runner import ModelRunner, StepChunk
from workers.proposers.base import DraftInput, Proposal, TokenMirror
from workers.rejection_sampler import SparseProbs
from workers.sampling import LANE_DRAFT, hash_uniform, sample_from


@dataclass(slots=True)
class _DraftState:
    kv_tokens: list[int] = field(default_factory=list)  # tokens whose KV is in the draft cache
    blocks: list[int] = field(default_factory=list)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class DraftModelProposer:
    feature_names = ("top1_prob", "margin", "entropy")

    def __init__(self, runner: ModelRunner, k: int, top_s: int = 32) -> None:
        self.runner, self.k, self.top_s = runner, k, min(top_s, runner.model.lm_head.shape[0])
        self._mirror = TokenMirror()
        self._state: dict[str, _DraftState] = {}
        head = runner.model.head_ids  # a reduced output vocabulary maps logit columns to target ids
        self._head_ids = None if head is None else head.cpu()

    def _ensure_blocks(self, st: _DraftState, num_tokens: int) -> None:
        need = -(-num_tokens // self.runner.block_size) - len(st.blocks)
        if need > 0:
            st.blocks.extend(self.runner.pool.allocate(need))

    def propose(self, batch: list[DraftInput]) -> Proposal:
        B, K, S = len(batch), self.k, self.top_s
        out = Proposal.empty(B, K)
        idx = torch.zeros(B, K, S, dtype=torch.long)
        val = torch.zeros(B, K, S)
        val[..., 0] = 1.0
        feats = torch.zeros(B, K, 3)
        active: list[int] = []
        chunks: list[StepChunk] = []
        for b, d in enumerate(batch):
            ctx = self._mirror.update(d)
            st = self._state.setdefault(d.req_id, _DraftState())
            if d.max_drafts <= 0:
                continue
            keep = min(_common_prefix(st.kv_tokens, ctx), len(ctx) - 1)  # always recompute >= 1 token
            try:
                self._ensure_blocks(st, len(ctx) + d.max_drafts)
            except NoFreeBlocksError:
                continue  # draft cache full: this request goes without drafts this step
            st.kv_tokens = list(ctx[:keep])
            chunks.append(StepChunk(ctx[keep:], keep, st.blocks, 1))
            active.append(b)
        for i in range(K):
            if not active:
                break
            logits = self.runner.run(chunks)  # [len(active), V]
            toks = self._draft_step(logits, [batch[b] for b in active], i, active, idx, val, feats)
            out.draft_tokens[active, i] = toks
            out.num_drafts[active] += 1
            nxt_active, nxt_chunks = [], []
            for j, b in enumerate(active):
                st = self._state[batch[b].req_id]
                st.kv_tokens.extend(chunks[j].token_ids)
                if i + 1 < batch[b].max_drafts:
                    nxt_active.append(b)
                    nxt_chunks.append(StepChunk([int(toks[j])], len(st.kv_tokens), st.blocks, 1))
            active, chunks = nxt_active, nxt_chunks
        out.probs = SparseProbs(idx, val)
        out.features = feats
        return out

    def _draft_step(self, logits: torch.Tensor, reqs: list[DraftInput], i: int, rows: list[int],
                    idx: torch.Tensor, val: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        logits = logits.float().cpu()  # [n, V]: drafts and their sparse q travel as small CPU tensors
        temp = torch.tensor([r.temperature for r in reqs])
        greedy = temp == 0
        top = logits.topk(self.top_s, dim=-1)  # values/indices [n, S], descending
        p1 = logits.softmax(-1)
        feats[rows, i, 0] = p1.gather(-1, top.indices[:, :1])[:, 0]
        feats[rows, i, 1] = top.values[:, 0] - top.values[:, 1]
        feats[rows, i, 2] = -(p1 * p1.clamp_min(1e-30).log()).sum(-1)
        q = (top.values / torch.where(greedy, 1.0, temp)[:, None]).softmax(-1)  # [n, S] exactly sparse
        u = hash_uniform(torch.tensor([r.seed for r in reqs]), torch.tensor([r.out_pos + i for r in reqs]), LANE_DRAFT)
        choice = torch.where(greedy, 0, sample_from(q, u))
        tokens = top.indices if self._head_ids is None else self._head_ids[top.indices]  # [n, S] target ids
        idx[rows, i] = tokens
        val[rows, i] = torch.where(greedy[:, None], torch.nn.functional.one_hot(torch.zeros_like(choice), self.top_s).float(), q)
        return tokens.gather(-1, choice[:, None])[:, 0]

    def release(self, req_id: str) -> None:
        self._mirror.release(req_id)
        st = self._state.pop(req_id, None)
        if st is not None and st.blocks:
            self.runner.pool.free(st.blocks)
