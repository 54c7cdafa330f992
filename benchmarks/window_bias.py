"""What a short sustained window charges each configuration: one long closed-loop run per configuration
(n-gram, ShareGPT, c=32 by default) with every step's time, tokens out and prompts admitted recorded, then
the tokens/s ratio to no speculation over sub-windows cut at admissions: the first 2c - 1 (the grid's window
until 2026-12-01, first wave included), the whole run, and consecutive windows of c and 2c after the first
wave (the grid's window since).

With `--interleave`, the configurations serve their loads together, one step each in turn, each timed by its
own steps (workers/closed_loop.py), for `--cycles` cycles: drift then falls on all of them alike, and windows
of a few dozen requests can be compared between configurations. A mode `ngram:7:adaptive#capD` is adaptive
whose verify lengths are capped at D after the trim (benchmarks/adaptive_variant_ab.py). Ratios are to the
first mode.

    python benchmarks/window_bias.py --concurrency 32 --requests 256      # ~7 min
    python benchmarks/window_bias.py --workload repetitive --concurrency 32 --requests 288 --interleave \
        --cycles 2 --modes ngram:2,off,ngram:7:adaptive,ngram:7:adaptive#cap3 --seed 1   # ~10 min
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from adaptive_variant_ab import _after_trim  # benchmarks/, this script's folder
from workers.bench import _spec, _warmed, run_ours, varied_lengths, workload_prompts
from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig
from workers.engine import LLMEngine

MEAN_TOKENS = 48


def timeline(engine: LLMEngine, prompts: list[list[int]], c: int, lengths: list[int]) -> list[tuple]:
    """(seconds, tokens out, prompts admitted) after every step of one run that admits every prompt."""
    rows, count = [], {"out": 0, "admitted": 0}
    step, add = engine.step, engine.add_request

    def counted_add(prompt, sp):
        count["admitted"] += 1
        return add(prompt, sp)

    def counted_step():
        outs = step()
        count["out"] += sum(len(o.new_token_ids) for o in outs)
        rows.append((time.perf_counter(), count["out"], count["admitted"]))
        return outs

    engine.step, engine.add_request = counted_step, counted_add
    t0 = time.perf_counter()
    try:
        run_ours(engine, prompts, c, lengths, admit=len(prompts))
    finally:
        del engine.step, engine.add_request  # back to the class's methods
    return [(round(t - t0, 4), o, a) for t, o, a in rows[:-1]]  # the last step only collects the aborted


def interleaved_timelines(engines: dict[str, LLMEngine], prompts: list[list[int]], c: int,
                          lengths: list[int]) -> dict[str, list[tuple]]:
    """`timeline` for every engine at once, their loops interleaved one step each in turn; each engine's
    seconds are its own ticks' (`ClosedLoop.busy`)."""
    lines: dict[str, list[tuple]] = {}
    loops = []
    for m, e in engines.items():
        run_ours(e, prompts[:2], 2, 4)  # warm-up
        loop, rows = ClosedLoop(e, prompts, c, lengths, admit=len(prompts)), []
        tick = loop.tick

        def logged_tick(loop=loop, rows=rows, tick=tick) -> None:
            tick()
            rows.append((round(loop.busy, 4), loop.out_tokens, loop.served))

        loop.tick = logged_tick
        lines[m] = rows
        loops.append(loop)
    run_interleaved(loops)
    return lines


def rate(tl: list[tuple], lo: int, hi: int) -> float:
    """Tokens/s between the steps that close the windows of `lo` and `hi` admissions (0: the start)."""
    def close(a: int) -> tuple:
        return max((e for e in tl if e[2] <= a), key=lambda e: e[0]) if a else (0.0, 0, 0)
    (t1, o1, _), (t2, o2, _) = close(lo), close(hi)
    return (o2 - o1) / (t2 - t1)


def windows(c: int, n: int) -> dict[str, list[tuple[int, int]]]:
    after = lambda size: [(lo, lo + size) for lo in range(c, n - size + 1, size)]  # noqa: E731
    return {"first 2c-1 (old grid)": [(0, 2 * c - 1)], "whole run": [(0, n - 1)],
            "all after the first wave": [(c, n - 1)], "all after the second wave": [(2 * c, n - 1)],
            "c after the first wave": after(c),
            "2c after the first wave": after(2 * c)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--modes", default="off,ngram:2,ngram:7:adaptive")
    ap.add_argument("--seed", type=int, default=0, help="the prompt sample and output lengths")
    ap.add_argument("--interleave", action="store_true", help="the modes together, one step each in turn")
    ap.add_argument("--cycles", type=int, default=1, help="with --interleave: runs of every mode together")
    ap.add_argument("--out", default="benchmarks/results/window_bias_cpu.json")
    args = ap.parse_args()
    c, n = args.concurrency, args.requests
    engines = {m: _warmed(_engine(m), MEAN_TOKENS, 0) for m in args.modes.split(",")}
    encoder = next(iter(engines.values()))
    prompts = [encoder.encode_prompt(t, chat=True) for t in workload_prompts(args.workload, n, args.seed)]
    lengths = varied_lengths(n, MEAN_TOKENS, args.seed)
    runs = []
    for _ in range(args.cycles if args.interleave else 1):
        if args.interleave:
            lines = interleaved_timelines(engines, prompts, c, lengths)
        else:
            lines = {}
            for m, e in engines.items():
                run_ours(e, prompts[:2], 2, 4)  # warm-up
                lines[m] = timeline(e, prompts, c, lengths)
        for m, tl in lines.items():
            print(f"{m}: {tl[-1][1] / tl[-1][0]:.2f} tok/s over {n} requests", flush=True)
        runs.append(lines)
    base = next(iter(engines))
    ratios = [{name: {m: [round(rate(tl, lo, hi) / rate(lines[base], lo, hi), 4) for lo, hi in spans]
                      for m, tl in lines.items() if m != base}
               for name, spans in windows(c, n).items()} for lines in runs]
    for i, cycle in enumerate(ratios):
        for name, r in cycle.items():
            print(f"cycle {i}: {name} {json.dumps(r)}")
    one = not args.interleave  # the JSON's shape before --interleave: one run's rates, ratios and timelines
    whole = [{m: round(tl[-1][1] / tl[-1][0], 2) for m, tl in lines.items()} for lines in runs]
    Path(args.out).write_text(json.dumps({"concurrency": c, "requests": n, "workload": args.workload,
                                          "seed": args.seed, "interleave": args.interleave,
                                          "mean_tokens": MEAN_TOKENS, "baseline": base,
                                          "tokens_per_s_whole_run": whole[0] if one else whole,
                                          "ratios": ratios[0] if one else ratios,
                                          "timelines": runs[0] if one else runs}, indent=1))


def _engine(mode: str) -> LLMEngine:
    """The engine of `mode`; `...#capD`: adaptive capped at D drafts per request after the trim (any other
    '#name' is a copy of the configuration, as `_spec` reads it)."""
    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(mode, 7)))
    part = mode.partition("#")[2]
    if re.fullmatch(r"cap\d+", part):
        _after_trim(engine, part)
    return engine


if __name__ == "__main__":
    main()
