"""Prefix caching, measured: TTFT of a conversation's turn 2 vs turn 1 (long first turn) and the hit rate,
with the cache on and off; outputs must be equal. Usage: python benchmarks/prefix_cache.py [out.json]"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from workers.config import EngineConfig, SamplingParams
from workers.engine import LLMEngine
from workers.workloads import sharegpt_prompts


def ttft(eng: LLMEngine, prompt: list[int]) -> tuple[float, list[int], int]:
    r = eng.generate([prompt], SamplingParams(max_tokens=16, temperature=0))[0]
    return r.first_token_time - r.arrival, r.output_ids, r.num_cached_tokens


def main(out: str | None) -> None:
    rows = []
    for cache in (True, False):
        eng = LLMEngine(EngineConfig(enable_prefix_caching=cache))
        eng.generate(["warm up"], SamplingParams(max_tokens=2))
        for trial in range(3):
            first = " ".join(sharegpt_prompts(10, seed=10 + trial))[:6000]
            t1_ids = eng.encode_prompt(first, chat=True)
            t1, out1, _ = ttft(eng, t1_ids)
            t2_ids = t1_ids + out1 + eng.encode_prompt("Now summarise that in one line.", chat=True)
            t2, out2, cached = ttft(eng, t2_ids)
            rows.append({"prefix_cache": cache, "trial": trial, "turn1_tokens": len(t1_ids),
                         "turn2_tokens": len(t2_ids), "turn2_cached_tokens": cached,
                         "turn2_hit_rate": round(cached / len(t2_ids), 4), "ttft_turn1_ms": round(t1 * 1000, 1),
                         "ttft_turn2_ms": round(t2 * 1000, 1), "turn2_output": out2})
    on = [r for r in rows if r["prefix_cache"]]
    off = [r for r in rows if not r["prefix_cache"]]
    summary = {
        "median_ttft_turn1_ms": statistics.median(r["ttft_turn1_ms"] for r in on),
        "median_ttft_turn2_ms_cache_on": statistics.median(r["ttft_turn2_ms"] for r in on),
        "median_ttft_turn2_ms_cache_off": statistics.median(r["ttft_turn2_ms"] for r in off),
        "median_turn2_hit_rate": statistics.median(r["turn2_hit_rate"] for r in on),
        "outputs_equal_with_and_without_cache": all(a["turn2_output"] == b["turn2_output"] for a, b in zip(on, off)),
    }
    for r in rows:
        del r["turn2_output"]
    print(json.dumps(summary, indent=1))
    if out:
        Path(out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
