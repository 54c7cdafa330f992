"""Calibration of the acceptance estimators on held-out steps, and per-position acceptance of each proposer.

Runs the engine on ShareGPT prompts with k=7 and EVERY draft verified (the estimator is kept in warm-up, so
the labels are not censored by trimming), records (features, verified, accepted) per step, fits the estimator
on the first 70% of steps and scores its predictions on the last 30%: Brier score and a reliability table
for the conditional acceptance of each labelled position, plus the same for a constant (per-position mean)
baseline. Usage: python benchmarks/calibration.py benchmarks/results/calibration_cpu.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.engine import LLMEngine
from workers.estimators import LogisticEstimator, NgramEstimator, calibration, verification_labels
from workers.workloads import repetitive_prompts, sharegpt_prompts

K = 7


def record(method: str, prompts: list[str], concurrency: int = 4, max_tokens: int = 96) -> tuple[list, dict]:
    eng = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=SpecConfig(method=method, k=K, verify="adaptive")))
    ada = eng.adaptive
    ada.estimator.predict = lambda f: torch.ones(f.shape[:2])  # full drafts: uncensored labels
    ada.cost.seconds = {(r, t): 1.0 for (r, t) in ada.cost.seconds}  # flat cost: the policy verifies everything
    ada.draft_cost = None
    steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    learn = ada.learn

    def keep(proposal, verify, accepted):
        rows = [(b, n, a) for (b, _, n, _), a in zip(verify, accepted) if b >= 0]
        if rows and proposal.features is not None:
            idx = torch.tensor([b for b, _, _ in rows])
            steps.append((proposal.features[idx].clone(), torch.tensor([n for _, n, _ in rows]),
                           torch.tensor([a for _, _, a in rows])))
        learn(proposal, verify, accepted)

    ada.learn = keep
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    todo, inflight = [eng.encode_prompt(p, chat=True) for p in prompts], 0
    while todo or inflight:
        while todo and inflight < concurrency:
            eng.add_request(todo.pop(0), sp)
            inflight += 1
        inflight -= sum(o.finished for o in eng.step())
    return steps, eng.spec_stats.to_dict()


def evaluate(method: str, steps: list) -> dict:
    cut = int(len(steps) * 0.7)
    est = LogisticEstimator(K, 3) if method == "draft" else NgramEstimator(K)
    for f, n, a in steps[:cut]:
        est.observe(f, n, a)
    if isinstance(est, LogisticEstimator):
        est.refit()
        est.refits = max(est.refits, est.warmup_refits)
    preds, labels, base = [], [], []
    pos_rate = _position_rates(steps[:cut])
    for f, n, a in steps[cut:]:
        seen, label = verification_labels(f.shape[1], n, a)
        p = est.predict(f)
        preds.append(p[seen])
        labels.append(label[seen])
        base.append(pos_rate.expand_as(p)[seen])
    pred, lab = torch.cat(preds), torch.cat(labels)
    return {"train_steps": cut, "heldout_steps": len(steps) - cut, "heldout_labels": len(lab),
            "estimator": calibration(pred, lab), "per_position_mean_baseline": calibration(torch.cat(base), lab)}


def _position_rates(steps: list) -> torch.Tensor:
    acc, tot = torch.zeros(K), torch.zeros(K)
    for f, n, a in steps:
        seen, label = verification_labels(f.shape[1], n, a)
        acc += (label * seen).sum(0)
        tot += seen.sum(0)
    return (acc / tot.clamp_min(1))[None, :]


def main(out: str) -> None:
    results = {}
    for method, prompts in (("draft", sharegpt_prompts(48, seed=11)), ("ngram", repetitive_prompts(48, seed=11)
                                                                        + sharegpt_prompts(24, seed=12))):
        steps, stats = record(method, prompts)
        results[method] = {"spec_decode_full_k7": stats, **evaluate(method, steps)}
        r = results[method]
        print(method, "acceptance per position", stats["acceptance_per_position"], "Brier", r["estimator"]["brier"],
              "baseline", r["per_position_mean_baseline"]["brier"])
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
