"""A/B of the warm-up table's context term (`CostTable.key_slot_s`): one point of the adaptive grid, with a
second adaptive engine whose table has no context term (key_slot_s = 0: every step priced and observed at the
table's context, as before the term existed), beside no speculation, fixed k and adaptive, in interleaved
cycles (`point_variance.py` reads the second engine as a variant).

    python benchmarks/context_cost_ab.py --method ngram --workload sharegpt --concurrency 32 --cycles 5

Why: a step's attention gathers each sequence's keys padded to its group's longest context, which the table,
measured at one context, did not see; the online refresh then scaled the whole row by plain steps' contexts
(workers/cost_table.py; docs/performance.md)."""
from __future__ import annotations

import argparse
from pathlib import Path

from point_variance import run_point  # benchmarks/, this script's folder
from workers import bench
from workers.bench import _spec, _warmed
from workers.config import EngineConfig
from workers.engine import LLMEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=("draft", "ngram"), default="ngram")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    mode = f"{args.method}:7:adaptive#nocontext"
    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(mode, 7)))
    print(f"the variant's table: key_slot_s {engine.adaptive.cost.key_slot_s * 1e6:.2f} us -> 0", flush=True)
    engine.adaptive.cost.key_slot_s = 0.0  # before its warm-up requests, which refresh the table
    engine = _warmed(engine, 48, 0)
    bench._ENGINES[(mode, 7, "auto")] = engine  # run_bench takes this engine for the variant
    point = f"{args.method}_{args.workload}_c{args.concurrency}"
    tag = f"_{args.tag}" if args.tag else ""
    out = Path(args.out or f"benchmarks/results/context_cost_{point}{tag}_cpu.json")
    run_point(args.method, args.workload, args.concurrency, args.cycles, [2, 4, 7], 48, 2, out,
              interleave=1, variants=(mode,))


if __name__ == "__main__":
    main()
