"""How much one point of the adaptive grid moves between runs of the same configurations on the same prompts:
one (proposer, workload, concurrency) point of `benchmarks/adaptive_engine.py`, run for many cycles (each
cycle runs every configuration once, back to back, as the grid does), then the spread of each configuration's
tokens/s and of adaptive / max(no spec, best fixed k) per cycle, and what a grid point (the median of
`--grid-repeat` cycles, 2 as the grid of record runs) would read for every such choice of those cycles.

    python benchmarks/point_variance.py --method draft --workload repetitive --concurrency 8 --cycles 10
    python benchmarks/point_variance.py --method ngram --workload sharegpt --concurrency 2 --cycles 10
    python benchmarks/point_variance.py --misses benchmarks/results/adaptive_engine_cpu.json --cycles 8

`--misses`: every point of a grid's results where adaptive read < 0.98 x max(no spec, best fixed k), each in turn
(one JSON per point). A grid of 2-3 cycles screens; this confirms or clears its misses.

`--interleave`: a cycle's configurations run together, step by step in turn, each timed by its own steps
(workers/closed_loop.py), so drift within a cycle falls on all of them alike.

`--fresh-prompts`: cycle i serves its own sample of prompts and output lengths (seed i; cycle 0 the grid's),
so the cycles' spread includes which prompts a window holds (workers/bench.py, `run_bench`).

`--placebo K`: a second engine of fixed k=K runs in every cycle and is read exactly as adaptive is, against
max(no spec, every fixed k) with its twin among them. Where several configurations are within noise of each
other, the max of their noisy samples is biased up, so even an engine identical to the best one reads below
1.0 paired; the placebo measures that bias on the same cycles (n-gram, repetitive, c=1, 8 cycles: a copy of k=7
read 0.973 paired, p10 0.82, and below 0.98 in half the cycles). Adaptive is short of the best by what it reads
below the placebo, not below 1.0.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

from workers.bench import run_bench
from workers.metrics import percentile

GRID_REPEAT = 2  # the --repeat of the grid of record (docs/performance.md)


def quantiles(xs: list[float]) -> dict[str, float]:
    return {"min": round(min(xs), 4), "p10": round(percentile(xs, 10), 4), "median": round(statistics.median(xs), 4),
            "p90": round(percentile(xs, 90), 4), "max": round(max(xs), 4)}


def analyse(samples: dict[str, list[float]], adaptive: str, placebo: str | None = None,
            grid_repeat: int = GRID_REPEAT, variants: tuple[str, ...] = ()) -> dict:
    """Per configuration: its tokens/s spread. Adaptive: its ratio to the best other configuration of the
    same cycle (and to no speculation), and the ratio a grid point would report (medians over `grid_repeat`
    cycles, each configuration its own median) for every choice of `grid_repeat` cycles. With a `placebo`
    (a copy of one fixed configuration), the same figures for it, against the same configurations; so for each
    of the `variants` (other adaptive configurations). Adaptive, the placebo and the variants are never part
    of what they are read against: a variant's ratio once counted itself in the max, which capped it at 1.0."""
    fixed = [m for m in samples if m not in (adaptive, placebo, *variants)]  # no speculation and fixed k
    out = {"tokens_per_s": {m: quantiles(v) for m, v in samples.items()},
           "relative_spread": {m: round((max(v) - min(v)) / statistics.median(v), 4) for m, v in samples.items()},
           "grid_repeat": grid_repeat, **against(samples, adaptive, fixed, grid_repeat)}
    if placebo is not None:
        out["placebo"] = {"copy_of": placebo.partition("#")[0], **against(samples, placebo, fixed, grid_repeat)}
    if variants:
        out["variants"] = {v: against(samples, v, fixed, grid_repeat) for v in variants}
    return out


def against(samples: dict[str, list[float]], subject: str, others: list[str], grid_repeat: int) -> dict:
    """`subject` / max(`others`): per cycle, over all cycles by medians, and as a grid point would read it."""
    cycles = range(len(samples[subject]))
    paired = [samples[subject][i] / max(samples[m][i] for m in others) for i in cycles]
    vs_off = [samples[subject][i] / samples["off"][i] for i in cycles]
    grid = [statistics.median(samples[subject][i] for i in pick) /
            max(statistics.median(samples[m][i] for i in pick) for m in others)
            for pick in itertools.combinations(cycles, grid_repeat)]
    share = lambda xs: round(sum(r >= 0.98 for r in xs) / len(xs), 3)  # noqa: E731
    return {"paired_ratio": quantiles(paired), "paired_at_least_0.98": share(paired),
            "paired_vs_off": quantiles(vs_off),
            "medians_ratio": round(statistics.median(samples[subject]) /
                                   max(statistics.median(samples[m]) for m in others), 4),
            "grid_point_ratio": quantiles(grid), "grid_point_at_least_0.98": share(grid)}


def markdown_table(results: list[dict]) -> str:
    out = ["| point | cycles | adaptive / best, paired: median (p10-p90) | adaptive / no spec, paired: median | "
           "a grid point: median (min-max) | grid points >= 0.98 | placebo / best, paired: median "
           "(p10-p90) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        p, pr, g = r["point"], r["paired_ratio"], r["grid_point_ratio"]
        name = f"{'trained draft' if p['method'] == 'draft' else 'n-gram'} {p['workload']} c={p['concurrency']}"
        pl = r.get("placebo", {}).get("paired_ratio")
        placebo = f"{pl['median']:.3f} ({pl['p10']:.3f}-{pl['p90']:.3f})" if pl else "-"
        cycles = f"{r['cycles']} (grid points of {r.get('grid_repeat', 3)})"  # before the field: 3
        out.append(f"| {name} | {cycles} | {pr['median']:.3f} ({pr['p10']:.3f}-{pr['p90']:.3f}) | "
                   f"{r['paired_vs_off']['median']:.3f} | {g['median']:.3f} ({g['min']:.3f}-{g['max']:.3f}) | "
                   f"{r['grid_point_at_least_0.98']:.0%} | {placebo} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=("draft", "ngram"), default="draft")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="repetitive")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--fixed", default="2,4,7", help="fixed k to run (the grid runs 2,4,7)")
    ap.add_argument("--placebo", type=int, metavar="K", help="also run a second engine of fixed k=K (see above)")
    ap.add_argument("--variant", action="append", default=[], metavar="MODE",
                    help="also run this configuration (e.g. draft:7:adaptive#copy, a second adaptive engine), "
                         "read as adaptive is")
    ap.add_argument("--interleave", type=int, nargs="?", const=1, default=0, metavar="STEPS",
                    help="run a cycle's configurations together, step by step in turn (workers/closed_loop.py)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--per-slot", type=int, default=2)
    ap.add_argument("--fresh-prompts", action="store_true", help="each cycle its own prompt sample (see above)")
    ap.add_argument("--grid-repeat", type=int, default=GRID_REPEAT,
                    help="cycles per grid point in the 'grid point' figures (the grid's --repeat)")
    ap.add_argument("--out", default=None, help="JSON (default benchmarks/results/point_variance_<point>_cpu.json)")
    ap.add_argument("--misses", metavar="GRID_JSON", help="run every point where that grid's adaptive missed 0.98")
    ap.add_argument("--tag", default="", help="put into the default JSON names (point_variance_<point>_<tag>_cpu.json), "
                    "so a rerun of a point on another machine or commit keeps the earlier file")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="only print the docs' table of earlier results")
    args = ap.parse_args()
    if args.cycles < args.grid_repeat:
        ap.error(f"--cycles must be at least --grid-repeat ({args.grid_repeat}): a grid point is the median "
                 f"of that many cycles")
    if args.table:
        print(markdown_table([json.loads(Path(f).read_text()) for f in args.table]))
        return
    points = [(args.method, args.workload, args.concurrency)]
    if args.misses:
        summary = json.loads(Path(args.misses).read_text())["summary"]
        points = [(s["method"], s["workload"], s["concurrency"]) for s in summary if s["adaptive_vs_best"] < 0.98]
        print(f"{len(points)} points missed 0.98 in {args.misses}: {points}", flush=True)
    for method, workload, c in points:
        out = None if args.misses else args.out
        tag = f"_{args.tag}" if args.tag else ""
        run_point(method, workload, c, args.cycles, [int(k) for k in args.fixed.split(",")], args.max_tokens,
                  args.per_slot, Path(out or f"benchmarks/results/point_variance_{method}_{workload}_c{c}{tag}_cpu.json"),
                  args.placebo, args.interleave, args.grid_repeat, tuple(args.variant), args.fresh_prompts)


def run_point(method: str, workload: str, c: int, cycles: int, fixed: list[int], max_tokens: int, per_slot: int,
              out: Path, placebo_k: int | None = None, interleave: int = 0, grid_repeat: int = GRID_REPEAT,
              variants: tuple[str, ...] = (), fresh_prompts: bool = False, seed: int = 0,
              min_requests: int = 8) -> None:
    adaptive = f"{method}:7:adaptive"
    placebo = f"{method}:{placebo_k}#placebo" if placebo_k else None
    modes = ["off"] + [f"{method}:{k}" for k in fixed] + [adaptive] + ([placebo] if placebo else []) + list(variants)
    rows = run_bench([workload], [c], modes, 7, max_tokens, [], per_slot, seed, "auto", None, repeat=cycles,
                     kv_cache_memory_gb=0.5, sustained=True, min_requests=min_requests, interleave=interleave,
                     fresh_prompts=fresh_prompts)
    samples = {m: r.samples_tokens_per_s for m, r in zip(modes, rows)}
    result = {"point": {"method": method, "workload": workload, "concurrency": c}, "cycles": cycles, "seed": seed,
              "min_requests": min_requests,
              "interleave": interleave, "max_tokens": max_tokens, "per_slot": per_slot, "fresh_prompts": fresh_prompts,
              "samples_tokens_per_s": samples,
              **analyse(samples, adaptive, placebo, grid_repeat, variants)}
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "samples_tokens_per_s"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
