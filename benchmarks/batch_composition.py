"""Which requests a policy's closed loop keeps in its batch. Under a sustained load a request stays in the batch
for as many steps as it needs, so the batch holds the slow requests longer than the fast ones; the more a policy
speeds some requests and not others, the more its batch fills with the ones it does not speed. Each engine
serves the same sustained closed loop (one run each, in turn); every request gets a type, its speed under the
reference engine (tokens emitted per decoding step, between the first and the last step it was seen decoding),
and each engine reports the mean type of the requests in its decoding batch, step by step (the first quarter
of its steps left out), with its own requests' speeds.

    python benchmarks/batch_composition.py --workload repetitive --concurrency 32 \
        --modes ngram:2,ngram:7:adaptive,off --out benchmarks/results/batch_composition_ngram_repetitive_c32_cpu.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from workers.bench import _spec, _warmed, run_ours, sustained_plan, varied_lengths, workload_prompts
from workers.config import EngineConfig
from workers.engine import LLMEngine
from workers.request import Status


def served(engine: LLMEngine, prompts: list[list[int]], concurrency: int, lengths: list[int]
           ) -> tuple[float, list[list[int]], dict[int, float]]:
    """(tokens/s, each step's decoding requests as prompt indices, each request's speed in tokens per decoding
    step) over one sustained run."""
    index = {tuple(p): i for i, p in enumerate(prompts)}
    batches: list[list[int]] = []
    seen: dict[int, list[int]] = {}  # prompt index -> [output at first step, output at last step, steps]
    step = engine.step

    def recorded_step():
        batch = []
        for r in engine.scheduler.running:
            if r.status is Status.RUNNING and r.is_decoding:
                i = index.get(tuple(r.tokens[:r.num_prompt]))
                if i is not None:
                    batch.append(i)
                    first = seen.setdefault(i, [r.num_output, r.num_output, 0])
                    first[1], first[2] = r.num_output, first[2] + 1
        batches.append(batch)
        return step()

    engine.step = recorded_step
    warm, count = sustained_plan(concurrency, len(prompts) - concurrency)
    r = run_ours(engine, prompts, concurrency, lengths, admit=count, untimed=warm)
    engine.step = step
    speed = {i: (last - first) / (n - 1) for i, (first, last, n) in seen.items() if n >= 4}
    return r["output_tokens_per_s"], batches, speed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="repetitive")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--modes", default="ngram:2,ngram:7:adaptive,off", help="the first is the reference")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    c = a.concurrency
    runs = {}
    for mode in a.modes.split(","):
        engine = _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(mode, 7))), a.max_tokens, 0)
        prompts = [engine.encode_prompt(t, chat=True) for t in workload_prompts(a.workload, 3 * c, 0)]
        runs[mode] = served(engine, prompts, c, varied_lengths(3 * c, a.max_tokens, 0))
        print(f"{mode}: {runs[mode][0]:.1f} tok/s", flush=True)
    reference = runs[a.modes.split(",")[0]][2]
    result = {"point": {"workload": a.workload, "concurrency": c}, "reference": a.modes.split(",")[0], "modes": {}}
    for mode, (tps, batches, speed) in runs.items():
        kept = batches[len(batches) // 4:]
        types = [statistics.mean(reference[i] for i in b if i in reference) for b in kept if any(i in reference for i in b)]
        own = sorted(speed.values())
        result["modes"][mode] = {"tokens_per_s": round(tps, 1), "steps": len(batches),
                                 "batch_mean_type": round(statistics.mean(types), 3),
                                 "own_speed": {"mean": round(statistics.mean(own), 2), "p10": round(own[len(own) // 10], 2),
                                               "p90": round(own[9 * len(own) // 10], 2), "requests": len(own)}}
        print(mode, result["modes"][mode], flush=True)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
