"""The packing benchmark's old packer is the runner's packing before 2026-12-06 (one block per sequence)."""
import sys
from pathlib import Path

import torch

import workers.attention as attention

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from row_packing import PACKERS  # noqa: E402


def _blocks(packer, lengths: list[int]) -> list[tuple[int, int, int]]:
    spans, row = [], 0
    for n in lengths:
        spans.append(attention.SeqSpan(row, n, 0 if n > attention.SMALL_ROWS else 64, list(range(16))))
        row += n
    saved, attention._RowBlocks = attention._RowBlocks, packer
    try:
        meta = attention.build_metadata(spans, 16, torch.device("cpu"), 10, 3, False)
    finally:
        attention._RowBlocks = saved
    return [(s.start, s.stop, pad) for s, pad in meta.row_blocks]


def test_one_block_per_sequence_leaves_blocks_part_empty_and_full_blocks_do_not():
    old, new = PACKERS["one block per sequence"], PACKERS["full blocks"]
    assert _blocks(old, [3] * 32) == [(0, 30, 0), (30, 60, 0), (60, 90, 0), (90, 96, 0)]
    assert _blocks(new, [3] * 32) == [(0, 32, 0), (32, 64, 0), (64, 96, 0)]
    mixed = [1] * 5 + [100] + [3, 3]  # a long prefill segment is its own padded GEMM either way
    assert _blocks(old, mixed) == _blocks(new, mixed) == [(0, 5, 0), (5, 105, attention.PREFILL_SEGMENT),
                                                          (105, 111, 0)]
