"""A/B of the warm-up table's row shape (an experiment, not a setting): one point of the adaptive grid, with a
second adaptive engine whose table prices every extra row at `--rows` requests and above at `--shape` times the
warm-up's (seconds above the row's plain cell), beside no speculation, fixed k and adaptive as is, in
interleaved cycles (`point_variance.py` reads it as a variant).

    python benchmarks/table_shape_ab.py --method ngram --workload sharegpt --concurrency 32 --shape 0.6 --cycles 5

Why: at n-gram ShareGPT c=32 on an AMD EPYC, fixed k=4's steps ran at 0.96-1.00x the table's price and no
speculation's at 1.16-1.17x (benchmarks/profile_steps.py), and the online refresh scales a whole row
(cost_table.LEVEL_SHARE), so the row's shape stays the warm-up's (docs/performance.md)."""
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
    ap.add_argument("--shape", type=float, default=0.6, help="scale of each extra row's seconds")
    ap.add_argument("--rows", type=int, default=32, help="request counts from which the table is reshaped")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    mode = f"{args.method}:7:adaptive#shape"
    engine = _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(mode, 7))), 48, 0)
    table = engine.adaptive.cost
    for (r, n), s in list(table.seconds.items()):
        if r >= args.rows and n > r:
            plain = table.seconds[(r, r)]
            table.seconds[(r, n)] = plain + (s - plain) * args.shape
    table._curves.clear()  # the lookup curves are rebuilt from the cells
    print("reshaped:", {k: round(v * 1e3, 1) for k, v in sorted(table.seconds.items()) if k[0] >= args.rows}, flush=True)
    bench._ENGINES[(mode, 7, "auto")] = engine  # run_bench takes this engine for the variant
    point = f"{args.method}_{args.workload}_c{args.concurrency}"
    out = Path(args.out or f"benchmarks/results/table_shape_{point}_x{args.shape}_cpu.json")
    run_point(args.method, args.workload, args.concurrency, args.cycles, [2, 4, 7], 48, 2, out,
              interleave=1, variants=(mode,))


if __name__ == "__main__":
    main()
