"""What a sustained window charges each configuration: at one concurrency on ShareGPT, no speculation, fixed
n-gram k=2 and adaptive, with every request at the grid's fixed 48 tokens and with varied lengths (uniform
16..80, the same draw for every configuration), in rounds; per run the tokens/s, the requests admitted in the
window and their prompt tokens (whose prefill the window timed). It measures the token-count window the
grid stopped at until 2026-12-01 (the grid now stops at an admission count: workers/bench.py).

    python benchmarks/sustained_window.py --concurrency 32 --rounds 2      # ~6 min
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from workers.bench import _spec, _warmed, run_ours, varied_lengths, workload_prompts
from workers.config import EngineConfig
from workers.engine import LLMEngine

MODES = ("off", "ngram:2", "ngram:7:adaptive")
MEAN_TOKENS = 48


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/sustained_window_cpu.json")
    args = ap.parse_args()
    c = args.concurrency
    engines = {m: _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(m, 7))), MEAN_TOKENS, 0)
               for m in MODES}
    # the token-count window this study measured (the grid has since stopped at an admission count instead):
    # c requests' worth plus half a wave, from a supply that no request at a third of the mean exhausts
    count, stop = 6 * c, c * MEAN_TOKENS + c * MEAN_TOKENS // 2
    prompts = [engines["off"].encode_prompt(t, chat=True) for t in workload_prompts("sharegpt", count, 0)]
    varied = varied_lengths(len(prompts), MEAN_TOKENS, 0)  # the grid's draw
    runs = []
    for rnd in range(args.rounds):
        for name, lengths in (("fixed", [MEAN_TOKENS] * len(prompts)), ("varied", varied)):
            res = {}
            for m, e in engines.items():
                r = run_ours(e, prompts, c, lengths, stop)
                res[m] = {"tokens_per_s": round(r["output_tokens_per_s"], 2), "admitted": r["num_requests"],
                          "prompt_tokens": r["prompt_tokens"]}
            off = res["off"]["tokens_per_s"]
            for m, r in res.items():
                r["vs_off"] = round(r["tokens_per_s"] / off, 4)
            runs.append({"round": rnd, "lengths": name, "results": res})
            print(name, json.dumps(res), flush=True)
    Path(args.out).write_text(json.dumps({"concurrency": c, "workload": "sharegpt", "stop_tokens": stop,
                                          "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
