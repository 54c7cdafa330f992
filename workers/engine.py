"""The engine: add_request / abort / step, continuous batching with speculative decoding. No Ray in here.

One step: the scheduler picks decoding requests (with a draft budget each) and prefill chunks; the proposer
drafts for the decoding ones in one batched call; the target computes everything in ONE ragged forward; the
rejection sampler turns the logits into tokens for every request that produced logits (decoding requests and
prefills that just completed, which are verify steps with 0 drafts); then tokens are appended, stop conditions
checked, KV rolled back to the accepted prefix, and full blocks registered in the prefix cache.
"""
from __future__ import annotations

import itertools
import logging
import random
import time
from dataclasses import dataclass

import torch

from workers.adaptive import AdaptiveVerifier
from workers.attention import PREFILL_SEGMENT
from workers.config import EngineConfig, SamplingParams
from workers.detokenizer import IncrementalDetokenizer
from workers.heap import HeapTrimmer
from workers.llama import LlamaForward
from workers.metrics import LatencyStats, SpecStats, StepTimes
from workers.model_runner import ModelRunner, StepChunk, pick_device, pick_dtype
from workers.model_store import resolve_model
from workers.online_costs import extra_groups, ragged_extra
from workers.proposers.base import DraftInput, Proposal, Proposer
from workers.proposers.factory import build_proposer
from workers.request import Request, Status
from workers.scheduler import Scheduler
from workers.step_sampling import VerifyRow, sample_verified
from workers.tensor_parallel import ShardPeers, attach_shard_peers

log = logging.getLogger(__name__)


class InvalidRequestError(ValueError):
    """The request cannot be served as given (a 400 at the HTTP layer)."""


@dataclass(slots=True)
class RequestOutput:
    req_id: str
    new_token_ids: list[int]
    delta_text: str
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    request: Request | None = None  # the finished request (stats, timings), on its last output only


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, proposer: Proposer | None = None,
                 shard_peers: ShardPeers | None = None) -> None:
        """`proposer`: drafts from elsewhere (the cluster's drafter actors); default: built from config.spec.
        `shard_peers`: ranks 1.. of a tensor-parallel target (config.tensor_parallel_size > 1)."""
        from transformers import AutoTokenizer

        self.config = config = config or EngineConfig()
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        folder = resolve_model(config.model)
        device = pick_device(config.device)
        dtype = pick_dtype(config.dtype, device)
        self.model, hf_config = LlamaForward.load(folder, device, dtype, config.batch_invariant)
        self.shard_peers = attach_shard_peers(self.model, config, shard_peers)
        # bf16/fp16 blocks of small rows rely on GEMM rows that do not depend on M: checked per weight shape
        # when the model loads (LlamaForward.plan_row_invariance). None: not checked (fp32, or off).
        self.gemm_rows_invariant: bool | None = self.model.rows_invariant
        if self.model.k_parts:
            log.info("this machine's %s GEMM rows depend on the row count for %d weights: they run split along "
                     "their inputs (docs/architecture.md, batch-invariant verify path)", dtype, len(self.model.k_parts))
        if self.gemm_rows_invariant is False:
            log.warning("this machine's %s GEMM rows depend on the row count: greedy output may depend on the "
                        "batch, with or without speculation (docs/architecture.md, batch-invariant verify "
                        "path)", dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.max_model_len = min(config.max_model_len or 10**9, hf_config.max_position_embeddings)
        self.runner = ModelRunner(self.model, int(config.kv_cache_memory_gb * 2**30), config.block_size,
                                  config.enable_prefix_caching, self.shard_peers)
        self.scheduler = Scheduler(self.runner.pool, config.max_num_seqs, config.max_num_batched_tokens,
                                   self.max_model_len, PREFILL_SEGMENT if config.batch_invariant else 1)
        self.proposer = proposer if proposer is not None else build_proposer(config, device, dtype, self.model.vocab_size)
        self.k = self.proposer.k if self.proposer is not None else 0
        self.adaptive = AdaptiveVerifier.build(self) if self.proposer is not None and \
            config.spec.verify != "fixed" else None
        if self.adaptive is not None:  # drafts deeper than k_under_load: pure decode steps at low load only
            self.scheduler.k_under_load = config.spec.k_under_load
            self.scheduler.deep_rows = config.spec.deep_draft_rows
            self.scheduler.k_waiting = config.spec.k_waiting
        eos = hf_config.eos_token_id
        self.eos_ids = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.requests: dict[str, Request] = {}
        self.spec_stats = SpecStats()
        self.latency = LatencyStats()
        self.step_times = StepTimes()  # where the steps' time went (stats()["step_times"])
        self._policy_s = 0.0  # this step's adaptive verifier calls
        self.num_steps = 0
        self.heap = HeapTrimmer(config.heap_trim_interval_s)
        self._ids = itertools.count()
        self._rng = random.Random()

    # ---- requests ---------------------------------------------------------------------------------------
    def encode_prompt(self, prompt: str | list[int], chat: bool = False) -> list[int]:
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        if chat:
            return self.encode_chat([{"role": "user", "content": prompt}])
        return self.tokenizer.encode(prompt)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """A conversation in the model's chat template, ready for the assistant's reply."""
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                       return_dict=False))

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    req_id: str | None = None, chat: bool = False) -> str:
        params = params or SamplingParams()
        ids = self.encode_prompt(prompt, chat)
        if not ids:
            raise InvalidRequestError("the prompt is empty")
        if any(t < 0 or t >= self.model.vocab_size for t in ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {self.model.vocab_size})")
        if len(ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.max_model_len} tokens "
                f"(prompt + output)")
        if -(-(len(ids) + 1) // self.runner.block_size) > self.runner.pool.num_blocks:
            raise InvalidRequestError(f"the prompt has {len(ids)} tokens, more than the KV cache holds")
        req_id = req_id or f"req-{next(self._ids)}"
        if req_id in self.requests:
            raise InvalidRequestError(f"request id {req_id!r} is already in use")
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_ids)
        req = Request(req_id, ids, params,
                      seed=params.seed if params.seed is not None else self._rng.getrandbits(62),
                      stop_ids=stop_ids, max_tokens=min(params.max_tokens, self.max_model_len - len(ids)),
                      detok=IncrementalDetokenizer(self.tokenizer, params.stop, stop_ids))
        self.requests[req_id] = req
        self.scheduler.waiting.append(req)
        return req_id

    def abort(self, req_id: str) -> bool:
        req = self.requests.get(req_id)
        if req is None or req.finished:
            return False
        self._finish(req, "abort")
        return True

    def has_unfinished(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running)

    # ---- the step ---------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        t_start = time.perf_counter()
        plan = self.scheduler.schedule(self.k, adaptive_drafts=self.adaptive is not None)
        if plan.empty:
            self.heap.maybe_trim()
            return self._collect_outputs()
        self._policy_s = 0.0
        if self.adaptive is not None:
            self._policy(self.adaptive.plan_depths, plan)
        t_draft = time.perf_counter()
        proposal = self._propose(plan.decodes)
        draft_s = time.perf_counter() - t_draft
        draft_depth = int(proposal.num_drafts.max()) if proposal is not None and len(plan.decodes) else 0
        drafted = None
        if self.adaptive is not None and proposal is not None:
            drafted = proposal.num_drafts.tolist()
            self._policy(self.adaptive.trim, proposal, plan)
        chunks, verify = [], []  # verify: (row in the proposal or -1, request, drafts, first logits row)
        row = 0
        for b, (req, _) in enumerate(plan.decodes):
            n = int(proposal.num_drafts[b]) if proposal is not None else 0
            drafts = proposal.draft_tokens[b, :n].tolist() if n else []
            chunks.append(StepChunk([req.tokens[-1]] + drafts, req.num_computed, req.blocks, 1 + n))
            verify.append((b, req, n, row))
            req.last_cut = drafted is not None and n < drafted[b]
            row += 1 + n
        for req, chunk in plan.prefills:
            done = req.num_computed + chunk == len(req.tokens)
            chunks.append(StepChunk(req.tokens[req.num_computed:req.num_computed + chunk], req.num_computed,
                                    req.blocks, 1 if done else 0))
            if done:
                verify.append((-1, req, 0, row))
                row += 1
            else:
                req.num_computed += chunk
        t0 = time.perf_counter()
        logits = self.runner.run(chunks)  # [rows, V]
        if logits.is_cuda:  # the forward's time, not its launch's, refreshes the cost table (the verify syncs anyway)
            torch.cuda.synchronize(logits.device)
        forward_s = time.perf_counter() - t0
        self.num_steps += 1
        if verify:
            self._verify(logits, verify, proposal)
        for req, chunk in plan.prefills:
            if req.status is Status.RUNNING:
                self.scheduler.commit_full_blocks(req)
        if self.adaptive is not None:
            rows = [len(c.token_ids) for c in chunks]
            self._policy(self.adaptive.observe_step, time.perf_counter() - t_start, forward_s, draft_s, len(chunks),
                         sum(rows), not plan.prefills, len(plan.decodes), draft_depth, ragged_extra(rows),
                         extra_groups(rows))
        self.heap.maybe_trim()
        outputs = self._collect_outputs()
        self.step_times.observe(time.perf_counter() - t_start, forward_s, draft_s, self._policy_s)
        return outputs

    def _policy(self, call, *args) -> None:
        """One of the adaptive verifier's calls, its time counted in the step's policy time (`step_times`)."""
        t = time.perf_counter()
        call(*args)
        seconds = time.perf_counter() - t
        self._policy_s += seconds
        self.step_times.observe_policy(call.__name__, seconds)

    def _propose(self, decodes: list[tuple[Request, int]]) -> Proposal | None:
        """None when no request may draft: the proposer is not called (its copies of the requests' tokens
        catch up by the larger delta next time), which an adaptive engine planning no drafts at c=32 paid
        ~0.1 ms a step for."""
        if self.proposer is None or not any(d for _, d in decodes):
            return None
        batch = []
        for req, max_drafts in decodes:
            batch.append(DraftInput(req.req_id, req.proposer_synced, req.tokens[req.proposer_synced:], max_drafts,
                                    req.params.temperature, req.seed, req.num_output))
            req.proposer_synced = len(req.tokens)
        return self.proposer.propose(batch)

    def _verify(self, logits: torch.Tensor, verify: list[VerifyRow], proposal: Proposal | None) -> None:
        """Sample every request that produced logits (workers/step_sampling.py), then append and account."""
        out_l, acc_l = sample_verified(logits, verify, proposal)
        if self.adaptive is not None and proposal is not None:
            self._policy(self.adaptive.learn, proposal, verify, acc_l)
        now = time.perf_counter()
        for (b, req, n, _), toks, a in zip(verify, out_l, acc_l):
            if b >= 0:  # a decode step: the input token and the accepted drafts now have valid KV
                req.num_computed += 1 + a
                req.last_verified = n
                req.spec.observe(n, a, a + 1)
                self.spec_stats.observe(n, a, a + 1)
            else:
                req.num_computed = len(req.tokens)
            self._append(req, toks[: a + 1], now)
            if req.status is Status.RUNNING:
                self.scheduler.commit_full_blocks(req)

    def _append(self, req: Request, new: list[int], now: float) -> None:
        """Append accepted tokens (`Request.append_output`), record their latencies, finish on a stop."""
        first = req.first_token_time is None
        reason, gaps = req.append_output(new, now)
        if first:
            self.latency.ttft.append(now - req.arrival)
        self.latency.itl.extend(gaps)
        if reason is not None:
            self._finish(req, reason)

    def _finish(self, req: Request, reason: str) -> None:
        req.status = Status.FINISHED
        req.finish_reason = reason
        self.scheduler.finish(req)
        if self.proposer is not None:
            self.proposer.release(req.req_id)
        if self.adaptive is not None:
            self.adaptive.forget(req.req_id)

    def _collect_outputs(self) -> list[RequestOutput]:
        outs = []
        for req_id, req in list(self.requests.items()):
            new_ids = req.output_ids[req.sent_tokens:]
            delta = req.text[req.sent_text_len:]
            if new_ids or delta or req.finished:
                outs.append(RequestOutput(req_id, new_ids, delta, req.finished, req.finish_reason))
                req.sent_tokens += len(new_ids)
                req.sent_text_len += len(delta)
            if req.finished:
                del self.requests[req_id]
                outs[-1].request = req
        return outs

    # ---- conveniences -----------------------------------------------------------------------------------
    def generate(self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams],
                 chat: bool = False) -> list[Request]:
        """Run prompts to completion (offline batch); returns the finished requests in prompt order."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        ids = [self.add_request(p, sp, chat=chat) for p, sp in zip(prompts, plist)]
        done: dict[str, Request] = {}
        while len(done) < len(ids):
            for o in self.step():
                if o.request is not None:
                    done[o.req_id] = o.request
        return [done[i] for i in ids]

    def stats(self) -> dict[str, object]:
        pool = self.runner.pool
        return {
            "spec_decode": self.spec_stats.to_dict(),
            "latency": self.latency.to_dict(),
            "step_times": self.step_times.to_dict(),
            "num_steps": self.num_steps,
            "kv_blocks_used": pool.num_used,
            "kv_blocks_total": pool.num_blocks,
            "prefix_cache_hit_rate": round(pool.hits / pool.queries, 4) if pool.queries else 0.0,
            "waiting": len(self.scheduler.waiting),
            "running": len(self.scheduler.running),
            "heap_trims": self.heap.trims,
            "heap_trim_seconds": round(self.heap.seconds, 3),
            **({"adaptive": self.adaptive.stats(self.num_steps)} if self.adaptive is not None else {}),
        }
