"""Target shards 1.. of a replica as Ray actors pinned in the replica's placement group.

The replica (a Serve deployment whose placement group has one bundle per shard, STRICT_PACK on one node) is
rank 0 itself, in bundle 0; shard r runs in bundle r, so each holds the GPU of its own bundle. torch.distributed
joins them (NCCL on GPUs, gloo on CPU) at rank 0's address. Each step rank 0 sends the step's chunks to every
shard actor, computes its own part, and waits for them (workers/tensor_parallel.py).
"""
from __future__ import annotations

import os

import ray
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from workers.tensor_parallel import free_port


@ray.remote(max_restarts=0)
class ShardActor:
    def __init__(self, engine_json: str, rank: int, world: int, init_method: str) -> None:
        from workers.config import EngineConfig
        from workers.tensor_parallel import ShardWorker

        self.worker = ShardWorker(EngineConfig.model_validate_json(engine_json), rank, world, init_method)

    def run(self, chunks: list, return_hidden: bool) -> None:
        self.worker.run(chunks, return_hidden)

    def describe(self) -> dict[str, object]:
        return dict(self.worker.describe(), cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                    gpu_ids=[str(g) for g in ray.get_gpu_ids()], node_id=ray.get_runtime_context().get_node_id(),
                    pid=os.getpid())


class RayShardPeers:
    """workers.tensor_parallel.ShardPeers over Ray actors, created from inside the replica (rank 0)."""

    def __init__(self, engine_json: str, world: int, shard_cpus: float, shard_gpus: float,
                 timeout_s: float = 300.0) -> None:
        self.world_size, self.timeout_s = world, timeout_s
        self.init_method = f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"
        pg = get_current_placement_group()
        self.actors = []
        for rank in range(1, world):
            strategy = None if pg is None else PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank)
            opts = {"num_cpus": shard_cpus, "num_gpus": shard_gpus}
            if strategy is not None:
                opts["scheduling_strategy"] = strategy
            self.actors.append(ShardActor.options(**opts).remote(engine_json, rank, world, self.init_method))
        self._refs: list = []

    def wait_ready(self) -> None:
        self.shards = ray.get([a.describe.remote() for a in self.actors], timeout=self.timeout_s)

    def start(self, chunks: list, return_hidden: bool) -> None:
        self._refs = [a.run.remote(chunks, return_hidden) for a in self.actors]

    def finish(self) -> None:
        refs, self._refs = self._refs, []
        ray.get(refs, timeout=self.timeout_s)

    def describe(self) -> list[dict[str, object]]:
        return ray.get([a.describe.remote() for a in self.actors], timeout=self.timeout_s)
