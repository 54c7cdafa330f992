"""Host time of the budget policy: the verify choice, the draft-depth plan (depth caps and catch-up caps
searched) and the shared-capacity allocation, on synthetic survival scores and a table shaped like this
CPU's. Prints median and p90 over repeated calls; run it on an otherwise idle machine.
Usage: python benchmarks/policy_cost.py [--repeat 200]
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from workers.budget import allocate_capacity, choose_verify_lengths, survival
from workers.cost_table import CostTable


def _table() -> CostTable:
    """Staircase in 32-row blocks, ~4 ms per block on top of 10 ms (roughly this CPU's target at c=32), a
    ragged step's cost and 3 ms per query-length group beyond two."""
    cells = {(r, r * (1 + e)): 0.010 + 0.004 * -(-r * (1 + e) // 32) for r in (1, 2, 4, 8, 16, 32, 64, 128, 256)
             for e in (0, 1, 2, 4, 8)}
    ragged = {(r, e): 0.010 + 0.001 * e for r in (2, 4, 8, 16, 32, 64, 128, 256) for e in (1, 7)}
    return CostTable(cells, ragged=ragged, row_block=32, group_s=0.003)  # every term of the verify choice


def _timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.9 * (len(times) - 1))] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    table = _table()
    for B in (2, 8, 32, 256):
        scores = survival(torch.rand(B, 8) ** 0.5, torch.full((B,), 8))
        catch_up = torch.rand(B) * 0.02 * (torch.rand(B) < 0.25)  # a quarter of the batch has a prompt to feed
        cases = {
            "verify choice": lambda: choose_verify_lengths(scores, table, B, B, float(B), 0.001),
            "depth plan": lambda: choose_verify_lengths(scores, table, B, B, float(B), 0.001, 0.004),
            "depth plan + catch-up": lambda: choose_verify_lengths(scores, table, B, B, float(B), 0.001, 0.004,
                                                                   catch_up),
        }
        for name, fn in cases.items():
            med, p90 = _timed(fn, args.repeat)
            print(f"B={B:<4} {name:<22} median {med:.3f} ms  p90 {p90:.3f} ms")
    parts = [survival(torch.rand(64, 8), torch.full((64,), 8)) for _ in range(4)]
    med, p90 = _timed(lambda: allocate_capacity(parts, 512, [(table, 64, 64)] * 4), args.repeat)
    print(f"allocate_capacity 4 x 64 x 8: median {med:.3f} ms  p90 {p90:.3f} ms")


if __name__ == "__main__":
    main()
