"""Runs one ragged step of a model over its paged KV cache: chunks in, logits of the requested rows out."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from workers.attention import SeqSpan, build_metadata, fixed_tile_needed, q_tile_for, segment_backends
from workers.block_pool import BlockPool
from workers.llama import KVCacheTensors, LlamaForward

if TYPE_CHECKING:
    from workers.tensor_parallel import ShardPeers

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StepChunk:
    token_ids: list[int]  # tokens computed this step, at positions start_pos..
    start_pos: int
    block_table: list[int]  # must cover start_pos + len(token_ids) tokens
    num_logits: int  # logits wanted for the last num_logits tokens of the chunk (0 = none)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def cpu_has_fast_bf16() -> bool:
    """AMX or AVX512-BF16: bf16 GEMMs are then faster than fp32 (measured: 25 vs 30 ms per weight pass at
    1 row, 31 vs 77 ms at 16 rows); without them bf16 on CPU is emulated and slow."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" or cpu_has_fast_bf16() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


class ModelRunner:
    def __init__(self, model: LlamaForward, kv_bytes: int, block_size: int, enable_prefix_caching: bool,
                 peers: "ShardPeers | None" = None) -> None:
        self.model = model
        self.peers = peers  # tensor parallelism: the other shards compute every step with this one
        self.block_size = block_size
        num_blocks = max(2, kv_bytes // (model.kv_bytes_per_token() * block_size))
        self.kv = KVCacheTensors.allocate(model, num_blocks, block_size)
        self.pool = BlockPool(num_blocks, block_size, enable_prefix_caching)
        self.q_tile = q_tile_for(model.num_heads, model.num_kv_heads)
        self.group_size = model.num_heads // model.num_kv_heads
        # the last step's tiled sequences, the key slots their attention gathered (each padded to its group's
        # longest context) and the groups split off by context (benchmarks/profile_steps.py reads them)
        self.tiled_seqs = self.key_slots = self.context_splits = 0
        log.info("KV cache: %d blocks x %d tokens (%.0f MB)", num_blocks, block_size, kv_bytes / 2**20)

    def run(self, chunks: list[StepChunk], return_hidden: bool = False) -> torch.Tensor:
        """Logits [sum(num_logits), V] in chunk order (or final hidden states with return_hidden)."""
        dev = self.model.device
        ids, pos, spans, rows = [], [], [], []
        t = 0
        for c in chunks:
            n = len(c.token_ids)
            ids.extend(c.token_ids)
            pos.extend(range(c.start_pos, c.start_pos + n))
            spans.append(SeqSpan(t, n, c.start_pos, c.block_table))
            rows.extend(range(t + n - c.num_logits, t + n))
            t += n
        if self.peers is not None:
            self.peers.start(chunks, return_hidden)
        meta = build_metadata(spans, self.block_size, dev, self.q_tile, self.group_size,
                              fixed_tile_needed(self.model.dtype))
        self.tiled_seqs = sum(g.kv_index.shape[0] for g in meta.tiled)
        self.key_slots = sum(g.kv_index.numel() for g in meta.tiled)
        self.context_splits = meta.context_splits
        with segment_backends(dev, meta):
            out = self.model.forward(
                torch.tensor(ids, dtype=torch.long, device=dev),
                torch.tensor(pos, dtype=torch.long, device=dev),
                self.kv,
                meta,
                torch.tensor(rows, dtype=torch.long, device=dev),
                return_hidden=return_hidden,
            )
        if self.peers is not None:
            self.peers.finish()
        return out

