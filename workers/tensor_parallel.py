"""Tensor parallelism for the target (Megatron-style), with torch.distributed; no Ray in here.

A shard holds a slice of every layer: whole KV-head groups of the attention (their query, key and value rows
and the matching columns of the output projection) and a slice of the MLP's intermediate width (gate and up
rows, down columns). The output projection and the down projection then give partial sums that one
all-reduce per projection completes; embedding, norms and the LM head are replicated. Each shard keeps the KV
cache of its own heads; the block table is shared, so the engine's block pool accounts for every shard.

Rank 0 runs inside the engine (its process owns the scheduler and samples from the logits, so logits never
cross processes); ranks 1.. are `ShardWorker`s that execute each step rank 0 announces through `ShardPeers`
(the cluster implements it with Ray actors). Heads are split by KV groups, as evenly as they go: SmolLM2's 3
KV heads over 2 shards give 2 and 1 (uneven, still exact up to summation order).
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Protocol

import torch
import torch.distributed as dist

from workers.llama import LlamaForward

log = logging.getLogger(__name__)


class ShardPeers(Protocol):
    """Ranks 1..world-1 as seen from rank 0: each step is announced to them before rank 0 computes it."""

    world_size: int
    init_method: str  # where the process group meets (rank 0's address), e.g. tcp://10.0.0.5:29500

    def start(self, chunks: list, return_hidden: bool) -> None: ...  # the step's StepChunks, sent to every peer

    def finish(self) -> None: ...  # wait until every peer finished the step; raise its error if one failed

    def wait_ready(self) -> None: ...  # after rank 0 joined the group: wait until every peer loaded its shard


def split_evenly(n: int, parts: int) -> list[range]:
    """[0, n) as `parts` contiguous ranges whose lengths differ by at most one (larger ones first)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(range(start, start + size))
        start += size
    return out


def check_shardable(num_kv_heads: int, intermediate: int, world: int) -> None:
    if world > num_kv_heads:
        raise ValueError(f"tensor_parallel_size {world} exceeds the model's {num_kv_heads} KV heads: each shard "
                         f"needs at least one KV-head group")
    if world > intermediate:
        raise ValueError(f"tensor_parallel_size {world} exceeds the MLP width {intermediate}")


def _all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum the shards' partial results; low-precision partials are summed in fp32 and rounded once."""
    if x.dtype in (torch.bfloat16, torch.float16) and x.device.type == "cpu":
        y = x.float()
        dist.all_reduce(y)
        return y.to(x.dtype)
    dist.all_reduce(x)
    return x


def shard_model(model: LlamaForward, rank: int, world: int) -> None:
    """Keep only `rank`'s slice of every layer (in place) and complete row-parallel projections by all-reduce."""
    H, KVH, hd = model.num_heads, model.num_kv_heads, model.head_dim
    group = H // KVH
    inter = model.layers[0].down.shape[1]
    check_shardable(KVH, inter, world)
    kv = split_evenly(KVH, world)
    mine_kv = kv[rank]
    mine_q = range(mine_kv.start * group, mine_kv.stop * group)
    mine_i = split_evenly(inter, world)[rank]

    def rows(heads: range, offset: int) -> slice:
        return slice(offset + heads.start * hd, offset + heads.stop * hd)

    q_rows, k_rows, v_rows = rows(mine_q, 0), rows(mine_kv, H * hd), rows(mine_kv, (H + KVH) * hd)
    for lw in model.layers:
        lw.qkv = torch.cat([lw.qkv[q_rows], lw.qkv[k_rows], lw.qkv[v_rows]]).contiguous()
        if lw.qkv_bias is not None:
            lw.qkv_bias = torch.cat([lw.qkv_bias[q_rows], lw.qkv_bias[k_rows], lw.qkv_bias[v_rows]]).contiguous()
        lw.o = lw.o[:, q_rows].contiguous()
        gate, up = lw.gate_up.chunk(2)
        lw.gate_up = torch.cat([gate[mine_i.start:mine_i.stop], up[mine_i.start:mine_i.stop]]).contiguous()
        lw.down = lw.down[:, mine_i.start:mine_i.stop].contiguous()
    model.num_heads, model.num_kv_heads = len(mine_q), len(mine_kv)
    model.kv_heads_budget = len(kv[0])  # every shard sizes its block pool by the largest shard: same block count
    model.reduce = _all_reduce
    model.plan_row_invariance()  # the input pieces of the old weights are stale


def free_port(host: str = "") -> int:
    """A TCP port free on `host` now, for the process group's rendezvous at rank 0."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def init_group(rank: int, world: int, init_method: str, device: torch.device, timeout_s: float = 60.0) -> str:
    """Join the shards' process group (blocks until all `world` ranks joined or the timeout passed): NCCL for
    shards on GPUs, gloo for shards on CPUs. The choice follows the shards' `device`, not the machine: chosen by
    whether CUDA was available, CPU shards on the H200 machine joined an NCCL group that refused their tensors
    at the first all-reduce ("No backend type associated with device type cpu", 2026-12-04). The timeout also
    bounds every collective: a rank waiting on a dead peer fails its step after it."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    if dist.is_initialized():  # one tensor-parallel engine per process: a new one replaces the last group
        dist.destroy_process_group()
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return backend


class ShardWorker:
    """Rank r >= 1 of a target: its slice of the weights and of the KV cache; computes the steps rank 0 sends."""

    def __init__(self, config, rank: int, world: int, init_method: str) -> None:
        from workers.model_runner import ModelRunner, pick_device, pick_dtype
        from workers.model_store import resolve_model

        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        device = pick_device(config.device)
        self.backend = init_group(rank, world, init_method, device)
        self.model, _ = LlamaForward.load(resolve_model(config.model), device, pick_dtype(config.dtype, device),
                                          config.batch_invariant)
        shard_model(self.model, rank, world)
        self.runner = ModelRunner(self.model, int(config.kv_cache_memory_gb * 2**30), config.block_size, False)
        self.rank, self.steps = rank, 0

    def run(self, chunks: list, return_hidden: bool = False) -> None:
        """One step: the same forward as rank 0, without logits (rank 0 alone samples)."""
        self.runner.run([dataclasses.replace(c, num_logits=0) for c in chunks], return_hidden)
        self.steps += 1

    def describe(self) -> dict[str, object]:
        return {"rank": self.rank, "backend": self.backend, "heads": self.model.num_heads,
                "kv_heads": self.model.num_kv_heads, "kv_blocks": self.runner.pool.num_blocks, "steps": self.steps}


def _serve_shard(config_json: str, rank: int, world: int, init_method: str, conn) -> None:
    """Entry of a local shard process: build the worker, then run the steps rank 0 sends until it closes."""
    from workers.config import EngineConfig

    try:
        worker = ShardWorker(EngineConfig.model_validate_json(config_json), rank, world, init_method)
    except BaseException as exc:  # rank 0 then fails with this error instead of waiting for the group
        conn.send(repr(exc))
        return
    conn.send(None)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        try:
            worker.run(*msg)
            conn.send(None)
        except BaseException as exc:
            conn.send(repr(exc))


def local_shard_devices(device: torch.device, world: int, gpus: int) -> list[str]:
    """The device of each rank 0..world-1 when the shards are local processes: rank 0's CPU for every rank,
    or one GPU each from rank 0's on. NCCL refuses two ranks on one GPU ("Duplicate GPU detected", seen on the
    one-GPU H200 machine, 2026-12-04), so fewer GPUs than shards is an error here, not at the first step. In a
    cluster Ray gives each shard its own GPU instead (cluster/shards.py)."""
    if device.type != "cuda":
        return [str(device)] * world
    first = device.index or 0
    if first + world > gpus:
        raise ValueError(f"tensor_parallel_size={world} as local processes needs {world} GPUs from cuda:{first} "
                         f"(one per shard), this machine has {gpus}: use device='cpu', fewer shards, or a cluster")
    return [f"cuda:{first + r}" for r in range(world)]


class ProcessShardPeers:
    """Ranks 1.. as local processes (spawned, one pipe each): tensor parallelism without a cluster."""

    def __init__(self, config, timeout_s: float = 120.0, devices: list[str] | None = None) -> None:
        """`devices`: rank r's device (local_shard_devices); default: the config's for every rank."""
        import multiprocessing as mp

        self.world_size = config.tensor_parallel_size
        self.init_method = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"
        self.timeout_s = timeout_s
        ctx = mp.get_context("spawn")
        if config.num_threads is None:  # shards share this machine's cores instead of oversubscribing them
            threads = max(1, torch.get_num_threads() // self.world_size)
            config = config.model_copy(update={"num_threads": threads})
            torch.set_num_threads(threads)
        self._conns, self._procs = [], []
        for rank in range(1, self.world_size):
            parent, child = ctx.Pipe()
            rank_config = config if devices is None else config.model_copy(update={"device": devices[rank]})
            p = ctx.Process(target=_serve_shard, args=(rank_config.model_dump_json(), rank, self.world_size,
                                                       self.init_method, child), daemon=True, name=f"shard-{rank}")
            p.start()
            self._conns.append(parent)
            self._procs.append(p)

    def wait_ready(self) -> None:
        """After rank 0 joined the group: each peer reports that it loaded its shard."""
        self._collect()

    def start(self, chunks: list, return_hidden: bool) -> None:
        for c in self._conns:
            c.send((chunks, return_hidden))

    def finish(self) -> None:
        self._collect()

    def _collect(self) -> None:
        for rank, c in enumerate(self._conns, 1):
            if not c.poll(self.timeout_s):
                raise TimeoutError(f"shard {rank} did not answer within {self.timeout_s:.0f} s")
            err = c.recv()
            if err is not None:
                raise RuntimeError(f"shard {rank} failed: {err}")

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        for c in self._conns:
            c.close()
        for p in self._procs:
            p.join(timeout=5)


def attach_shard_peers(model: LlamaForward, config, peers: ShardPeers | None) -> ShardPeers | None:
    """Make `model` rank 0 of a tensor-parallel target of `config.tensor_parallel_size` ranks: its own shard,
    and the peers (ranks 1..) joined in one group; without `peers`, local processes. None when the size is 1."""
    world = config.tensor_parallel_size
    if world == 1:
        if peers is not None:
            raise ValueError("shard peers were given but tensor_parallel_size is 1")
        return None
    if peers is None:  # outside a cluster: the peers are local processes
        gpus = torch.cuda.device_count() if model.device.type == "cuda" else 0
        peers = ProcessShardPeers(config, devices=local_shard_devices(model.device, world, gpus))
    if peers.world_size != world:
        raise ValueError(f"tensor_parallel_size={world} but {peers.world_size} shard peers were given")
    init_group(0, world, peers.init_method, model.device)
    shard_model(model, 0, world)
    peers.wait_ready()
    return peers
