"""Continuous batching with chunked prefill, a per-step token budget, a cap on running sequences, and
recompute preemption when KV blocks run short (requests queue, nothing crashes).

Decoding requests go first (each needs 1 + its draft budget tokens); prefill chunks of running then waiting
requests fill the rest of the token budget. When a decoding request cannot get a block, the most recently
admitted request is preempted: its blocks are freed (full ones stay in the prefix cache) and it re-enters the
queue at the front to be recomputed.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from workers.block_pool import BlockPool, NoFreeBlocksError
from workers.request import Request, Status


@dataclass(slots=True)
class ScheduledStep:
    decodes: list[tuple[Request, int]] = field(default_factory=list)  # (request, max draft tokens)
    prefills: list[tuple[Request, int]] = field(default_factory=list)  # (request, chunk length)
    preempted: list[Request] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.decodes and not self.prefills


class Scheduler:
    cap_only_cut = True  # False: cap every request's drafts while prompts wait (the A/B variant alwaysreserve)
    # While prompts wait, each decoding request's adaptive drafts are capped at its even part of the budget left
    # beyond this share of it: with deep n-gram drafts (k=15) a request whose whole draft was verified keeps k,
    # and at c=32 drafts took 384 of the 512-token budget, down to the 128-token floor left to prompts
    # (`chunk_align`), and no step was pure decode (docs/performance.md, "sixteenth session"). At k <= 7 and
    # c <= 32 (8 rows a request) it never binds.
    prefill_share = 0.5
    # Adaptive drafts deeper than `k_under_load` (None: k) only in pure decode steps, and there only up to the
    # depth at which every decoding request's rows fit in `deep_rows` (None: no bound). n-gram drafts of k=15
    # read +2.8% over k=7 at c=2 and 1-2% under it at c=8-32, in pure decode steps too (docs/performance.md,
    # "seventeenth session"); set from SpecConfig.k_under_load and deep_draft_rows by the engine.
    k_under_load: int | None = None
    deep_rows: int | None = None
    # While prompts wait, adaptive drafts go deeper than `k_waiting` (None: no bound) only while every decoding
    # request's rows fit `deep_rows` (at most k_under_load still): 7 at 1-4 requests, 5 at 5, 4 from 6. At n-gram
    # repetitive c=32, 4 read +3-7% over 7 in all three cycles of an A/B, at c=8-32 otherwise within 0.5%, and at
    # repetitive c=2 1.6% under it (docs/performance.md, "twentieth session"); set from SpecConfig.k_waiting.
    k_waiting: int | None = None

    def __init__(self, pool: BlockPool, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 chunk_align: int = 1) -> None:
        self.pool = pool
        # Batch-invariant mode: prefill chunks end (unless at the prompt's end) and prefix-cache hits stop on
        # multiples of chunk_align positions, so attention segments are the same whatever the load.
        self.chunk_align = chunk_align
        self.max_num_seqs = max_num_seqs
        self.token_budget = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # ---- block bookkeeping ------------------------------------------------------------------------------
    def _grow(self, req: Request, num_tokens: int) -> None:
        need = -(-num_tokens // self.pool.block_size) - len(req.blocks)
        if need > 0:
            req.blocks.extend(self.pool.allocate(need))

    def release(self, req: Request) -> None:
        self.pool.free(req.blocks)
        req.blocks, req.block_keys = [], []

    def commit_full_blocks(self, req: Request) -> None:
        """Make this request's newly completed blocks of final tokens findable by later requests."""
        bs = self.pool.block_size
        for j in range(len(req.block_keys), req.num_computed // bs):
            parent = req.block_keys[-1] if req.block_keys else None
            req.block_keys.append(self.pool.register_full_block(req.blocks[j], parent, req.tokens[j * bs:(j + 1) * bs]))

    def _preempt(self, req: Request) -> None:
        self.release(req)
        req.num_computed = 0
        req.status = Status.WAITING
        req.num_preemptions += 1
        self.running.remove(req)
        self.waiting.appendleft(req)

    # ---- the step plan ----------------------------------------------------------------------------------
    def schedule(self, k: int, adaptive_drafts: bool = False) -> ScheduledStep:
        """adaptive_drafts: while prompts wait for prefill, reserve budget for a request whose last draft the
        trim cut only for the drafts it is likely to verify (one more than it verified last step), not for all
        k: the adaptive policy trims the rest, and budget reserved for trimmed drafts would be lost to prefill
        for this step. A request whose whole draft was verified keeps k (`cap_only_cut`): its short last draft
        was the proposer's, and capping it only shortened its next one. Nor does any request draft beyond its
        even part of the budget that `prefill_share` leaves to drafts, nor deeper than `k_under_load` but in
        pure decode steps whose rows fit `deep_rows`, nor, while prompts wait, deeper than `k_waiting` but where
        the rows fit."""
        step = ScheduledStep()
        budget = self.token_budget
        prefilling = self.waiting or any(not r.is_decoding for r in self.running)
        reserve = min(self.chunk_align, budget // 2) if prefilling else 0  # drafts never starve prefill
        most = k
        deep = self.k_under_load is not None and k > self.k_under_load
        if adaptive_drafts and (deep or prefilling):  # otherwise nothing below reads `decoding` (every step)
            decoding = max(1, sum(1 for r in self.running if r.status is Status.RUNNING and r.is_decoding))
            roomy = k if self.deep_rows is None else self.deep_rows // decoding - 1  # depth whose rows fit
            if deep:
                most = self.k_under_load if prefilling else max(self.k_under_load, min(k, roomy))
            if prefilling:  # `k_waiting`, `prefill_share`
                most = min(most, int(budget * (1 - self.prefill_share)) // decoding - 1,
                           k if self.k_waiting is None else max(self.k_waiting, roomy))
        for req in list(self.running):
            if req.status is not Status.RUNNING or not req.is_decoding:
                continue
            want = (min(most, req.last_verified + 1) if adaptive_drafts and prefilling
                    and (req.last_cut or not self.cap_only_cut) else most)
            drafts = max(0, min(want, req.max_tokens - req.num_output - 1,
                                self.max_model_len - len(req.tokens) - 1, budget - reserve - 1))
            while True:
                try:
                    self._grow(req, len(req.tokens) + drafts)
                    break
                except NoFreeBlocksError:
                    victim = self.running[-1]
                    self._preempt(victim)
                    step.preempted.append(victim)
                    if victim is req:
                        break
            if req.status is Status.RUNNING:
                step.decodes.append((req, drafts))
                budget -= 1 + drafts
        for req in self.running:  # running requests still prefilling (chunked)
            if budget <= 0:
                break
            if not req.is_decoding and req.num_computed < len(req.tokens):
                budget -= self._schedule_prefill(req, budget, step)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if not self._admit(req):
                break
            self.waiting.popleft()
            req.status = Status.RUNNING
            self.running.append(req)
            budget -= self._schedule_prefill(req, budget, step)
        return step

    def _admit(self, req: Request) -> bool:
        bs = self.pool.block_size
        unit = max(1, self.chunk_align // bs)  # hits count in whole alignment units
        hits = self.pool.lookup_prefix(req.tokens, (len(req.tokens) - 1) // bs, unit)
        first_chunk = min(len(req.tokens) - len(hits) * bs, self.token_budget)
        need = -(-(len(hits) * bs + first_chunk) // bs) - len(hits)
        if need > self.pool.num_free:
            self.pool.free(hits)
            return False
        req.blocks = hits
        req.num_computed = len(hits) * bs
        req.num_cached_tokens = max(req.num_cached_tokens, min(req.num_computed, req.num_prompt))
        req.block_keys = []
        parent = None
        for j in range(len(hits)):
            parent = self.pool.block_key(parent, req.tokens[j * bs:(j + 1) * bs])
            req.block_keys.append(parent)
        return True

    def _schedule_prefill(self, req: Request, budget: int, step: ScheduledStep) -> int:
        remaining = len(req.tokens) - req.num_computed
        chunk = min(remaining, budget)
        if chunk < remaining:  # cut by the budget: end on an alignment boundary
            chunk = (req.num_computed + chunk) // self.chunk_align * self.chunk_align - req.num_computed
        try:
            self._grow(req, req.num_computed + chunk)
        except NoFreeBlocksError:
            fits = len(req.blocks) * self.pool.block_size
            chunk = fits // self.chunk_align * self.chunk_align - req.num_computed  # what already fits
        if chunk <= 0:
            return 0
        step.prefills.append((req, chunk))
        return chunk

    def finish(self, req: Request) -> None:
        self.release(req)
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
