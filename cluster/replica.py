"""TargetReplica: a Ray Serve deployment that owns one engine loop (workers.AsyncLLMEngine).

The ingress streams from it through a DeploymentHandle (`generate` is an async generator); cancelling the
handle's stream cancels `generate` here, whose cleanup aborts the request and frees its KV blocks. Bad input
is reported as an error item, not an exception, so the ingress can answer 400 without unwrapping Ray errors.
"""
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

log = logging.getLogger(__name__)


class TargetReplica:
    def __init__(self, config_json: str, replica_id: str) -> None:
        from cluster.config import ClusterConfig
        from workers.async_engine import AsyncLLMEngine
        from workers.engine import LLMEngine

        t0 = time.perf_counter()
        self.config = ClusterConfig.model_validate_json(config_json)
        self.replica_id = replica_id
        self.engine = LLMEngine(self.config.engine)
        self.aengine = AsyncLLMEngine(self.engine)
        self.planner = None
        self.requests_served = 0
        if self.config.engine.spec.verify == "adaptive-global":
            from cluster.budget_client import attach_global_budget

            b = self.config.budget
            share = None if b.group_capacity is None else max(1, b.group_capacity // self.config.replicas)
            self.planner = attach_global_budget(self.engine, replica_id, b.drafter_group, share, b.group_capacity)
        from cluster.metrics import ReplicaMetrics

        self.metrics = ReplicaMetrics(replica_id)
        self._metrics_stop = self.metrics.start(self.stats)
        log.info("replica %s ready in %.1f s", replica_id, time.perf_counter() - t0)

    def _encode(self, prompt, messages) -> list[int]:
        return self.engine.encode_chat(messages) if messages is not None else self.engine.encode_prompt(prompt)

    async def tokenize(self, prompt, messages) -> list[int]:
        import asyncio

        return await asyncio.to_thread(self._encode, prompt, messages)

    async def generate(self, prompt_ids: list[int], params_json: str, req_id: str) -> AsyncIterator[dict]:
        from workers.config import SamplingParams
        from workers.engine import InvalidRequestError

        params = SamplingParams.model_validate_json(params_json)
        try:
            async for out in self.aengine.generate(prompt_ids, params, req_id):
                item = {"token_ids": out.new_token_ids, "text": out.delta_text, "finished": out.finished,
                        "finish_reason": out.finish_reason}
                if out.finished and out.request is not None:
                    r = out.request
                    ttft = None if r.first_token_time is None else r.first_token_time - r.arrival
                    self.metrics.observe_latency(ttft, r.itl)
                    self.requests_served += 1
                    item.update(prompt_tokens=r.num_prompt, completion_tokens=r.num_output,
                                spec_decode=r.spec.to_dict() if self.engine.proposer is not None else None)
                yield item
        except InvalidRequestError as exc:
            yield {"error": str(exc)}

    def stats(self) -> dict:
        s = self.engine.stats()
        s["replica_id"] = self.replica_id
        s["requests_served"] = self.requests_served
        if self.planner is not None:
            s["budget"] = self.planner.stats()
        ada = self.engine.adaptive
        if ada is not None and self.engine.num_steps:
            s["adaptive"] = {"verified_per_step": ada.verified_positions / self.engine.num_steps,
                             "offered_positions": ada.offered_positions, "drafted_positions": ada.drafted_positions}
        return s
