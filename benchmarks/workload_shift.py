"""A workload shift for n-gram adaptive verification: the engines first serve a ShareGPT history, then
one workload at one concurrency, sustained, in rounds (the variants in turn). By default: repetitive prompts
at c=4, fixed k=7 against adaptive with the current n-gram estimator and against the estimator keyed by
match length alone (no request history, no fading, no exploration: the estimator of the grid at commit
f6c6d63, whose one clear miss was this point, 0.89x of k=7). Ratios are to the first variant.

    python benchmarks/workload_shift.py            # ~3 min; JSON in benchmarks/results/workload_shift_cpu.json
    python benchmarks/workload_shift.py --workload sharegpt --history-requests 0 \
        --variants k2,adaptive,adaptive-no-explore,adaptive-match-only --out /tmp/sharegpt_c4.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from workers.bench import _spec, _warmed, run_ours, sustained_plan, workload_prompts
from workers.config import EngineConfig
from workers.engine import LLMEngine

VARIANTS = ("k2", "k7", "adaptive", "adaptive-no-explore", "adaptive-match-only")


def build(variant: str, max_tokens: int) -> LLMEngine:
    mode = f"ngram:{variant[1:]}" if variant.startswith("k") else "ngram:7:adaptive"
    engine = _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(mode, 7))), max_tokens, 0)
    est = engine.adaptive.estimator if engine.adaptive is not None else None
    if variant == "adaptive-no-explore":
        est.explores = False
    if variant == "adaptive-match-only":  # the estimator before request history, fading and exploration
        est.uses_history, est.explores, est.memory = False, False, math.inf
    return engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history-requests", type=int, default=96, help="ShareGPT requests served first")
    ap.add_argument("--history-concurrency", type=int, default=16)
    ap.add_argument("--workload", default="repetitive", choices=["repetitive", "sharegpt"])
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--variants", default="k7,adaptive,adaptive-match-only", help=f"from {','.join(VARIANTS)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", default="benchmarks/results/workload_shift_cpu.json")
    args = ap.parse_args()
    variants = args.variants.split(",")
    engines = {v: build(v, args.max_tokens) for v in variants}
    encoder = next(iter(engines.values()))
    history = [encoder.encode_prompt(t, chat=True) for t in workload_prompts("sharegpt", args.history_requests, 5)]
    for name, engine in engines.items():
        if engine.adaptive is not None and history:  # fixed k learns nothing: its history would only cost time
            r = run_ours(engine, history, args.history_concurrency, args.max_tokens)
            print(f"{name}: ShareGPT history {r['output_tokens_per_s']:.1f} tok/s", flush=True)
    c = args.concurrency
    warm, n_prompts = sustained_plan(c, max(4, c))
    prompts = [encoder.encode_prompt(t, chat=True) for t in workload_prompts(args.workload, n_prompts, 0)]
    rounds: dict[str, list[dict]] = {v: [] for v in variants}
    for rnd in range(args.rounds):  # the variants in turn within each round
        for name, engine in engines.items():
            r = run_ours(engine, prompts, c, args.max_tokens, admit=n_prompts, untimed=warm)
            rounds[name].append({"tokens_per_s": round(r["output_tokens_per_s"], 2),
                                 "mean_acceptance_length": r["mean_acceptance_length"]})
            print(f"round {rnd} {name}: {r['output_tokens_per_s']:.1f} tok/s, MAL {r['mean_acceptance_length']}",
                  flush=True)
    ref = variants[0]
    ratios = {v: [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(rounds[v], rounds[ref])] for v in variants}
    summary = {v: round(statistics.median(x), 3) for v, x in ratios.items()}
    print(f"median ratio to {ref} per round:", summary)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rounds": rounds, f"median_ratio_to_{ref}": summary},
                                         indent=1) + "\n")


if __name__ == "__main__":
    main()
