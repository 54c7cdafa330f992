"""What the row-invariant split GEMMs cost: one engine (no speculation) whose forward picks, step by step at
random, between the weights split along their inputs (as the start-up check chose on this CPU) and plain
GEMMs (faster where the split is needed, but then greedy output depends on the batch). Steps are compared
within the same shape (rows, prefill segments), so both sides do the same work, and the machine's drift over
minutes (+-15% between runs here) falls on both alike. Nothing to measure on a CPU whose plain GEMMs hold.

    python benchmarks/gemm_split_cost.py --concurrency 1,8,32 --rounds 3 \
        --out benchmarks/results/gemm_split_cost_cpu.json
"""
from __future__ import annotations

import argparse
import json
import platform
import math
import random
import statistics
import time
from pathlib import Path

from workers.bench import _warmed, run_ours, sustained_plan, varied_lengths, workload_prompts
from workers.config import EngineConfig
from workers.engine import LLMEngine


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _compare(c: int, fwd: dict[tuple, dict[str, list[float]]]) -> dict:
    """Per step shape seen on both sides, the ratio of medians; their geometric mean weighted by steps."""
    logs, weights = [], []
    for times in fwd.values():
        if times["split"] and times["plain"]:
            logs.append(math.log(statistics.median(times["split"]) / statistics.median(times["plain"])))
            weights.append(len(times["split"]) + len(times["plain"]))
    every = {k: [t for times in fwd.values() for t in times[k]] for k in ("split", "plain")}
    return {"concurrency": c, "shapes": len(logs), "steps_compared": sum(weights),
            "steps": {k: len(v) for k, v in every.items()},
            "split_over_plain": math.exp(sum(l * w for l, w in zip(logs, weights)) / sum(weights)),
            "forward_ms_median": {k: statistics.median(v) * 1e3 for k, v in every.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--per-slot", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    e = _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5)), args.max_tokens, 0)
    split = dict(e.model.k_parts)
    if not split:
        raise SystemExit(f"nothing to measure: this CPU's plain {e.model.dtype} GEMMs hold (rows_invariant="
                         f"{e.model.rows_invariant})")
    points = []
    for c in (int(x) for x in args.concurrency.split(",")):
        warm, count = sustained_plan(c, max(args.per_slot * c, 8))  # the grid's window
        prompts = [e.encode_prompt(t, chat=True) for t in workload_prompts(args.workload, count, 0)]
        lengths = varied_lengths(count, args.max_tokens, 0)
        fwd: dict[tuple, dict[str, list[float]]] = {}  # step shape -> state -> forward seconds
        forward, coin = e.model.forward, random.Random(c)

        def randomised(input_ids, positions, kv, meta, *a, **kw):
            state = coin.choice(("split", "plain"))
            e.model.k_parts = split if state == "split" else {}
            t = time.perf_counter()
            out = forward(input_ids, positions, kv, meta, *a, **kw)
            shape = (input_ids.shape[0], sum(1 for _, pad in meta.row_blocks if pad))
            fwd.setdefault(shape, {"split": [], "plain": []})[state].append(time.perf_counter() - t)
            return out

        e.model.forward = randomised
        for rnd in range(args.rounds):
            r = run_ours(e, prompts, c, lengths, admit=count, untimed=warm)
            print(f"c={c} round {rnd}: {r['output_tokens_per_s']:.1f} tok/s", flush=True)
        del e.model.forward
        points.append(_compare(c, fwd))
        p = points[-1]
        print(f"c={c}: split / plain forward, same-shape medians, step-weighted geometric mean "
              f"{p['split_over_plain']:.3f} over {p['steps_compared']} steps in {p['shapes']} shapes "
              f"(all steps' medians: {p['forward_ms_median']['split']:.2f} / {p['forward_ms_median']['plain']:.2f} ms)",
              flush=True)
    e.model.k_parts = split
    if args.out:
        args.out.write_text(json.dumps({
            "what": " ".join(__doc__.split("\n\n")[0].split()), "dtype": str(e.model.dtype), "cpu": _cpu_name(),
            "split_weights": len(split), "pieces": sorted({tuple(v.shape) for v in split.values()}),
            "workload": args.workload, "max_tokens": args.max_tokens, "rounds": args.rounds, "points": points,
        }, indent=1))


if __name__ == "__main__":
    main()
