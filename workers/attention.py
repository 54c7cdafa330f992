"""Paged attention for ragged batches: metadata built once per step, then one SDPA per group per layer.

Sequences whose step has few query tokens (decode: 1 + n verify positions; short prefill chunks) form one
padded group: their keys are gathered from the block pool into `[B, L, KVH, hd]` and a boolean mask gives
each query row its own causal horizon. Long prefill chunks run one SDPA each, so a 512-token chunk does not
pad every decode row to 512 queries. Padding adds only exact zeros to a row's softmax sums, so a position's
attention output does not depend on how many other positions are in its group (measured: equal to 3e-7).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

SMALL_QUERY = 32  # query tokens up to which a sequence joins the padded group


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
class PrefillGroup:
    query_start: int
    query_len: int
    kv_index: torch.Tensor  # [ctx] slots
    mask: torch.Tensor | None  # [q, ctx] bool, None = plain causal (no cached prefix)


@dataclass(slots=True)
class PaddedGroup:
    q_index: torch.Tensor  # [B, Qmax] rows of T (padding -> 0)
    valid: torch.Tensor  # [B, Qmax] bool
    flat_rows: torch.Tensor  # [n_valid] rows of T, in valid order
    kv_index: torch.Tensor  # [B, Lmax] slots (padding -> 0)
    mask: torch.Tensor  # [B, 1, Qmax, Lmax] bool


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T]
    padded: PaddedGroup | None
    prefills: list[PrefillGroup] = field(default_factory=list)


def _slots(block_table: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    return block_table[positions // block_size] * block_size + positions % block_size


def build_metadata(spans: list[SeqSpan], block_size: int, device: torch.device) -> AttentionMetadata:
    slot_parts, prefills, small = [], [], []
    for s in spans:
        bt = torch.tensor(s.block_table, dtype=torch.long)
        pos = torch.arange(s.start_pos, s.context_len)
        slot_parts.append(_slots(bt, pos, block_size))
        if s.query_len > SMALL_QUERY:
            kv = _slots(bt, torch.arange(s.context_len), block_size)
            mask = None
            if s.start_pos > 0:
                mask = torch.arange(s.context_len)[None, :] <= pos[:, None]
                mask = mask.to(device)
            prefills.append(PrefillGroup(s.query_start, s.query_len, kv.to(device), mask))
        else:
            small.append((s, bt))
    slot_mapping = torch.cat(slot_parts).to(device)
    return AttentionMetadata(slot_mapping, _padded_group(small, block_size, device), prefills)


def _padded_group(small: list[tuple[SeqSpan, torch.Tensor]], block_size: int, device: torch.device) -> PaddedGroup | None:
    if not small:
        return None
    B = len(small)
    q_max = max(s.query_len for s, _ in small)
    l_max = max(s.context_len for s, _ in small)
    qlen = torch.tensor([s.query_len for s, _ in small])
    start = torch.tensor([s.start_pos for s, _ in small])
    qstart = torch.tensor([s.query_start for s, _ in small])
    ctx = start + qlen
    j = torch.arange(q_max)
    valid = j[None, :] < qlen[:, None]  # [B, Qmax]
    q_index = torch.where(valid, qstart[:, None] + j[None, :], 0)
    kv_index = torch.zeros(B, l_max, dtype=torch.long)
    for b, (s, bt) in enumerate(small):
        kv_index[b, : s.context_len] = _slots(bt, torch.arange(s.context_len), block_size)
    keys = torch.arange(l_max)
    horizon = start[:, None] + j[None, :]  # [B, Qmax] position of each query
    mask = (keys[None, None, :] <= horizon[:, :, None]) & (keys[None, None, :] < ctx[:, None, None])
    mask[..., 0] |= ~valid  # padding rows see key 0 only: no NaN, output discarded
    return PaddedGroup(
        q_index=q_index.to(device),
        valid=valid.to(device),
        flat_rows=q_index[valid].to(device),
        kv_index=kv_index.to(device),
        mask=mask[:, None].to(device),
    )


def paged_attention(
    q: torch.Tensor,  # [T, H, hd]
    key_cache: torch.Tensor,  # [slots, KVH, hd]
    value_cache: torch.Tensor,  # [slots, KVH, hd]
    meta: AttentionMetadata,
) -> torch.Tensor:  # [T, H, hd]
    out = torch.empty_like(q)
    g = meta.padded
    if g is not None:
        qp = q[g.q_index].transpose(1, 2)  # [B, H, Qmax, hd]
        kp = key_cache[g.kv_index].transpose(1, 2)  # [B, KVH, Lmax, hd]
        vp = value_cache[g.kv_index].transpose(1, 2)
        o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=g.mask, enable_gqa=True)
        out[g.flat_rows] = o.transpose(1, 2)[g.valid]
    for p in meta.prefills:
        rows = slice(p.query_start, p.query_start + p.query_len)
        qp = q[rows].transpose(0, 1)[None]  # [1, H, q, hd]
        kp = key_cache[p.kv_index].transpose(0, 1)[None]
        vp = value_cache[p.kv_index].transpose(0, 1)[None]
        o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None, enable_gqa=True)
        out[rows] = o[0].transpose(0, 1)
    return out
