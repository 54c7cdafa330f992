"""Adaptive's verify choice against a fixed-k shape in the SAME batches: one adaptive engine serves a sustained
closed loop, and at every step that drafted, a coin decides whether the trim's verify lengths run (arm
"adaptive") or every request verifies min(k, its draft) (arm "fixed k"). Both arms then see the same requests,
acceptance and contexts, so their per-step tokens and forward times compare the two shapes alone; a closed-loop
A/B of two engines (benchmarks/point_variance.py) also holds what each policy does to the batch it keeps (which
requests stay in it, and for how long). Per step kind (pure decode steps, steps that also prefill), at >=
`--min-requests` decoding requests: each arm's mean verified rows, decode tokens emitted and forward time, and
the arm's difference by least squares with the step's prefill tokens and decoding requests as covariates.

    python benchmarks/shape_rct.py --method ngram --workload repetitive --concurrency 32 --fixed 2 --runs 4 \
        --out benchmarks/results/shape_rct_ngram_repetitive_c32_cpu.json
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from workers.bench import _spec, _warmed, run_ours, sustained_plan, varied_lengths, workload_prompts
from workers.config import EngineConfig
from workers.engine import LLMEngine


def instrument(engine: LLMEngine, fixed: int, share: float, seed: int) -> list[dict]:
    """Wrap the engine's trim, learning and forward: each drafting step's arm, shape, tokens and forward time."""
    ada, rng, log, step_rec = engine.adaptive, random.Random(seed), [], {}
    trim, learn, run, step = ada.trim, ada.learn, engine.runner.run, engine.step

    def trim_or_fixed(proposal, plan):
        drafted = proposal.num_drafts.clone()
        trim(proposal, plan)
        step_rec["fixed"] = rng.random() < share
        if step_rec["fixed"]:
            proposal.num_drafts = torch.clamp(drafted, max=fixed)
        step_rec.update(mixed=bool(plan.prefills), verified=int(proposal.num_drafts.sum()),
                        prefill=sum(c for _, c in plan.prefills), requests=len(plan.decodes))

    def learn_and_count(proposal, verify, accepted):
        step_rec["emitted"] = sum(a + 1 for (b, _, _, _), a in zip(verify, accepted) if b >= 0)
        learn(proposal, verify, accepted)

    def timed_run(chunks, **kw):
        t = time.perf_counter()
        out = run(chunks, **kw)
        step_rec["forward_s"] = time.perf_counter() - t
        return out

    def recorded_step():
        step_rec.clear()
        out = step()
        if "fixed" in step_rec and "emitted" in step_rec:
            log.append(dict(step_rec))
        return out

    ada.trim, ada.learn, engine.runner.run, engine.step = trim_or_fixed, learn_and_count, timed_run, recorded_step
    return log


def summarise(log: list[dict], min_requests: int) -> dict:
    out = {}
    for kind, mixed in (("pure_decode", False), ("with_prefill", True)):
        steps = [x for x in log if x["mixed"] == mixed and x["requests"] >= min_requests]
        arms = {}
        for name, fixed in (("adaptive", False), ("fixed_k", True)):
            xs = [x for x in steps if x["fixed"] == fixed]
            if xs:
                arms[name] = {"steps": len(xs), "requests": round(statistics.mean(x["requests"] for x in xs), 2),
                              "prefill_tokens": round(statistics.mean(x["prefill"] for x in xs), 1),
                              "verified_rows": round(statistics.mean(x["verified"] for x in xs), 2),
                              "tokens": round(statistics.mean(x["emitted"] for x in xs), 2),
                              "forward_ms": round(1e3 * statistics.mean(x["forward_s"] for x in xs), 1)}
        entry = {"arms": arms}
        if len(arms) == 2 and len(steps) > 4:
            X = np.array([[1.0, x["prefill"], x["requests"], float(not x["fixed"])] for x in steps])
            fwd = np.linalg.lstsq(X, np.array([1e3 * x["forward_s"] for x in steps]), rcond=None)[0][3]
            tok = np.linalg.lstsq(X, np.array([float(x["emitted"]) for x in steps]), rcond=None)[0][3]
            entry["adaptive_minus_fixed"] = {"forward_ms": round(float(fwd), 1), "tokens": round(float(tok), 2),
                                             "ms_per_extra_token": round(float(fwd / tok), 2) if tok > 0 else None}
            for a in arms.values():
                a["tokens_per_ms"] = round(a["tokens"] / a["forward_ms"], 4)
        out[kind] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=("draft", "ngram"), default="ngram")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="repetitive")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--fixed", type=int, default=2, help="the fixed-k arm's k")
    ap.add_argument("--share", type=float, default=0.5, help="share of drafting steps given to the fixed-k arm")
    ap.add_argument("--runs", type=int, default=4, help="sustained runs (2 prompts per slot each, seeds 0..)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--min-requests", type=int, default=0, help="steps with fewer decoding requests are left out")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    engine = _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(f"{a.method}:7:adaptive", 7))),
                     a.max_tokens, 0)
    log = instrument(engine, a.fixed, a.share, seed=0)
    c = a.concurrency
    rates = []
    for run in range(a.runs):
        warm, count = sustained_plan(c, 2 * c)
        prompts = [engine.encode_prompt(t, chat=True) for t in workload_prompts(a.workload, count, run)]
        r = run_ours(engine, prompts, c, varied_lengths(count, a.max_tokens, run), admit=count, untimed=warm)
        rates.append(round(r["output_tokens_per_s"], 1))
        print(f"run {run}: {rates[-1]} tok/s, {len(log)} drafting steps so far", flush=True)
    result = {"point": {"method": a.method, "workload": a.workload, "concurrency": c}, "fixed_k": a.fixed,
              "share": a.share, "runs": a.runs, "max_tokens": a.max_tokens, "min_requests": a.min_requests,
              "tokens_per_s_of_the_mixed_engine": rates, "device": str(engine.model.device),
              "dtype": str(engine.model.dtype), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              **summarise(log, a.min_requests)}
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
