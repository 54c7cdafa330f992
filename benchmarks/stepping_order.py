"""Does an engine's place in the interleaved order move its reading? The grid's points with a second copy of
an adaptive engine placed right after no speculation.

The grid (benchmarks/adaptive_engine.py) steps its configurations together (workers/closed_loop.py). Until
2026-12-06 every round kept one cyclic order, so the trained draft's adaptive engine stepped right after fixed
n-gram k=7 nearly every time, and a copy of it stepping right after no speculation read ~2% higher
(repetitive c=16 and c=32). Each round now has its own order; this reads the copy against the grid's engine
again, both in the grid's company, so the two should agree within the machine's noise.

    python benchmarks/stepping_order.py --workload repetitive --concurrency 16,32 --seed 4
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from adaptive_engine import MODES, machine  # noqa: E402  (same folder: run as a script)
from workers.bench import run_bench  # noqa: E402

COPY = "#early"


def modes(copy_of: str) -> list[str]:
    """The grid's configurations, with a copy of `copy_of` right after no speculation (in the list: with the
    cyclic order that was also its place in every round)."""
    return MODES[:1] + [copy_of + COPY] + MODES[1:]


def ratios(order: list[str], samples: list[list[float]], copy_of: str) -> dict:
    """Per cycle: each configuration over no speculation, and the grid's engine over its copy."""
    s = dict(zip(order, samples))
    over = lambda a, b: [round(x / y, 4) for x, y in zip(s[a], s[b])]  # noqa: E731
    return {"over_off": {m: over(m, "off") for m in order}, "engine_over_copy": over(copy_of, copy_of + COPY)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="repetitive", choices=["sharegpt", "repetitive"])
    ap.add_argument("--concurrency", default="16,32")
    ap.add_argument("--copy-of", default="draft:7:adaptive", choices=[m for m in MODES if m.endswith("adaptive")])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=4, help="the prompt sample (cycle r serves seed + r), as the grid's")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    order = modes(args.copy_of)
    cs = [int(c) for c in args.concurrency.split(",")]
    rows = run_bench([args.workload], cs, order, 7, 48, [], 2, args.seed, "auto", None, repeat=args.repeat,
                     kv_cache_memory_gb=0.5, sustained=True, min_requests=16, interleave=1, fresh_prompts=True)
    points = []
    for i, c in enumerate(cs):
        part = rows[i * len(order):(i + 1) * len(order)]
        points.append({"concurrency": c, **ratios(order, [r.samples_tokens_per_s for r in part], args.copy_of),
                       "rows": [r.__dict__ for r in part]})
        print(c, json.dumps({k: v for k, v in points[-1].items() if k != "rows"}))
    out = Path(args.out or f"benchmarks/results/stepping_order_{args.workload}_seed{args.seed}_cpu.json")
    out.write_text(json.dumps({"modes": order, "workload": args.workload, "seed": args.seed, "repeat": args.repeat,
                               "machine": machine(), "points": points}, indent=1))


if __name__ == "__main__":
    main()
