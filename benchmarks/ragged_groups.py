"""What a ragged decode/verify step costs under each setting of `attention.GROUP_COST_ROWS`: the price, in
padded query rows, the attention's grouping puts on one more tiled group (sequences grouped by query length,
each group padded to its own longest query). A setting only decides how sequences are grouped, never what
they compute, so the outputs are the same; only time differs. Each shape is one forward of the default model
(no speculation engine) at a fixed context, the settings interleaved shape by shape, medians of the repeats.
The fp32 path pads every sequence to one fixed tile, so there is nothing to measure there.
What it does not show: in closed loop the setting it favours (40) made adaptive 2-3% slower
(benchmarks/group_cost_ab.py; docs/architecture.md, "How the attention groups lengths"), so read it with that.

    python benchmarks/ragged_groups.py --contexts 64,128,256 --requests 4,16,32 --settings 12,24,32,40,64,1000 \
        --repeats 6 --out benchmarks/results/ragged_groups_bf16_cpu.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

import workers.attention as attention
from workers.config import EngineConfig, SpecConfig
from workers.engine import LLMEngine
from workers.model_runner import ModelRunner, StepChunk


def shapes(b: int) -> dict[str, list[int]]:
    """Rows per sequence of steps of `b` requests: uniform, and the ragged mixes verification makes."""
    mixes = {"1x1": [], "1x2": [2], "1x8": [8], "2x5": [5, 5], "2x8": [8, 8], "4x2": [2] * 4, "4x5": [5] * 4,
             "3x3": [3] * 3, "1x3+1x5": [3, 5], "1x2+1x4+1x8": [2, 4, 8]}
    out = {}
    for name, rows in mixes.items():
        if len(rows) <= b:
            out[f"{b}x1" if not rows else f"{b - len(rows)}x1+{name}"] = [1] * (b - len(rows)) + rows
    out[f"{b}x2"] = [2] * b
    return out


def _forward_s(runner: ModelRunner, rows: list[int], context: int) -> float:
    per = -(-(context + max(rows)) // runner.block_size)
    blocks = runner.pool.allocate(len(rows) * per)
    try:
        t = time.perf_counter()
        runner.run([StepChunk([7] * n, context, blocks[i * per:(i + 1) * per], n) for i, n in enumerate(rows)])
        return time.perf_counter() - t
    finally:
        runner.pool.free(blocks)


def measure(runner: ModelRunner, context: int, requests: int, settings: list[int], repeats: int) -> dict:
    cases = shapes(requests)
    times: dict[tuple[str, int], list[float]] = {(k, s): [] for k in cases for s in settings}
    default = attention.GROUP_COST_ROWS
    try:
        for _ in range(repeats + 1):  # the first round warms up and is dropped
            for name, rows in cases.items():
                for s in settings:
                    attention.GROUP_COST_ROWS = s
                    times[name, s].append(_forward_s(runner, rows, context))
    finally:
        attention.GROUP_COST_ROWS = default
    medians = {name: {str(s): round(1e3 * statistics.median(times[name, s][1:]), 2) for s in settings}
               for name in cases}
    ragged = [n for n, rows in cases.items() if len(set(rows)) > 1]
    geo = {str(s): round(math.exp(statistics.mean(math.log(medians[n][str(s)] / medians[n][str(settings[0])])
                                                  for n in ragged)), 4) for s in settings}
    return {"context": context, "requests": requests, "ms": medians, "ragged_vs_first_setting": geo}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="64,128,256")
    ap.add_argument("--requests", default="4,16,32")
    ap.add_argument("--settings", default="12,24,40,64,1000", help="GROUP_COST_ROWS values; the first is the base")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    settings = [int(x) for x in a.settings.split(",")]
    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=SpecConfig(method="off")))
    if attention.fixed_tile_needed(engine.model.dtype):
        raise SystemExit(f"{engine.model.dtype}: every sequence is padded to one fixed tile; nothing to measure")
    points = []
    for context in (int(x) for x in a.contexts.split(",")):
        for requests in (int(x) for x in a.requests.split(",")):
            p = measure(engine.runner, context, requests, settings, a.repeats)
            points.append(p)
            print(f"context {context} requests {requests}: ragged steps vs GROUP_COST_ROWS={settings[0]} "
                  f"(geometric mean) {p['ragged_vs_first_setting']}")
            for name, ms in p["ms"].items():
                print(f"  {name:24s}" + "".join(f"{ms[str(s)]:9.1f}" for s in settings))
    overall = {str(s): round(math.exp(statistics.mean(math.log(p["ragged_vs_first_setting"][str(s)])
                                                      for p in points)), 4) for s in settings}
    print("all points, ragged steps vs the first setting (geometric mean):", overall)
    if a.out:
        a.out.write_text(json.dumps({"settings": settings, "repeats": a.repeats, "dtype": str(engine.model.dtype),
                                     "machine": {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                                 "cores": os.cpu_count()},
                                     "overall": overall, "points": points}, indent=1) + "\n")


if __name__ == "__main__":
    main()
