"""Does an engine pay for the other engines' steps when configurations run interleaved?

`--interleave N` (workers/closed_loop.py) runs N steps of one engine, then N of the next. If a step that
follows another engine's step costs more than one that follows the same engine's own step (colder caches,
other buffers paged in), then at N=1 every step pays it and the configuration with the most steps (no
speculation) is charged most: a bias that interleaving would add where it removes drift.

This runs a point interleaved with `--steps` per turn and compares, per engine and per step shape (rows in
the forward), each turn's FIRST step (after another engine's) with the turn's later steps (after its own), as
the ratio of each first step's time to the median later step of the same engine and shape. Both kinds of step
run in the same minutes, so drift cancels.

    python benchmarks/interleave_penalty.py --method draft --workload repetitive --concurrency 4 --steps 4
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

from workers.bench import _spec, _warmed, sustained_plan, varied_lengths, workload_prompts
from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig
from workers.engine import LLMEngine
from workers.metrics import percentile


def instrument(engine: LLMEngine, log: list[tuple[int, float]]) -> None:
    """Record (rows, forward seconds) of every forward the engine's runner does."""
    run = engine.runner.run

    def timed(chunks):
        t = time.perf_counter()
        out = run(chunks)
        log.append((sum(len(c.token_ids) for c in chunks), time.perf_counter() - t))
        return out
    engine.runner.run = timed


def run(loops: dict[str, ClosedLoop], logs: dict[str, list], steps: int) -> tuple[dict[str, list], dict[str, dict]]:
    """run_interleaved; per engine its result and, per step, (after another engine's step, rows, tick s, forward
    s). A turn's first step, unless the round before ended with the same engine (then it follows its own)."""
    out: dict[str, list] = defaultdict(list)
    name = {id(loop): m for m, loop in loops.items()}
    seen = {m: len(logs[m]) for m in loops}

    def on_tick(loop: ClosedLoop, after_another: bool, seconds: float) -> None:
        m = name[id(loop)]
        if len(logs[m]) == seen[m] + 1:  # one forward ran in this tick
            rows, fwd = logs[m][-1]
            out[m].append((after_another, rows, seconds, fwd))
        seen[m] = len(logs[m])
    results = run_interleaved(list(loops.values()), steps, on_tick)
    return out, dict(zip(loops, results))


def penalty(records: list[tuple[bool, int, float, float]], field: int) -> dict:
    """Each first-in-turn step's time / the median later step of the same rows."""
    later = defaultdict(list)
    for first, rows, *times in records:
        if not first:
            later[rows].append(times[field])
    ratios = [times[field] / statistics.median(later[rows]) for first, rows, *times in records
              if first and len(later[rows]) >= 3]
    if not ratios:
        return {"steps": 0}
    return {"steps": len(ratios), "median": round(statistics.median(ratios), 4),
            "p10": round(percentile(ratios, 10), 4), "p90": round(percentile(ratios, 90), 4),
            "mean": round(statistics.fmean(ratios), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=("draft", "ngram"), default="draft")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="repetitive")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--modes", default="off,{m}:2,{m}:7:adaptive", help="configurations ({m}: the method)")
    ap.add_argument("--steps", type=int, default=4, help="steps per turn (>= 2: the later steps are the control)")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--per-slot", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be at least 2: a turn's later steps are what its first is compared with")
    modes = args.modes.format(m=args.method).split(",")
    c = args.concurrency
    engines = {m: _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(m, 7))), args.max_tokens, 0)
               for m in modes}  # built and warmed as the grid builds them
    n = max(args.per_slot * c, 8)
    warm, count = sustained_plan(c, n)
    prompts = [engines[modes[0]].encode_prompt(t, chat=True) for t in workload_prompts(args.workload, count, 0)]
    lengths = varied_lengths(count, args.max_tokens, 0)
    logs = {m: [] for m in modes}
    for m in modes:
        instrument(engines[m], logs[m])
    records: dict[str, list] = defaultdict(list)
    tokens_per_s: dict[str, list[float]] = defaultdict(list)
    for cycle in range(args.cycles):
        loops = {m: ClosedLoop(engines[m], prompts, c, lengths, admit=count, untimed=warm) for m in modes}
        recs, results = run(loops, logs, args.steps)
        for m in modes:
            records[m] += recs[m]
            tokens_per_s[m].append(round(results[m]["output_tokens_per_s"], 2))
        print(f"cycle {cycle + 1}/{args.cycles}: " + ", ".join(f"{m} {tokens_per_s[m][-1]}" for m in modes), flush=True)
    result = {"point": {"method": args.method, "workload": args.workload, "concurrency": c}, "steps_per_turn": args.steps,
              "cycles": args.cycles, "tokens_per_s": tokens_per_s,
              "first_step_vs_later": {m: {"tick": penalty(records[m], 0), "forward": penalty(records[m], 1),
                                          "later_tick_ms_median": round(1e3 * statistics.median(
                                              r[2] for r in records[m] if not r[0]), 2)} for m in modes}}
    out = args.out or Path(f"benchmarks/results/interleave_penalty_{args.method}_{args.workload}_c{c}_cpu.json")
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["first_step_vs_later"], indent=1))


if __name__ == "__main__":
    main()
