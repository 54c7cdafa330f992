"""Host time of the adaptive verifier's calls in one engine step (depth plan, trim, learning from the outcome,
cost refresh) for a draft model or n-gram drafts, on synthetic tables shaped like this CPU's, hot and "cold": in
the engine each call follows a forward or a draft that evicts the host code's caches, and then every distinct
small op costs several times what it does in a tight loop (a 2048 x 2048 matmul before each call stands in for it).
Prints the median per step over repeated steps; run it on an otherwise idle machine.
Usage: python benchmarks/policy_step_cost.py [--steps 300] [--method draft|ngram]
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch

from workers.adaptive import AdaptiveVerifier
from workers.cost_table import CostTable
from workers.estimators import LogisticEstimator, NgramEstimator
from workers.scheduler import ScheduledStep

K = 7
REQUESTS = (1, 2, 4, 8, 16, 32)
PROMPT = 100  # tokens of each request's prompt
MAX_TOKENS = 256


def _req(req_id: str) -> SimpleNamespace:
    """What the verifier reads of a request (workers/request.py): its id, tokens, and outputs allowed and made."""
    return SimpleNamespace(req_id=req_id, tokens=[1] * PROMPT, max_tokens=MAX_TOKENS, num_output=0)


def _tables() -> tuple[CostTable, CostTable]:
    """Target: ~33 ms + 0.9 ms per row at c=1 (bf16, 2 cores), rows dearer as the batch grows; draft: 1.5 ms
    per iteration plus 0.05 ms per request and row, with the catch-up column."""
    target = {(r, r * (1 + e)): 0.033 + 0.0015 * r + 0.0009 * r * e for r in REQUESTS for e in (0, 1, 2, 4, 8)}
    ragged = {(r, e): 0.0005 * e for r in REQUESTS if r > 1 for e in (1, 7)}
    draft = {(r, r * t): 0.0015 + 0.00005 * r * t for r in REQUESTS for t in (1, 17)}
    return CostTable(target, ragged=ragged), CostTable(draft)


def _verifier(method: str) -> AdaptiveVerifier:
    target, draft = _tables()
    if method == "ngram":  # no drafter cost: no depth plan, the trim and the n-gram table only
        return AdaptiveVerifier(target, NgramEstimator(K), None)
    est = LogisticEstimator(K, 3)
    est.refits = est.warmup_refits  # past its warm-up: the plan and the trim are in force
    est.weights[:, 0] = 4.0  # p = sigmoid(4 * top-1 probability - 2): drafts of 0.5 break even
    est.weights[:, -1] = -2.0
    return AdaptiveVerifier(target, est, draft, calibrate=True)


def _timed(spent: dict[str, float], name: str, evict: Callable[[], None], fn: Callable[[], object]) -> None:
    evict()
    t = time.perf_counter()
    fn()
    spent[name] = time.perf_counter() - t


def _step(av: AdaptiveVerifier, reqs: list[SimpleNamespace], gen: torch.Generator, evict: Callable[[], None]
          ) -> dict[str, float]:
    """One step's verifier calls, each after `evict`; returns the seconds of each."""
    B = len(reqs)
    plan = ScheduledStep(decodes=[(r, K) for r in reqs])
    spent: dict[str, float] = {}
    _timed(spent, "plan", evict, lambda: av.plan_depths(plan))
    depth = torch.tensor([d for _, d in plan.decodes])
    if av.draft_cost is None:  # n-gram: each draft's match length (2-4) at every position
        features = torch.randint(2, 5, (B, 1, 1), generator=gen).float().expand(B, K, 1).contiguous()
    else:
        features = torch.rand(B, K, 3, generator=gen)
    proposal = SimpleNamespace(features=features, num_drafts=depth.clone())
    _timed(spent, "trim", evict, lambda: av.trim(proposal, plan))
    verified = proposal.num_drafts.tolist()
    accepted = [int((torch.rand(n, generator=gen) < 0.5).cumprod(0).sum()) if n else 0 for n in verified]
    verify = [(b, r, n, 0) for b, ((r, _), n) in enumerate(zip(plan.decodes, verified))]
    _timed(spent, "learn", evict, lambda: av.learn(proposal, verify, accepted))
    for r, a in zip(reqs, accepted):
        r.tokens.extend([1] * (1 + a))
        r.num_output += 1 + a
        if r.num_output >= r.max_tokens:  # a new request takes its place
            av.forget(r.req_id)
            r.req_id, r.tokens, r.num_output = r.req_id + "'", [1] * PROMPT, 0
    tokens = B + sum(verified)
    fwd = av.cost.lookup(B, tokens)
    draft_s = int(depth.max()) * av.draft_cost.lookup(B, B) if int(depth.max()) and av.draft_cost else 0.0
    _timed(spent, "observe", evict,
           lambda: av.observe_step(fwd + draft_s + 0.001, fwd, draft_s, B, tokens, True, B, int(depth.max())))
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--method", choices=("draft", "ngram"), default="draft")
    args = ap.parse_args()
    big = torch.randn(2048, 2048)
    modes = {"hot": lambda: None, "cold": lambda: big @ big}
    for B in (1, 16):
        for mode, evict in modes.items():
            gen = torch.Generator().manual_seed(0)
            av = _verifier(args.method)
            reqs = [_req(f"r{i}") for i in range(B)]
            times = [_step(av, reqs, gen, evict) for _ in range(args.steps)]
            tail = times[args.steps // 5:]  # past the calibration's first steps
            parts = "  ".join(f"{k} {statistics.median(t[k] for t in tail) * 1e3:.3f}" for k in tail[0])
            total = statistics.median(sum(t.values()) for t in tail) * 1e3
            print(f"B={B:<3} {mode:<5} {total:.3f} ms per step ({parts}; medians)  "
                  f"drafted {av.drafted_positions}, verified {av.verified_positions}")


if __name__ == "__main__":
    main()
