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
    # leading kv_tokens known to equal the request's committed tokens: only those after it are compared (a
    # token-by-token comparison and copy of the whole context was ~35 us per request per step at ~200 tokens)
    known: int = 0


def _common_prefix(a: list[int], b: list[int], start: int = 0) -> int:
    """Length of the common prefix of `a` and `b`, given that their first `start` items are equal."""
    n = min(len(a), len(b))
    i = min(start, n)
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
            st.known = min(st.known, d.start)  # the committed tokens from d.start on were replaced
            if d.max_drafts <= 0:
                continue
            keep = min(_common_prefix(st.kv_tokens, ctx, st.known), len(ctx) - 1)  # always recompute >= 1 token
            try:
                self._ensure_blocks(st, len(ctx) + d.max_drafts)
            except NoFreeBlocksError:
                continue  # draft cache full: this request goes without drafts this step
            del st.kv_tokens[keep:]
            st.known = len(ctx)  # the first iteration feeds ctx[keep:]: then kv_tokens starts with ctx
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
        top = logits.topk(self.top_s, dim=-1)  # values/indices [n, S], descending
        log_p = logits.log_softmax(-1)  # [n, V]
        # features: top-1 probability, top1-top2 margin, entropy (written in one indexed copy: each cost ~15 us)
        feats[rows, i] = torch.stack((log_p.gather(-1, top.indices[:, :1])[:, 0].exp(),
                                      top.values[:, 0] - top.values[:, 1],
                                      -(log_p.exp() * log_p.clamp_min(-69.0)).sum(-1)), dim=-1)  # 0 log 0 = 0
        tokens = top.indices if self._head_ids is None else self._head_ids[top.indices]  # [n, S] target ids
        idx[rows, i] = tokens
        temps = [r.temperature for r in reqs]
        if not any(temps):  # all greedy: the argmax, q one-hot at it (val's default), no randomness drawn
            return tokens[:, 0]
        temp = torch.tensor(temps)
        greedy = temp == 0
        q = (top.values / torch.where(greedy, 1.0, temp)[:, None]).softmax(-1)  # [n, S] exactly sparse
        u = hash_uniform(torch.tensor([r.seed for r in reqs]), torch.tensor([r.out_pos + i for r in reqs]), LANE_DRAFT)
        choice = torch.where(greedy, 0, sample_from(q, u))
        one_hot = torch.nn.functional.one_hot(torch.zeros_like(choice), self.top_s).float()
        val[rows, i] = torch.where(greedy[:, None], one_hot, q)
        return tokens.gather(-1, choice[:, None])[:, 0]

    def release(self, req_id: str) -> None:
        self._mirror.release(req_id)
        st = self._state.pop(req_id, None)
        if st is not None and st.blocks:
            self.runner.pool.free(st.blocks)
