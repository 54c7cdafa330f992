"""Closed-loop A/B of `attention_groups.GROUP_COST_ROWS` settings in one process: each engine runs its steps under
its own setting (`MODE@G`; `MODE@G/T` reads the target cost table measured under T instead, so the grouping
and the table it was priced with can be told apart), all engines interleaved step by step, several cycles.
Ratios are per cycle against the best engine that is not adaptive.

    python benchmarks/group_cost_ab.py --workload sharegpt --concurrency 32 --cycles 3 \\
        --modes ngram:4,ngram:7:adaptive@40,ngram:7:adaptive@12,ngram:7:adaptive@40/12,ngram:7:adaptive@12/40 \\
        --out benchmarks/results/group_cost_ab_sharegpt_c32_bf16_cpu.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import workers.attention_groups as attention_groups
import workers.warmup_tables as warmup_tables
from workers.bench import _spec, _warmed, sustained_plan, varied_lengths, workload_prompts
from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig
from workers.engine import LLMEngine


def build(mode: str) -> LLMEngine:
    """`MODE@G[/T]`: an engine whose steps group lengths at G padded rows, priced by the table measured at T."""
    spec, _, setting = mode.partition("@")
    grouping, _, table = (setting or str(attention_groups.GROUP_COST_ROWS)).partition("/")
    g, t = int(grouping), int(table or grouping)
    saved, table_path = attention_groups.GROUP_COST_ROWS, warmup_tables.target_table_path
    attention_groups.GROUP_COST_ROWS = t  # the warm-up (if no table is on disk for T yet) measures under T
    if t != saved:  # a table of its own, next to the served one
        warmup_tables.target_table_path = lambda e: table_path(e).with_name(f"{table_path(e).stem}-groups{t}.json")
    try:
        engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(spec, 7)))
    finally:
        attention_groups.GROUP_COST_ROWS, warmup_tables.target_table_path = saved, table_path
    step = engine.step

    def grouped_step():
        attention_groups.GROUP_COST_ROWS = g
        try:
            return step()
        finally:
            attention_groups.GROUP_COST_ROWS = saved

    engine.step = grouped_step
    return _warmed(engine, 48, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--per-slot", type=int, default=2, help="timed prompts per slot")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--modes", default="ngram:4,ngram:7:adaptive@40,ngram:7:adaptive@12")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    modes = a.modes.split(",")
    engines = {m: build(m) for m in modes}
    c = a.concurrency
    prompts = [engines[modes[0]].encode_prompt(p, chat=True) for p in workload_prompts(a.workload, c + c * a.per_slot, 0)]
    lengths = varied_lengths(len(prompts), 48, 0)
    warm, count = sustained_plan(c, c * a.per_slot)
    tok_s: dict[str, list[float]] = {m: [] for m in modes}
    for cycle in range(a.cycles):
        loops = [ClosedLoop(engines[m], prompts, c, lengths, admit=count, untimed=warm) for m in modes]
        for m, r in zip(modes, run_interleaved(loops, 1)):
            tok_s[m].append(round(r["output_tokens_per_s"], 2))
        print(cycle, {m: v[-1] for m, v in tok_s.items()}, flush=True)
    peers = [m for m in modes if "adaptive" not in m] or modes[:1]
    best = [max(tok_s[m][i] for m in peers) for i in range(a.cycles)]
    summary = {m: {"median_tok_s": statistics.median(tok_s[m]),
                   "paired_vs_best_peer": round(statistics.median(v / b for v, b in zip(tok_s[m], best)), 4)}
               for m in modes}
    for m, s in summary.items():
        print(f"{m:28s} median {s['median_tok_s']:8.2f} tok/s, paired / best peer {s['paired_vs_best_peer']:.4f}")
    if a.out:
        a.out.write_text(json.dumps({"workload": a.workload, "concurrency": c, "per_slot": a.per_slot,
                                     "cycles": a.cycles, "samples_tok_s": tok_s, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
