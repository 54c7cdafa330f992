"""GEMMs whose rows do not depend on the row count, checked on the machine at start-up.

The batch-invariant forward computes decode and verify rows in linear blocks of <= 32 rows
(attention.SMALL_ROWS) and relies on a row getting the same bits at every block size M <= 32. Whether it
does is the CPU kernel's choice, not the dtype's: bf16 held for every weight on the first machines, but on an
AMD EPYC with avx512_bf16 (no AMX, oneDNN 3.12) every bf16 GEMM with more than 1024 inputs (SmolLM2's down
projection has 1536) gave some rows other bits from some M on, while most with 1024 inputs or fewer held
(not all: 64 x 64 failed where 64 x 128 held).
Splitting such a GEMM along its inputs into equal pieces that hold, as one batched GEMM over the pieces whose
outputs are summed in fp32, holds too and costs least of the forms tried (measured 2026-12-01, docs/
performance.md), so the split is used exactly where the plain kernel fails. On an H200 (torch 2.11, cuBLAS)
the plain bf16 GEMM held at every SmolLM2 shape (2026-12-04).
"""
from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from workers.attention import SMALL_ROWS

MAX_PIECES = 8  # split into at most this many equal pieces of the inputs, fewest (cheapest) first
CHECK_ROWS = SMALL_ROWS  # the largest block whose rows must hold


def k_pieces(w: torch.Tensor,  # [N, K]
             pieces: int) -> torch.Tensor:  # [pieces, K / pieces, N], contiguous
    """The weight cut into equal pieces along its inputs, each transposed for a batched GEMM."""
    n, k = w.shape
    return w.reshape(n, pieces, k // pieces).permute(1, 2, 0).contiguous()


def split_linear(x: torch.Tensor,  # [M, K]
                 stacked: torch.Tensor,  # [P, K / P, N] from k_pieces
                 bias: torch.Tensor | None = None) -> torch.Tensor:  # [M, N]
    """x @ w.T as P GEMMs over pieces of K (one batched call), summed in fp32 and rounded once."""
    p, c, _ = stacked.shape
    y = torch.bmm(x.reshape(-1, p, c).transpose(0, 1), stacked).sum(0, dtype=torch.float32).to(x.dtype)
    return y if bias is None else y + bias


def _rows_hold(linear, x: torch.Tensor) -> bool:
    """Every row of `linear(x[:m])` equals the same row computed alone, for every m."""
    alone = torch.cat([linear(x[r:r + 1]) for r in range(x.shape[0])])
    return all(torch.equal(linear(x[:m]), alone[:m]) for m in range(2, x.shape[0] + 1))


@lru_cache(maxsize=None)
def invariant_pieces(dtype: torch.dtype, in_features: int, out_features: int, device: str = "cpu") -> int | None:
    """Into how many equal pieces of the inputs a GEMM must be split so that its rows do not depend on the
    row count M <= 32 on this machine: 1 when the plain GEMM holds, None when no split up to MAX_PIECES does.
    Two sets of random data (a failing kernel showed 2 to 65 differing rows per set); whole shapes, since the
    output width matters too (64 x 64 failed where 64 x 128 held); 0.1 s per SmolLM2 layer shape, 1.2 s for
    its 49,152-word head. `device`: where the model runs (the engine checks CPU and CUDA)."""
    sets = []
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        sets.append((torch.randn(out_features, in_features, generator=g).to(device, dtype),
                     torch.randn(CHECK_ROWS, in_features, generator=g).to(device, dtype)))
    if all(_rows_hold(lambda a: F.linear(a, w), x) for w, x in sets):
        return 1
    for pieces in (p for p in range(2, MAX_PIECES + 1) if in_features % p == 0):
        stacked = [(k_pieces(w, pieces), x) for w, x in sets]
        if all(_rows_hold(lambda a: split_linear(a, ws), x) for ws, x in stacked):
            return pieces
    return None
