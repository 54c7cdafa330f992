"""The draft-depth plan of adaptive verification (workers/adaptive.py), isolated with a hand-made cost table:
stale per-request estimates are shrunk towards the running mean, and a request planned at depth 0 still
drafts one position every PROBE_EVERY steps, so its estimates are refreshed."""
from types import SimpleNamespace

import torch

from workers.adaptive import PROBE_EVERY, AdaptiveVerifier
from workers.cost_table import CostTable
from workers.estimators import LogisticEstimator
from workers.scheduler import ScheduledStep

# c=1 on this CPU (docs/architecture.md): a 40 ms forward nearly flat in tokens, 4.5 ms per draft iteration,
# so one drafted position pays when its acceptance is above ~0.11
TARGET = CostTable({(1, t): 0.040 + 0.0002 * t for t in range(1, 10)})
DRAFT = CostTable({(1, 1): 0.0045})


def _verifier(prior: float, last: float) -> tuple[AdaptiveVerifier, SimpleNamespace]:
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits  # past its warm-up: the depth plan is in force
    av = AdaptiveVerifier(TARGET, est, DRAFT)
    av._prior = torch.full((7,), prior)
    req = SimpleNamespace(req_id="r")
    av._last["r"] = torch.full((7,), last)
    return av, req


def _depth(av: AdaptiveVerifier, req) -> int:
    plan = ScheduledStep(decodes=[(req, 7)])
    av.plan_depths(plan)
    return plan.decodes[0][1]


def test_a_request_whose_last_draft_looked_bad_is_planned_from_the_running_mean_too():
    av, req = _verifier(prior=0.3, last=0.02)
    assert _depth(av, req) >= 1  # 0.02 alone says "do not draft"; halfway to 0.3 it pays


def test_a_request_planned_at_depth_zero_is_probed_every_few_steps():
    av, req = _verifier(prior=0.01, last=0.01)
    depths = [_depth(av, req) for _ in range(2 * PROBE_EVERY)]
    assert depths.count(0) == 2 * PROBE_EVERY - 2 and depths[PROBE_EVERY - 1] == depths[-1] == 1


def test_confident_requests_draft_deep():
    av, req = _verifier(prior=0.9, last=0.9)
    assert _depth(av, req) >= 4


def test_the_probe_period_grows_with_the_batch():
    """A probe makes every request's draft catch up on all tokens since its last draft: with 4 requests,
    once every 4 x PROBE_EVERY steps."""
    av, _ = _verifier(prior=0.01, last=0.01)
    reqs = [SimpleNamespace(req_id=f"r{i}") for i in range(4)]
    probed = []
    for step in range(1, 8 * PROBE_EVERY + 1):
        plan = ScheduledStep(decodes=[(r, 7) for r in reqs])
        av.plan_depths(plan)
        if any(d for _, d in plan.decodes):
            probed.append(step)
    assert probed == [4 * PROBE_EVERY, 8 * PROBE_EVERY]


def test_a_step_that_prefills_is_worth_the_engines_recent_rate():
    """Next to a 512-token prefill chunk, one decode token per request undervalues the step: positions that
    beat this step's own decode rate but not the engine's rate are not drafted."""
    table = CostTable({(r, t): 0.040 + 0.0004 * t for r in (1, 4) for t in (1, 4, 8, 64, 600)})
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    av = AdaptiveVerifier(table, est, CostTable({(1, 1): 0.0045, (4, 4): 0.005}))
    av._prior = torch.full((7,), 0.3)
    reqs = [SimpleNamespace(req_id=f"r{i}") for i in range(3)]
    prefill = (SimpleNamespace(req_id="p"), 512)

    def depths() -> list[int]:
        plan = ScheduledStep(decodes=[(r, 7) for r in reqs], prefills=[prefill])
        av._plans = 1  # not a probe step
        av.plan_depths(plan)
        return [d for _, d in plan.decodes]

    assert sum(depths()) > 0  # no rate seen yet: 3 tokens for a ~250 ms step, drafting at 0.3 pays
    for _ in range(100):  # the engine has been emitting 40 tokens per 250 ms step
        av.observe_step(0.25, 0.24, 0.0, 4, 515, False, emitted=40)
    assert sum(depths()) == 0
