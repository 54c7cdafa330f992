"""Paged attention for ragged batches, batch-invariant: a query's output does not depend on what else is in
the step, so verifying k drafts computes the same logits as decoding them one by one (greedy speculation
is then token-identical to no speculation).

Two paths, chosen by a sequence's own shape, never by the batch's:
- **tiled** (decode, verify, short chunks: query_len <= q_tile): queries padded to exactly `q_tile` rows per
  sequence and keys gathered from the block pool in `KEY_BLOCK`-sized blocks, so every GEMM has one fixed
  shape (M = q_tile * heads-per-kv-group <= 32: the CPU GEMM picks other kernels above 32 rows); softmax
  sums run per key block, then across blocks, so padding adds exact zeros only. Measured: 0 of 618 query
  rows differ vs computing each alone at any padding; PyTorch's SDPA differed on 248 of 2853.
  Sequences are grouped by query length (then by context; workers/attention_groups.py), each group padded to
  its own longest query: one padded group made a ragged adaptive plan (one request at 1 + 7 rows) cost every
  sequence 8 rows (c=32 ShareGPT, n-gram: forward 264 -> 152 ms per step for adaptive k<=7, 178 -> 150 ms for
  k=2). That holds on CPUs, where a padded row costs real compute; on CUDA a group's launches cost more than
  thousands of padded rows, so there a step's lengths almost always share one group (`group_cost_rows`).
- **segment** (long prefill chunks): split at multiples of `PREFILL_SEGMENT` positions, one SDPA per segment
  with exact lengths; the scheduler keeps chunk boundaries on those multiples, so segments are the same
  whatever the load.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from workers.attention_groups import (KEY_BLOCK, context_cost_slots, group_by_length, group_cost_rows,
                                      padded_key_slots, split_by_context)

PREFILL_SEGMENT = 128
SMALL_ROWS = 32  # bf16 GEMM rows are bit-identical for any M <= 32 (measured, and checked at load: gemm_invariance.py)


# The segment path's SDPA on CUDA: any backend but cuDNN. PyTorch 2.11 picks cuDNN attention on an H200, which
# builds a graph for every new (query, key) length: 60-65 ms at each new shape (up to 1.3 s for the first ones),
# 0.1-0.2 ms once built. Prefill segments and draft catch-ups come in ever new lengths, so it was paid nearly
# every time: single-request draft catch-ups of 11-43 rows took 48-80 ms where 1-row iterations took 2-3 ms,
# and probes cost 4x their price. Without cuDNN (the math kernel here: the fused ones refuse 9 query heads over
# 3 KV heads) a new shape took 0.5-29 ms, a known one ~0.5 ms (scripts/sdpa_shapes.py; docs/performance.md).
SEGMENT_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def segment_backends(device: torch.device, meta: "AttentionMetadata") -> AbstractContextManager:
    """The SDPA backends a step's prefill segments may use (SEGMENT_BACKENDS on CUDA; as they are elsewhere)."""
    return sdpa_kernel(SEGMENT_BACKENDS) if meta.segments and device.type == "cuda" else nullcontext()


def q_tile_for(num_heads: int, num_kv_heads: int) -> int:
    return max(1, SMALL_ROWS // (num_heads // num_kv_heads))  # q_tile * heads-per-KV-group <= 32 GEMM rows


def fixed_tile_needed(dtype: torch.dtype) -> bool:
    """bf16/fp16 GEMMs give identical rows for every M <= 32 (measured), so the tile can shrink to the
    group's longest query; fp32 GEMMs switch kernels at M = 2 and 4, so fp32 pads to the fixed tile."""
    return dtype == torch.float32


@dataclass(slots=True)
class SeqSpan:
    """One sequence's slice of a step."""

    query_start: int  # first row of this sequence in the flat [T] batch
    query_len: int  # tokens computed this step
    start_pos: int  # position of the first of them (= tokens already in the KV cache)
    block_table: list[int]

    @property
    def context_len(self) -> int:
        return self.start_pos + self.query_len


@dataclass(slots=True)
class Segment:
    rows: slice  # rows of T
    kv_index: torch.Tensor  # [ctx] slots
    mask: torch.Tensor | None  # [q, ctx] bool, None = plain causal (starts at position 0)


@dataclass(slots=True)
class TiledGroup:
    q_index: torch.Tensor  # [B, q_tile] rows of T (padding -> 0)
    valid: torch.Tensor  # [B, q_tile] bool
    flat_rows: torch.Tensor  # [n_valid] rows of T, in valid order
    kv_index: torch.Tensor  # [B, Lp] slots (padding -> 0), Lp a multiple of KEY_BLOCK
    bias: torch.Tensor  # [B, nb, G * q_tile, KEY_BLOCK] float32: 0 or -inf
    dense: bool  # every row valid and rows in order: T == B * q_tile (pure decode/verify steps)


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T]
    tiled: list[TiledGroup]  # sequences grouped by query length (see group_by_length)
    segments: list[Segment] = field(default_factory=list)
    # Row blocks for batch-invariant linear layers, in row order: (rows, padded row count or 0).
    # Rows of decode/verify steps and short segments go in blocks of <= 32 (any M <= 32 gives identical
    # rows); each long prefill segment is its own GEMM padded to exactly PREFILL_SEGMENT rows, so its rows
    # always sit at the same place in a GEMM of the same shape (2-3x faster than 32-row blocks).
    row_blocks: list[tuple[slice, int]] = field(default_factory=list)
    context_splits: int = 0  # tiled groups beyond the query-length groups (`split_by_context`)


# Indices are built in numpy and handed to torch once: each small torch op cost 10-20 us after a forward had
# evicted the host's caches, and a step built ~6 per sequence: build_metadata took 0.75 ms at 8 sequences and
# 1.8 ms at 32 in torch, 0.42 and 0.66 ms now (benchmarks/host_code_ab.py), paid by the target's every step and by
# each of the drafter's iterations.
def _slots(block_table: np.ndarray, positions: np.ndarray, block_size: int) -> np.ndarray:
    return block_table[positions // block_size] * block_size + positions % block_size


def _split_segments(s: SeqSpan) -> list[SeqSpan]:
    out, pos, row = [], s.start_pos, s.query_start
    while pos < s.context_len:
        end = min(s.context_len, (pos // PREFILL_SEGMENT + 1) * PREFILL_SEGMENT)
        out.append(SeqSpan(row, end - pos, pos, s.block_table))
        row, pos = row + end - pos, end
    return out


def build_metadata(spans: list[SeqSpan], block_size: int, device: torch.device, q_tile: int,
                   group_size: int, fixed_tile: bool) -> AttentionMetadata:
    slot_parts, segments, small = [], [], []
    blocks = _RowBlocks()
    for s in spans:
        bt = np.asarray(s.block_table, dtype=np.int64)
        slot_parts.append(_slots(bt, np.arange(s.start_pos, s.context_len), block_size))
        for seg in ([s] if s.query_len <= q_tile else _split_segments(s)):
            blocks.add(seg)
            if seg.query_len <= q_tile:
                small.append((seg, bt))
                continue
            pos = torch.arange(seg.start_pos, seg.context_len)
            kv = torch.from_numpy(_slots(bt, np.arange(seg.context_len), block_size))
            mask = None if seg.start_pos == 0 else (torch.arange(seg.context_len)[None, :] <= pos[:, None]).to(device)
            segments.append(Segment(slice(seg.query_start, seg.query_start + seg.query_len), kv.to(device), mask))
    slot_mapping = torch.from_numpy(np.concatenate(slot_parts)).to(device)
    if fixed_tile or not small:
        groups = [(small, q_tile)] if small else []
    else:
        groups = [(g, max(x.query_len for x, _ in g)) for g in group_by_length(small, group_cost_rows(device))]
    by_length = len(groups)
    groups = [(part, qt) for g, qt in groups for part in split_by_context(g, context_cost_slots(device))]
    return AttentionMetadata(slot_mapping, [_tiled_group(g, block_size, device, qt, group_size) for g, qt in groups],
                             segments, blocks.done(), len(groups) - by_length)


class _RowBlocks:
    """Groups consecutive rows into linear-layer blocks (see AttentionMetadata.row_blocks). A run of small
    segments' rows is cut into full blocks of SMALL_ROWS, a sequence's rows split across two blocks where the
    cut falls: a row gets the same bits in any block of <= 32 rows, at any place in it (checked at load,
    workers/gemm_invariance.py). Keeping each sequence in one block, as until 2026-12-06, left blocks part
    empty: 32 sequences of 3 rows (fixed k=2 at c=32) took 4 blocks instead of 3, and ran 1/0.955 of the time
    they take now (AMD EPYC, bf16, benchmarks/row_packing.py)."""

    def __init__(self) -> None:
        self.blocks: list[tuple[slice, int]] = []
        self.start = self.end = 0  # the run of small rows not yet cut into blocks

    def _flush(self) -> None:
        for lo in range(self.start, self.end, SMALL_ROWS):
            self.blocks.append((slice(lo, min(lo + SMALL_ROWS, self.end)), 0))
        self.start = self.end

    def add(self, seg: SeqSpan) -> None:
        if seg.query_len > SMALL_ROWS:
            self._flush()
            self.blocks.append((slice(seg.query_start, seg.query_start + seg.query_len), PREFILL_SEGMENT))
            self.start = self.end = seg.query_start + seg.query_len
            return
        self.end = seg.query_start + seg.query_len

    def done(self) -> list[tuple[slice, int]]:
        self._flush()
        return self.blocks


def _tiled_group(small: list[tuple[SeqSpan, np.ndarray]], block_size: int, device: torch.device,
                 q_tile: int, group_size: int) -> TiledGroup:
    """One group's indices and mask; `small`: each sequence's span and block table (an int64 array)."""
    B = len(small)
    lp = padded_key_slots(max(s.context_len for s, _ in small))
    nb = lp // KEY_BLOCK
    qlen, start, qstart, ctx = np.array([(s.query_len, s.start_pos, s.query_start, s.context_len)
                                         for s, _ in small], dtype=np.int64).T
    j = np.arange(q_tile)
    valid = j[None, :] < qlen[:, None]  # [B, q_tile]
    q_index = np.where(valid, qstart[:, None] + j[None, :], 0)
    width = max(len(bt) for _, bt in small)
    tables = np.zeros((B, width), dtype=np.int64)
    for b, (_, bt) in enumerate(small):
        tables[b, :len(bt)] = bt
    keys = np.arange(lp)
    kv_index = np.ascontiguousarray(tables[:, np.minimum(keys // block_size, width - 1)])  # [B, lp]
    kv_index = kv_index * block_size + keys % block_size
    kv_index[keys[None, :] >= ctx[:, None]] = 0  # padding slots -> 0
    # the mask is built where it is used: only [B, q_tile] limits cross to a GPU, not [B, nb, G * q_tile, KB]
    # floats (B x 8 rows at context 1024 made 12 MB of host work and copy a step). Causal; padding rows see key
    # 0 only.
    limit = torch.from_numpy(np.where(valid, start[:, None] + j[None, :], 0)).to(device)
    allowed = torch.arange(lp, device=device)[None, None, :] <= limit[:, :, None]  # => also < context_len
    bias = torch.zeros(B, q_tile, lp, device=device).masked_fill_(~allowed, float("-inf"))
    bias = bias.view(B, q_tile, nb, KEY_BLOCK).transpose(1, 2).repeat(1, 1, group_size, 1)
    dense = bool(valid.all()) and bool((q_index.reshape(-1) == np.arange(B * q_tile)).all())
    return TiledGroup(torch.from_numpy(q_index).to(device), torch.from_numpy(valid).to(device),
                      torch.from_numpy(q_index[valid]).to(device), torch.from_numpy(kv_index).to(device),
                      bias.contiguous(), dense)


def _across_blocks(e: torch.Tensor, pv: torch.Tensor) -> torch.Tensor:  # [KVH, B, rows, D]
    """Each row's output from its per-key-block exponentials `e` [KVH, B, nb, rows, KB] and value products
    `pv` [KVH, B, nb, rows, D], in an order across blocks that the rows beside it do not change (see below)."""
    denom = e.sum(-1, keepdim=True).cumsum(2)[:, :, -1]  # [KVH, B, rows, 1]
    return pv.sum(2).div_(denom)


def _tiled_attention(q: torch.Tensor, kv_cache: torch.Tensor, g: TiledGroup) -> torch.Tensor:
    """-> [B * q_tile, H, hd] (rows of padding included; `g.valid` selects the real ones)."""
    B, qt = g.q_index.shape
    _, H, D = q.shape
    KVH = kv_cache.shape[1]
    G = H // KVH
    nb = g.kv_index.shape[1] // KEY_BLOCK
    q = q[: B * qt].view(B, qt, H, D) if g.dense else q[g.q_index]
    qg = q.view(B, qt, KVH, G, D).permute(2, 0, 3, 1, 4).reshape(KVH, B, 1, G * qt, D)  # a KV group's rows
    kv = kv_cache.index_select(2, g.kv_index.view(-1)).view(2, KVH, B, nb, KEY_BLOCK, D)  # head-major: no copy
    # q is pre-scaled by hd**-0.5 (folded into the q projection at load)
    s = torch.matmul(qg, kv[0].transpose(-1, -2)).float().add_(g.bias)  # [KVH, B, nb, G*qt, KB]
    e = s.sub_(s.amax(dim=(2, 4), keepdim=True)).exp_()
    # per key block, then across blocks in block order: a scan's last element, not .sum(2), whose order over
    # the blocks depended on the tile (G*qt rows): at context 700 a 2-row verify's second row differed in the
    # last bit of this sum from the same token decoded alone (logits up to 0.125 apart; 2026-12-04). The
    # output's sum below has 64 contiguous values per element and held in every check (a scan there cost
    # 1.5-3% of a step); tests/workers/test_attention.py checks both at contexts 700-1030
    o = _across_blocks(e, torch.matmul(e.to(q.dtype), kv[1]).float())  # [KVH, B, G*qt, D]
    return o.to(q.dtype).view(KVH, B, G, qt, D).permute(1, 3, 0, 2, 4).reshape(B * qt, H, D)


def paged_attention(
    q: torch.Tensor,  # [T, H, hd], pre-scaled by hd**-0.5
    kv_cache: torch.Tensor,  # [2, KVH, slots, hd] (head-major: a gather yields attention's layout directly)
    meta: AttentionMetadata,
) -> torch.Tensor:  # [T, H, hd]
    if len(meta.tiled) == 1 and meta.tiled[0].dense and not meta.segments:
        return _tiled_attention(q, kv_cache, meta.tiled[0])
    out = torch.empty_like(q)
    for g in meta.tiled:
        out[g.flat_rows] = _tiled_attention(q, kv_cache, g).view(g.valid.shape + q.shape[1:])[g.valid]
    for p in meta.segments:
        qp = q[p.rows].transpose(0, 1)[None]  # [1, H, q, hd]
        kv = kv_cache.index_select(2, p.kv_index)  # [2, KVH, ctx, hd]
        o = F.scaled_dot_product_attention(qp, kv[0][None], kv[1][None], attn_mask=p.mask,
                                           is_causal=p.mask is None, scale=1.0, enable_gqa=True)
        out[p.rows] = o[0].transpose(0, 1)
    return out
