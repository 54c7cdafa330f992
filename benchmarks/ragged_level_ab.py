"""A/B of reading ragged steps against a uniform step run now (`OnlineTargetCosts.level`, docs/architecture.md):
an adaptive engine with the level ("level") against the same engine with it held at 1 ("lookup": a ragged step
read against the table's lookup alone, as before 6d7b4ea), in one process, interleaved with no speculation (and
a fixed k with `--fixed`). By default the case it was made for: both adaptive engines (the trained draft) first
serve one cycle of ShareGPT c=32, where a slow stretch had inflated the ragged cost at 32 requests, then
repetitive c=32 for 2 cycles. Prints and saves each configuration's tokens/s per cycle, the adaptive engines'
ratios to the best other configuration per cycle, level / lookup paired, and their ragged cells at the point's
request count after the history and after the point.

    python benchmarks/ragged_level_ab.py     # ~35 min on the 2-core AVX2 machine
    python benchmarks/ragged_level_ab.py --history-cycles 0 --workload sharegpt --concurrency 2 --fixed 2 --cycles 3
    python benchmarks/ragged_level_ab.py --method ngram --history-cycles 0 --concurrency 4 --fixed 7 --cycles 3
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from workers.bench import _ENGINES, _spec, _warmed, run_bench
from workers.config import EngineConfig
from workers.engine import LLMEngine

K = 7


def build(mode: str, hold_level: bool, max_tokens: int) -> None:
    """A warmed engine for `mode` where run_bench finds it; `hold_level`: the level stays 1 (the read before)."""
    engine = LLMEngine(EngineConfig(dtype="auto", kv_cache_memory_gb=0.5, spec=_spec(mode, K)))
    if hold_level:
        engine.adaptive.costs.observe_level = lambda *args: None
    _ENGINES[(mode, K, "auto")] = _warmed(engine, max_tokens, 0)


def ragged_cells(mode: str, requests: int) -> dict[str, float]:
    """The engine's ragged cells (ms) at the table row `requests` reads, by extra rows."""
    cost = _ENGINES[(mode, K, "auto")].adaptive.cost
    row = cost.nearest_requests(requests)
    return {f"e={e}": round(1e3 * s, 1) for (r, e), s in sorted(cost.ragged.items()) if r == row}


def point(workload: str, concurrency: int, modes: list[str], cycles: int, max_tokens: int) -> dict[str, list[float]]:
    rows = run_bench([workload], [concurrency], modes, K, max_tokens, [], 2, 0, "auto", None, repeat=cycles,
                     kv_cache_memory_gb=0.5, sustained=True, min_requests=8, interleave=1)
    return {mode: row.samples_tokens_per_s for mode, row in zip(modes, rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="draft", choices=["draft", "ngram"])
    ap.add_argument("--history-workload", default="sharegpt", choices=["repetitive", "sharegpt"])
    ap.add_argument("--history-concurrency", type=int, default=32)
    ap.add_argument("--history-cycles", type=int, default=1, help="0: the adaptive engines start at the point")
    ap.add_argument("--workload", default="repetitive", choices=["repetitive", "sharegpt"])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--fixed", type=int, default=0, help="also run fixed k=FIXED (0: no speculation alone)")
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", default=None, help="JSON (default benchmarks/results/ragged_level_ab_<point>_cpu.json)")
    args = ap.parse_args()
    level, lookup = f"{args.method}:{K}:adaptive", f"{args.method}:{K}:adaptive#lookup"
    build(level, False, args.max_tokens)
    build(lookup, True, args.max_tokens)
    out: dict = {"args": vars(args)}
    if args.history_cycles:
        out["history"] = point(args.history_workload, args.history_concurrency, [level, lookup],
                               args.history_cycles, args.max_tokens)
        out["ragged_ms_after_history"] = {m: ragged_cells(m, args.concurrency) for m in (level, lookup)}
        print("ragged cells after the history (ms):", out["ragged_ms_after_history"], flush=True)
    peers = ["off"] + ([f"{args.method}:{args.fixed}"] if args.fixed else [])
    samples = point(args.workload, args.concurrency, peers + [level, lookup], args.cycles, args.max_tokens)
    best = [max(samples[m][i] for m in peers) for i in range(args.cycles)]
    out["tokens_per_s"] = samples
    out["over_best_other"] = {m: [round(samples[m][i] / best[i], 4) for i in range(args.cycles)] for m in (level, lookup)}
    out["level_over_lookup"] = [round(samples[level][i] / samples[lookup][i], 4) for i in range(args.cycles)]
    out["ragged_ms_after_point"] = {m: ragged_cells(m, args.concurrency) for m in (level, lookup)}
    for m in (level, lookup):
        print(f"{m}: / max({', '.join(peers)}) per cycle {out['over_best_other'][m]}", flush=True)
    print(f"level / lookup paired {out['level_over_lookup']} median {statistics.median(out['level_over_lookup']):.3f}")
    print("ragged cells after the point (ms):", out["ragged_ms_after_point"], flush=True)
    name = f"{args.method}_{args.workload}_c{args.concurrency}" + (f"_after_{args.history_workload}"
                                                                    f"_c{args.history_concurrency}" if args.history_cycles else "")
    path = Path(args.out or f"benchmarks/results/ragged_level_ab_{name}_cpu.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
