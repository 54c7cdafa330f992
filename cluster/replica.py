"""TargetReplica: a Ray Serve deployment that owns one engine loop (workers.AsyncLLMEngine).

The ingress streams from it through a DeploymentHandle (`generate` is an async generator); cancelling the
handle's stream cancels `generate` here, whose cleanup aborts the request and frees its KV blocks. Bad input
is reported as an error item, not an exception, so the ingress can answer 400 without unwrapping Ray errors.
"""
from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator

log = logging.getLogger(__name__)


class TargetReplica:
    def __init__(self, config_json: str, replica_id: str, drafters: list | None = None) -> None:
        """`drafters`: DeploymentHandles of this replica's drafters (drafters.count > 0), else none."""
        from cluster.config import ClusterConfig
        from workers.async_engine import AsyncLLMEngine

        t0 = time.perf_counter()
        self.config = ClusterConfig.model_validate_json(config_json)
        self.replica_id = replica_id
        # Built in a worker thread: the constructor runs on the replica's event loop, where blocking calls on
        # Serve handles are refused (the drafter handshake, the remote draft cost table).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            self.engine = pool.submit(self._build_engine, drafters or []).result()
        self.aengine = AsyncLLMEngine(self.engine)
        self.planner = None
        self.requests_served = 0
        if self.config.engine.spec.verify == "adaptive-global":
            from cluster.budget_client import attach_global_budget

            b, cfg = self.config.budget, self.config
            index = int(replica_id.rsplit("-", 1)[-1]) if replica_id[-1].isdigit() else 0
            mine = cfg.drafters_of(index)
            group = b.drafter_group if not mine else f"drafter-{mine[0]}"
            members = cfg.replicas if not mine else len([i for i in range(cfg.replicas) if cfg.drafters_of(i) == mine])
            share = None if b.group_capacity is None else max(1, b.group_capacity // members)
            self.planner = attach_global_budget(self.engine, replica_id, group, share, b.group_capacity)
        from cluster.metrics import ReplicaMetrics

        self.metrics = ReplicaMetrics(replica_id)
        self._metrics_stop = self.metrics.start(self.stats)
        log.info("replica %s ready in %.1f s", replica_id, time.perf_counter() - t0)

    def _build_engine(self, drafters: list):
        from workers.engine import LLMEngine

        peers = proposer = None
        eng, p = self.config.engine, self.config.placement
        if eng.tensor_parallel_size > 1:
            from cluster.shards import RayShardPeers

            peers = RayShardPeers(with_threads(eng, p.shard_cpus).model_dump_json(), eng.tensor_parallel_size,
                                  p.shard_cpus, p.gpus_per_shard)
        eng = with_threads(eng, p.replica_cpus)
        if drafters:
            from cluster.drafter import RemoteProposer

            proposer = RemoteProposer(drafters, self.replica_id)
        self.shard_peers, self.remote_proposer = peers, proposer
        return LLMEngine(eng, proposer=proposer, shard_peers=peers)

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

    async def check_health(self) -> None:
        """Serve's health check: with shards, a dead shard actor or a failed step (the process group may be
        mid-collective) makes the replica unhealthy, so Serve replaces it with a new placement group and new
        shards. A single-shard engine survives a failed step (its streams got the error; it goes on)."""
        import asyncio

        if self.shard_peers is None:
            return
        if self.aengine.error is not None:
            raise RuntimeError(f"a sharded step failed: {self.aengine.error!r}")
        await asyncio.wait_for(asyncio.gather(*[a.describe.remote() for a in self.shard_peers.actors]), 30)

    def placement(self) -> dict:
        """Where this replica's parts run: its own GPU (shard 0), its shard actors, its drafters."""
        import os

        import ray

        return {"replica": {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                            "node_id": ray.get_runtime_context().get_node_id()},
                "shards": [] if self.shard_peers is None else self.shard_peers.describe(),
                "drafters": [] if self.remote_proposer is None else self.remote_proposer.drafter_info}

    def stats(self) -> dict:
        s = self.engine.stats()
        s["replica_id"] = self.replica_id
        s["requests_served"] = self.requests_served
        if self.planner is not None:
            s["budget"] = self.planner.stats()
        if self.remote_proposer is not None:
            s["drafter"] = self.remote_proposer.stats()
        return s


def with_threads(engine_cfg, cpus: float):
    """Ray sets OMP_NUM_THREADS to an actor's whole CPUs (1 for a fractional or 1-CPU actor), so torch would
    run one thread whatever the machine has: unless `engine.num_threads` is set, use the CPUs reserved."""
    import math

    if engine_cfg.num_threads:
        return engine_cfg
    return engine_cfg.model_copy(update={"num_threads": max(1, math.ceil(cpus))})
