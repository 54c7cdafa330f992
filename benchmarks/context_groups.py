"""What splitting a step's query tile by context saves (`attention_groups.split_by_context`): plain and ragged decode
steps of the default model at ShareGPT-like contexts (each sequence's chat prompt, capped at 1000 tokens, plus
0-48 generated), timed with the split (`GROUP_COST_SLOTS`) and without it (one group per query tile, every
sequence's keys padded to the longest context), interleaved shape by shape, medians of the repeats. Only time
differs: the logits are the same (tests/workers/test_attention.py).

    python benchmarks/context_groups.py --requests 8,16,32 --draws 3 --repeats 6 \
        --out benchmarks/results/context_groups_bf16_cpu.json
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

import workers.attention_groups as attention_groups
from workers.config import EngineConfig, SpecConfig
from workers.engine import LLMEngine
from workers.model_runner import ModelRunner, StepChunk
from workers.workloads import sharegpt_prompts

NO_SPLIT = 10 ** 9  # a group cost no padding saved pays for


def _forward_s(runner: ModelRunner, rows: list[int], contexts: list[int]) -> float:
    per = [-(-(c + r) // runner.block_size) for c, r in zip(contexts, rows)]
    blocks = runner.pool.allocate(sum(per))
    try:
        chunks, at = [], 0
        for c, r, p in zip(contexts, rows, per):
            chunks.append(StepChunk([7] * r, c, blocks[at:at + p], r))
            at += p
        t = time.perf_counter()
        runner.run(chunks)
        return time.perf_counter() - t
    finally:
        runner.pool.free(blocks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", default="8,16,32")
    ap.add_argument("--draws", type=int, default=3, help="context draws per request count")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=1.0, spec=SpecConfig(method="off")))
    lengths = [len(engine.encode_prompt(p, chat=True)) for p in sharegpt_prompts(300, seed=0)]
    rng = random.Random(0)
    cases = {}
    for b in (int(x) for x in a.requests.split(",")):
        for draw in range(a.draws):
            contexts = [min(rng.choice(lengths), 1000) + rng.randint(0, 48) for _ in range(b)]
            cases[f"{b} x 1, draw {draw}"] = ([1] * b, contexts)
            mix = [1] * (b - b // 4) + [2 + i % 4 for i in range(b // 4)]
            cases[f"{b - b // 4} x 1 + {b // 4} x (2..5), draw {draw}"] = (mix, contexts)
    split = attention_groups.GROUP_COST_SLOTS
    times: dict[tuple[str, int], list[float]] = {(k, s): [] for k in cases for s in (split, NO_SPLIT)}
    try:
        for _ in range(a.repeats + 1):  # the first round warms up and is dropped
            for name, (rows, contexts) in cases.items():
                for s in (split, NO_SPLIT):
                    attention_groups.GROUP_COST_SLOTS = s
                    times[name, s].append(_forward_s(engine.runner, rows, contexts))
    finally:
        attention_groups.GROUP_COST_SLOTS = split
    points = []
    for name, (rows, contexts) in cases.items():
        with_split, without = (statistics.median(times[name, s][1:]) for s in (split, NO_SPLIT))
        points.append({"shape": name, "longest_context": max(contexts), "split_ms": round(1e3 * with_split, 2),
                       "one_group_ms": round(1e3 * without, 2), "ratio": round(with_split / without, 4)})
        print(f"{name:34s} longest {max(contexts):5d}: split {1e3 * with_split:7.1f} ms, one group "
              f"{1e3 * without:7.1f} ms, {with_split / without:.3f}")
    geo = round(math.exp(statistics.mean(math.log(p["ratio"]) for p in points)), 4)
    print("split / one group, geometric mean:", geo)
    if a.out:
        a.out.write_text(json.dumps({"group_cost_slots": split, "repeats": a.repeats, "dtype": str(engine.model.dtype),
                                     "points": points, "geomean_ratio": geo}, indent=1) + "\n")


if __name__ == "__main__":
    main()
