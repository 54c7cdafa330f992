"""What a short sustained window charges each configuration: one long closed-loop run per configuration
(n-gram, ShareGPT, c=32 by default) with every step's time, tokens out and prompts admitted recorded, then
the tokens/s ratio to no speculation over sub-windows cut at admissions: the first 2c - 1 (the grid's window
until 2026-12-01, first wave included), the whole run, and consecutive windows of c and 2c after the first
wave (the grid's window since).

    python benchmarks/window_bias.py --concurrency 32 --requests 256      # ~7 min
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from workers.bench import _spec, _warmed, run_ours, varied_lengths, workload_prompts
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


def rate(tl: list[tuple], lo: int, hi: int) -> float:
    """Tokens/s between the steps that close the windows of `lo` and `hi` admissions (0: the start)."""
    def close(a: int) -> tuple:
        return max((e for e in tl if e[2] <= a), key=lambda e: e[0]) if a else (0.0, 0, 0)
    (t1, o1, _), (t2, o2, _) = close(lo), close(hi)
    return (o2 - o1) / (t2 - t1)


def windows(c: int, n: int) -> dict[str, list[tuple[int, int]]]:
    after = lambda size: [(lo, lo + size) for lo in range(c, n - size + 1, size)]  # noqa: E731
    return {"first 2c-1 (old grid)": [(0, 2 * c - 1)], "whole run": [(0, n - 1)],
            "all after the first wave": [(c, n - 1)], "c after the first wave": after(c),
            "2c after the first wave": after(2 * c)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--modes", default="off,ngram:2,ngram:7:adaptive")
    ap.add_argument("--out", default="benchmarks/results/window_bias_cpu.json")
    args = ap.parse_args()
    c, n = args.concurrency, args.requests
    engines = {m: _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(m, 7))), MEAN_TOKENS, 0)
               for m in args.modes.split(",")}
    encoder = next(iter(engines.values()))
    prompts = [encoder.encode_prompt(t, chat=True) for t in workload_prompts(args.workload, n, 0)]
    lengths = varied_lengths(n, MEAN_TOKENS, 0)
    lines = {}
    for m, e in engines.items():
        run_ours(e, prompts[:2], 2, 4)  # warm-up
        lines[m] = timeline(e, prompts, c, lengths)
        print(f"{m}: {lines[m][-1][1] / lines[m][-1][0]:.2f} tok/s over {n} requests", flush=True)
    base = next(iter(lines))
    ratios = {name: {m: [round(rate(tl, lo, hi) / rate(lines[base], lo, hi), 4) for lo, hi in spans]
                     for m, tl in lines.items() if m != base}
              for name, spans in windows(c, n).items()}
    for name, r in ratios.items():
        print(name, json.dumps(r))
    Path(args.out).write_text(json.dumps({"concurrency": c, "requests": n, "workload": args.workload,
                                          "mean_tokens": MEAN_TOKENS, "baseline": base,
                                          "tokens_per_s_whole_run": {m: round(tl[-1][1] / tl[-1][0], 2)
                                                                     for m, tl in lines.items()},
                                          "ratios": ratios,
                                          "timelines": lines}, indent=1))


if __name__ == "__main__":
    main()
