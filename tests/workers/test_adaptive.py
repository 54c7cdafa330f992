"""The draft-depth plan of adaptive verification (workers/adaptive.py), isolated with a hand-made cost table:
every request is planned from the running mean of the estimates, one request planned at depth 0 still
drafts one position now and then (a probe, whose cost is bounded to a share of the time), so estimates are
refreshed, a draft's catch-up is priced, and steps that also prefill are calibrated on their own."""
import itertools
import math
import operator
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

import workers.adaptive as adaptive_module
import workers.depth_plan as depth_plan_module
from workers.adaptive import AdaptiveVerifier
from workers.cost_table import CostTable
from workers.estimators import LogisticEstimator, NgramEstimator
from workers.online_costs import OBSERVE_BATCH
from workers.plan_calibration import CALIBRATION_MIN_STEPS, GAIN_BOUNDS
from workers.probes import PROBE_EVERY, PROBE_SCALE_RATE, PROBE_SHARE, PROBE_SHARE_MIN
from workers.scheduler import ScheduledStep
from workers.step_outliers import OutlierGuard

@dataclass
class _Req:
    """What the depth plan reads of a request (workers/request.py): its tokens and how many it may still emit."""
    req_id: str
    tokens: list[int]
    max_tokens: int = 10_000
    num_prompt: int = 0

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.num_prompt


# c=1 on this CPU (docs/architecture.md): a 40 ms forward nearly flat in tokens, 4.5 ms per draft iteration,
# so one drafted position pays when its acceptance is above ~0.11
TARGET = CostTable({(1, t): 0.040 + 0.0002 * t for t in range(1, 10)})
DRAFT = CostTable({(1, 1): 0.0045})
STEP_S = 0.040


def _verifier(prior: float) -> tuple[AdaptiveVerifier, SimpleNamespace]:
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits  # past its warm-up: the depth plan is in force
    av = AdaptiveVerifier(TARGET, est, DRAFT)
    av._prior = torch.full((7,), prior)
    return av, _Req(req_id="r", tokens=[1] * 20)


def _depth(av: AdaptiveVerifier, req, step_s: float = STEP_S) -> int:
    """Plan one step, then let it take `step_s` (as the engine reports it; not a pure decode step, so the
    shared TARGET table is not refreshed)."""
    plan = ScheduledStep(decodes=[(req, 7)])
    av.plan_depths(plan)
    av.observe_step(step_s, step_s, 0.0, 1, 1, False)
    return plan.decodes[0][1]


def _probe_gaps(av: AdaptiveVerifier, req, plans: int) -> list[int]:
    probes = [i for i in range(plans) if _depth(av, req)]
    return [b - a for a, b in zip([-1] + probes, probes)]


def test_a_request_whose_last_draft_looked_bad_is_planned_from_the_running_mean_alone():
    """Its last estimates (about last step's token) are no guide to its next draft (adaptive.py, `_prior`):
    a draft rated 0 moves the running mean by PRIOR_RATE, and the next plan drafts where that mean pays."""
    av, req = _verifier(prior=0.2)
    assert _depth(av, req) == 1
    av.estimator.predict = lambda f: torch.zeros(f.shape[:2])
    proposal = SimpleNamespace(features=torch.zeros(1, 7, 3), num_drafts=torch.tensor([1]))
    av.trim(proposal, ScheduledStep(decodes=[(req, 1)]))
    assert proposal.num_drafts.tolist() == [0]  # the trim reads the draft's own estimate
    assert abs(float(av._prior[0]) - 0.18) < 1e-6 and av._prior[1:].eq(0.2).all()
    assert _depth(av, req) == 1  # 0.18 pays (one position pays above ~0.11); halfway to 0 (0.09) did not


def test_a_request_planned_at_depth_zero_is_probed_ever_less_often():
    """Probed after PROBE_EVERY plans, then once a probe costs at most half the share of the time the last
    one did, until probes cost PROBE_SHARE_MIN of the time."""
    av, req = _verifier(prior=0.01)
    gaps = _probe_gaps(av, req, 400)
    cost = DRAFT.lookup(1, 1) + TARGET.lookup(1, 2) - TARGET.lookup(1, 1)  # one draft iteration + one row
    assert gaps[0] == PROBE_EVERY and gaps == sorted(gaps)
    assert gaps[-1] == math.ceil(cost / PROBE_SHARE_MIN / STEP_S)
    assert gaps[-2] == gaps[-1]


def test_a_probe_that_first_feeds_a_long_prompt_waits_longer():
    """The probe's predicted cost includes its catch-up rows: a request whose draft would first feed 2,000
    tokens is probed as rarely as keeps probes at PROBE_SHARE_MIN of the time."""
    draft = CostTable({(1, 1): 0.0045, (1, 17): 0.0045 + 16 * 0.0002})  # 0.2 ms per catch-up row
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    gaps = {}
    for tokens in (20, 2000):
        av = AdaptiveVerifier(TARGET, est, draft)
        av._prior = torch.full((7,), 0.01)
        req = _Req(req_id="r", tokens=[1] * tokens)
        gaps[tokens] = _probe_gaps(av, req, 20_000)[-1]
        cost = 0.0045 + 0.0002 * (tokens - 1) + TARGET.lookup(1, 2) - TARGET.lookup(1, 1)
        assert gaps[tokens] == math.ceil(cost / PROBE_SHARE_MIN / STEP_S)
    assert gaps[2000] > 40 * gaps[20]


def test_probes_are_priced_at_what_probes_took():
    """A probe whose drafting and extra host time take three times its table price moves the price by
    PROBE_SCALE_RATE of the gap; probes that keep doing so are priced at ~3x, so they come ~3x as seldom."""
    av, req = _verifier(prior=0.01)
    row_s = TARGET.lookup(1, 2) - TARGET.lookup(1, 1)
    scales = []
    for _ in range(3000):
        plan = ScheduledStep(decodes=[(req, 7)])
        av.plan_depths(plan)
        if plan.decodes[0][1]:  # a probe: its drafter took 2x the price, the host 1x more
            priced = av.probe.priced
            # (no draft_requests: the shared DRAFT table is not refreshed by it)
            av.observe_step(STEP_S + 3 * priced, STEP_S, 2 * priced, 1, 2, False, 0, 1)
            scales.append(av.probe.scale)
        else:
            av.observe_step(STEP_S, STEP_S, 0.0, 1, 1, False)
    assert abs(scales[0] - (1 + PROBE_SCALE_RATE * 2)) < 1e-9
    assert len(scales) >= 10 and abs(scales[-1] - 3.0) < 0.1
    assert abs(av.probe.cost_s - (scales[-1] * DRAFT.lookup(1, 1) + row_s)) < 1e-9


def test_stats_count_what_the_probes_cost():
    """The counters behind `stats`: each probe, its drafter seconds and its forward over a plain step's
    (pure decode probe steps), as a share of all observed seconds; the idle plans held without computing."""
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    av = AdaptiveVerifier(CostTable(dict(TARGET.seconds)), est, DRAFT)  # its own table: pure decode steps refresh it
    av._prior = torch.full((7,), 0.01)
    req = _Req(req_id="r", tokens=[1] * 20)
    plain = TARGET.lookup(1, 1)  # plain steps run as the table says, so the refresh leaves it as it is
    steps, probes = 400, 0
    for _ in range(steps):
        plan = ScheduledStep(decodes=[(req, 7)])
        av.plan_depths(plan)
        if plan.decodes[0][1]:  # a probe: 5 ms of drafting, its forward 3 ms over a plain step's
            probes += 1  # (no draft_requests: the shared DRAFT table is not refreshed by it)
            av.observe_step(plain + 0.008, plain + 0.003, 0.005, 1, 2, True, 0, 1, ragged_extra=1)
        else:
            av.observe_step(plain, plain, 0.0, 1, 1, True)
    st = av.stats(steps)
    assert st["probes"] == probes >= 3
    assert st["probe_draft_s"] == round(0.005 * probes, 4)
    assert abs(st["probe_forward_over_s"] - 0.003 * probes) < 1e-6
    observed = steps * plain + probes * 0.008
    assert abs(st["probe_share"] - 0.008 * probes / observed) < 1e-4
    assert 0 < st["idle_plans_held"] < steps - probes
    assert 0 < st["idle_plans_bounded"] <= steps - probes - st["idle_plans_held"]  # those the bound decided


def test_the_trim_verifies_free_rows_without_searching(monkeypatch):
    """Two requests whose drafted rows fall in a row block the step computes anyway: the trim cannot save
    anything, so it verifies every drafted position without running its search (once the search's time is
    known); where the rows cost more than the search, it searches and cuts the doubtful position."""
    flat = CostTable({(2, t): 0.040 for t in (2, 4, 8)})
    sloped = CostTable({(2, t): 0.040 + 0.004 * t for t in (2, 4, 8)})
    calls = []
    real = adaptive_module.choose_verify_lengths
    monkeypatch.setattr(adaptive_module, "choose_verify_lengths", lambda *a, **k: calls.append(1) or real(*a, **k))
    reqs = [_Req(req_id=f"r{i}", tokens=[1] * 20) for i in range(2)]
    for table, searched, kept in ((flat, 0, [1, 1]), (sloped, 1, [1, 0])):
        calls.clear()
        est = LogisticEstimator(7, 3)
        est.refits = est.warmup_refits
        est.predict = lambda f: torch.tensor([[0.9] * 7, [0.01] * 7])
        av = AdaptiveVerifier(table, est, DRAFT)
        av._search_s = 1e-4
        proposal = SimpleNamespace(features=torch.zeros(2, 7, 3), num_drafts=torch.tensor([1, 1]))
        av.trim(proposal, ScheduledStep(decodes=[(r, 1) for r in reqs]))
        assert len(calls) == searched and proposal.num_drafts.tolist() == kept


def test_a_plan_that_drafts_resets_the_probe_share():
    av, req = _verifier(prior=0.01)
    for _ in range(3 * PROBE_EVERY):
        _depth(av, req)
    assert av.probe.share == PROBE_SHARE / 8
    av._prior = torch.full((7,), 0.9)
    av._idle_key = None  # as `_remember` does when new estimates arrive
    assert _depth(av, req) >= 1 and av.probe.share == PROBE_SHARE and av.probe.since_s == STEP_S


def test_confident_requests_draft_deep():
    av, req = _verifier(prior=0.9)
    assert _depth(av, req) >= 4


def test_a_probe_drafts_only_the_request_with_the_least_to_catch_up_on():
    """Probing every request made each draft feed every token generated since its last draft: a probe now
    drafts one request, the cheapest to catch up."""
    av, _ = _verifier(prior=0.01)
    reqs = [_Req(req_id=f"r{i}", tokens=[1] * (40 - i)) for i in range(4)]
    probed = []
    for step in range(1, 2 * PROBE_EVERY + 1):
        plan = ScheduledStep(decodes=[(r, 7) for r in reqs])
        av.plan_depths(plan)
        av.observe_step(STEP_S, STEP_S, 0.0, 4, 4, False)
        probed += [(step, r.req_id) for r, d in plan.decodes if d]
    assert probed == [(PROBE_EVERY, "r3"), (2 * PROBE_EVERY, "r3")]


# three decoding requests next to a 512-token prefill chunk, at a CPU-like cost shape
MIXED_TABLE = CostTable({(r, t): 0.040 + 0.0004 * t for r in (1, 4) for t in (1, 4, 8, 64, 600)})
MIXED_DRAFT = {(1, 1): 0.0045, (4, 4): 0.005}
MIXED_REQS = [_Req(req_id=f"r{i}", tokens=[1] * 20) for i in range(3)]
PREFILL = (_Req(req_id="p", tokens=[1] * 600), 512)


def _mixed_verifier(prior: float, draft: CostTable | None = None, calibrate: bool = False) -> AdaptiveVerifier:
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits  # past its warm-up: the depth plan is in force
    av = AdaptiveVerifier(MIXED_TABLE, est, draft or CostTable(dict(MIXED_DRAFT)), calibrate=calibrate)
    av._prior = torch.full((7,), prior)
    return av


def _plan(av: AdaptiveVerifier, prefills: list) -> ScheduledStep:
    av.probe.since = 0  # not a probe step
    plan = ScheduledStep(decodes=[(r, 7) for r in MIXED_REQS], prefills=prefills)
    av.plan_depths(plan)
    return plan


def test_a_step_that_prefills_is_valued_at_the_decode_rate():
    """Next to a 512-token prefill chunk, one decode token per request undervalues the step: drafts that beat
    that step's own rate but cost more per token than decoding alone are not drafted; drafts that beat
    decoding alone still are."""
    def depths(prior: float, prefills: list) -> list[int]:
        return [d for _, d in _plan(_mixed_verifier(prior), prefills).decodes]

    # 0.05 per draft: 0.15 tokens for ~6 ms beats 3 tokens in the ~250 ms mixed step, not decoding alone
    # (3 tokens in ~41 ms)
    assert sum(depths(0.05, [PREFILL])) == 0 and sum(depths(0.05, [])) == 0
    # 0.3 per draft beats decoding alone: drafted with or without the prefill
    assert sum(depths(0.3, [PREFILL])) > 0 and sum(depths(0.3, [])) > 0


def test_steps_that_prefill_learn_what_their_drafts_delivered_cut_ones_included():
    """Mixed steps (workers/adaptive.py): next to a prefill chunk, 0.3 per draft is drafted (it beats
    decoding alone). When the trim then cuts those drafts (fresh estimates say no), nothing drafted there is
    accepted: after CALIBRATION_MIN_STEPS such steps the plan counts on a fifth of the survival there and
    stops drafting next to a prefill, while pure decode steps, calibrated on their own, still draft."""
    av = _mixed_verifier(0.3, calibrate=True)

    def mixed_depths() -> list[int]:
        plan = _plan(av, [PREFILL])
        verify = [(b, r, 0, b) for b, (r, _) in enumerate(plan.decodes)]  # the trim cut every draft
        av.learn(SimpleNamespace(features=None), verify, [0] * len(verify))
        return [d for _, d in plan.decodes]

    drafted = [sum(mixed_depths()) for _ in range(CALIBRATION_MIN_STEPS + 2)]
    assert all(drafted[:CALIBRATION_MIN_STEPS]) and drafted[-1] == 0
    row = MIXED_TABLE.nearest_requests(3)
    assert float(av.mixed_calibration.gain(row, 7)[0]) == pytest.approx(GAIN_BOUNDS[0])
    assert row not in av.calibration._rows  # the pure decode steps' calibration learnt nothing from them
    assert sum(d for _, d in _plan(av, []).decodes) > 0


def test_steps_that_prefill_price_drafting_as_pure_decode_steps_do():
    """The drafter's seconds in a step that also prefills are not turned into a price ratio: such a step pays
    a new request's first catch-up whole (its prompt, once), and a ratio of ~3.7x what the plan priced stopped
    the plan drafting there where fixed k=1 gains (docs/performance.md, 2026-12-06). Even when every such step
    pays its catch-ups whole, those plans keep drafting."""
    draft = CostTable({**MIXED_DRAFT, (4, 68): 0.025})  # with a catch-up column
    av = _mixed_verifier(0.3, draft, calibrate=True)
    drafted = []
    for _ in range(CALIBRATION_MIN_STEPS + 2):
        depth = max(d for _, d in _plan(av, [PREFILL]).decodes)
        drafted.append(depth)
        # the requests never catch up for good
        av.catch_ups.step_rows = sum(av.catch_ups.planned.values()) if depth else 0
        draft_s = depth * draft.lookup(3, 3) + av.catch_ups.row_s(av.draft_cost, 3) * av.catch_ups.step_rows
        av.observe_step(0.3 + draft_s, 0.3, draft_s, 4, 515, False, draft_requests=3, draft_depth=depth)
    assert all(drafted)


def _catch_up_verifier() -> AdaptiveVerifier:
    """c=4: the draft's table has a catch-up column (4 requests feeding 17 tokens each: 4.5 -> 25 ms)."""
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    table = CostTable({(4, t): 0.045 + 0.0002 * t for t in (4, 8, 16, 32)})
    av = AdaptiveVerifier(table, est, CostTable({(4, 4): 0.0045, (4, 68): 0.025}))
    av._prior = torch.full((7,), 0.5)
    av.probe.since = 0  # not a probe step
    return av


def test_a_finished_request_is_forgotten_by_the_catch_ups_and_the_history():
    av = _catch_up_verifier()
    av.catch_ups.drafted_at["r"], av._verified_last["r"] = (100, 4), (4, 2)
    av.forget("r")
    assert "r" not in av.catch_ups.drafted_at and "r" not in av._verified_last


def test_a_request_waits_for_its_first_draft_while_its_prompt_is_dear_to_feed():
    """Two requests with the same estimates: the one that drafted last step drafts again; the one whose
    draft would first feed a 600-token prompt (~190 ms of draft time on this table) does not while it has
    only a few tokens left to spread that over, and does when it has hundreds (the catch-up is paid once)."""
    for left, drafts in ((4, False), (400, True)):
        av = _catch_up_verifier()
        old, new = _Req("old", [1] * 50), _Req("new", [1] * 600, max_tokens=100 + left, num_prompt=500)
        av.catch_ups.drafted_at["old"] = (49, 2)
        plan = ScheduledStep(decodes=[(old, 7), (new, 7)])
        av.plan_depths(plan)
        assert plan.decodes[0][1] > 0 and (plan.decodes[1][1] > 0) == drafts, left
        assert av.catch_ups.planned == {"old": 0, "new": 599}


def test_a_calibrated_plan_predicts_the_catch_up_whole_though_it_prices_it_spread():
    """The depth plan spreads a catch-up over the steps the request has left, but the step that drafts pays it
    whole: the prediction the calibration compares with that step's time must contain all of it."""
    av = _catch_up_verifier()
    av.calibrate = True
    new = _Req("new", [1] * 600, max_tokens=1000, num_prompt=500)
    plan = ScheduledStep(decodes=[(new, 7)])
    av.plan_depths(plan)
    assert plan.decodes[0][1] > 0
    assert av._planned[1] > 599 * av.catch_ups.row_s(av.draft_cost, 1) + av.cost.lookup(1, 2)


def test_the_catch_up_rate_is_refreshed_from_observed_draft_time():
    av = _catch_up_verifier()
    req = _Req(req_id="r", tokens=[1] * 200)
    plan = ScheduledStep(decodes=[(req, 2)])
    av.plan_depths(plan)
    av.catch_ups.step_rows = 199  # it drafted: 199 rows caught up
    predicted = 2 * av.draft_cost.lookup(4, 4) + av.catch_ups.row_s(av.draft_cost, 4) * 199
    rate = av.catch_ups.row_s(av.draft_cost, 4)
    av.observe_step(1.0, 0.1, 2 * predicted, 4, 6, True, draft_requests=4, draft_depth=2)
    assert av.catch_ups.row_s(av.draft_cost, 4) > rate * 1.05


def test_drafting_host_time_is_the_gap_between_drafting_and_plain_decode_steps():
    """Host time outside the forward and the drafter, on pure decode steps: 5 ms when the step drafted,
    2 ms when not; steps that also prefill do not count. Unknown (0) until both kinds were seen."""
    av = _catch_up_verifier()
    for _ in range(50):
        av.observe_step(0.105, 0.08, 0.02, 4, 8, True, draft_requests=4, draft_depth=1)
    assert av.draft_host_s == 0.0
    for _ in range(50):
        av.observe_step(0.082, 0.08, 0.0, 4, 4, True)
        av.observe_step(0.5, 0.3, 0.0, 5, 100, False)  # a prefill step: much host time, not counted
        av.observe_step(0.105, 0.08, 0.02, 4, 8, True, draft_requests=4, draft_depth=1)
    assert abs(av.draft_host_s - 0.003) < 1e-4


def test_a_calibrated_depth_plan_stops_drafting_when_its_drafts_are_accepted_less_than_it_counted_on():
    """At c=1 one position pays above an acceptance of ~0.11; estimates of 0.15 draft it. When the steps
    that drafted accept nothing (the estimates were high, the outcomes are not), the plan's calibration
    learns it after CALIBRATION_MIN_STEPS such steps and only probes draft from then on (their outcomes keep
    teaching it, so it could learn the other way too)."""
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    av = AdaptiveVerifier(CostTable(dict(TARGET.seconds)), est, CostTable(dict(DRAFT.seconds)), calibrate=True,
                          calibrate_survival=True)
    av._prior = torch.full((7,), 0.15)
    req = _Req(req_id="r", tokens=[1] * 20)
    depths = []
    for _ in range(40):
        plan = ScheduledStep(decodes=[(req, 7)])
        av.plan_depths(plan)
        d = plan.decodes[0][1]
        depths.append(d)
        tokens = 1 + d  # what the table priced, and the drafter as priced: only the outcomes disappoint
        forward = TARGET.lookup(1, tokens)
        av.learn(SimpleNamespace(features=None), [(0, req, d, 0)], [0])  # nothing accepted
        av.observe_step(forward + d * 0.0045, forward, d * 0.0045, 1, tokens, True, 1, d)
    assert depths[:CALIBRATION_MIN_STEPS] == [1] * CALIBRATION_MIN_STEPS
    assert sum(depths[CALIBRATION_MIN_STEPS:]) <= (40 - CALIBRATION_MIN_STEPS) // PROBE_EVERY  # probes
    gain = av.calibration.gain(1, 7)
    assert gain[0] == GAIN_BOUNDS[0] and bool((gain[1:] == 1).all())  # positions never verified: no news
    av.calibrate = False  # calibrate_plan="off": neither measured nor applied
    av.first.enabled = False  # nor position 1's level from the outcomes (0 of ~12 accepted: it would not draft)
    other = _Req(req_id="r2", tokens=[1] * 20)  # a new batch: planned afresh, not the idle plan
    plan = ScheduledStep(decodes=[(other, 7)])
    av.plan_depths(plan)
    assert plan.decodes[0][1] == 1


def test_a_time_calibrated_plan_follows_the_step_times_and_leaves_the_survival_alone():
    """calibrate_plan="time": drafting steps that ran 1.5x their prediction stop the drafting at c=1 (one
    position pays above ~0.11 as priced, not at 1.5x the price), while the same drafts accepted at half
    the survival counted on do not (survival is scaled only in "time+survival"), and the gain is not kept."""
    batches = iter(range(100))

    def plan_depth(av):
        req = _Req(req_id=f"r{next(batches)}", tokens=[1] * 20)  # a new batch: planned afresh
        plan = ScheduledStep(decodes=[(req, 7)])
        av.plan_depths(plan)
        return plan.decodes[0][1]

    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    av = AdaptiveVerifier(TARGET, est, DRAFT, calibrate=True)
    av._prior = torch.full((7,), 0.15)
    assert plan_depth(av) == 1
    for _ in range(CALIBRATION_MIN_STEPS):
        av.calibration.observe_gain(1, torch.tensor([0.075]), torch.tensor([0.15]), torch.tensor([1.0]))
    assert plan_depth(av) == 1  # survival left as estimated
    av.learn(SimpleNamespace(features=None), [(0, SimpleNamespace(req_id="x"), 1, 0)], [0])
    assert av.calibration._rows[1].gain[0].steps == CALIBRATION_MIN_STEPS  # not measured in "time"
    for _ in range(CALIBRATION_MIN_STEPS):
        av.calibration.observe_spec(1, 0.075, 0.05)
        av.calibration.observe_plain(1, 0.0402, 0.0402)
    assert plan_depth(av) == 0


def test_the_plan_calibration_switch_reads_the_old_booleans():
    from workers.config import SpecConfig

    assert SpecConfig(calibrate_plan=True).calibrate_plan == "time+survival"
    assert SpecConfig(calibrate_plan=False).calibrate_plan == "off"
    assert SpecConfig(calibrate_plan="time").calibrate_plan == "time"


def test_a_ragged_step_refreshes_the_ragged_cost_and_leaves_the_uniform_cells():
    """Pure decode steps where one request verified 3 drafts took the uniform time plus 14 ms, the table's
    ragged cost read 8 ms: the ragged cost moves up, the uniform cells it is read from stay where they were."""
    table = CostTable({(4, 4): 0.040, (4, 8): 0.050}, ragged={(4, 1): 0.006, (4, 7): 0.012})
    av = AdaptiveVerifier(table, NgramEstimator(7))
    before = table.lookup(4, 7)
    assert abs(float(table.ragged_array(4, 3)) - 0.008) < 1e-9
    for _ in range(OBSERVE_BATCH):  # the table is refreshed OBSERVE_BATCH steps at a time
        av.observe_step(0.1, before + 0.014, 0.0, 4, 7, True, ragged_extra=3)
    assert abs(table.lookup(4, 7) - before) < 1e-9
    assert 0.010 < float(table.ragged_array(4, 3)) <= 0.014
    before = table.lookup(4, 7)
    for _ in range(OBSERVE_BATCH - 1):  # the same time from a uniform step: dearer, once the batch is full
        av.observe_step(0.1, before + 0.008, 0.0, 4, 7, True)
    assert table.lookup(4, 7) == before
    av.observe_step(0.1, before + 0.008, 0.0, 4, 7, True)
    assert table.lookup(4, 7) > before


def test_a_ragged_step_in_a_slow_stretch_leaves_the_gap_to_the_uniform_cells():
    """Every pure step runs 2x the table (the machine slowed, and stays slow past the outlier guard's burst; the
    table's refresh lags by up to OBSERVE_BATCH steps): a ragged step then costs 2x its uniform lookup plus 2x
    its ragged cost. Read against the lookup alone, the whole gap (~50 ms) went into the ragged cost, which no uniform step brings back; read against
    a uniform step run now, the ragged cost moves only by its own share (2x 8 ms)."""
    table = CostTable({(4, 4): 0.040, (4, 8): 0.050}, ragged={(4, 1): 0.006, (4, 7): 0.012})
    av = AdaptiveVerifier(table, NgramEstimator(7))
    # the first 5 read as a disturbance (workers/step_outliers.py); then no table refresh yet: the lookup still
    # reads the warm-up
    for _ in range(5 + OBSERVE_BATCH - 1):
        av.observe_step(0.1, 2 * table.lookup(4, 4), 0.0, 4, 4, True)
    assert av.stats(1)["outlier_steps"] == 5
    ragged, uniform = float(table.ragged_array(4, 3)), table.lookup(4, 7)
    av.observe_step(0.2, 2 * (uniform + ragged), 0.0, 4, 7, True, ragged_extra=3)
    assert abs(table.lookup(4, 7) - uniform) < 1e-9  # the uniform cells are left to uniform steps
    assert ragged < float(table.ragged_array(4, 3)) < ragged + 0.1 * 0.016  # what the old read would add: +0.005
    assert av.costs.level[4] == pytest.approx(2.0, rel=0.15)
    now = av.costs.level[4] * table.lookup(4, 4)
    av.observe_step(0.1, now, 0.0, 4, 4, True)  # the table's refresh takes up part of the gap: the level the rest
    assert table.lookup(4, 4) > 0.041 and av.costs.level[4] * table.lookup(4, 4) == pytest.approx(now, rel=1e-6)


def test_ragged_steps_with_more_query_lengths_teach_the_group_cost_and_leave_the_uniform_cells():
    """Ragged steps of 2, 3 and 4 query lengths, each group beyond two 3 ms dearer: the fitted group cost
    becomes 3 ms, and once it is known those steps no longer pull the uniform cells up."""
    table = CostTable({(4, 4): 0.040, (4, 8): 0.050}, ragged={(4, 1): 0.006, (4, 7): 0.012})
    av = AdaptiveVerifier(table, NgramEstimator(7))
    base = table.lookup(4, 7) + float(table.ragged_array(4, 3))
    for i in range(60):
        groups = i % 3
        av.observe_step(0.1, base + 0.003 * groups, 0.0, 4, 7, True, ragged_extra=3, extra_groups=groups)
    assert abs(table.group_s - 0.003) < 2e-4  # the first steps, before the fit, moved the cells a little
    assert abs(table.lookup(4, 7) + float(table.ragged_array(4, 3)) - base) < 5e-4  # not the mean 3 ms


def test_a_step_far_slower_than_predicted_teaches_the_cost_model_nothing():
    """Ragged steps at 10x their price (another process took the cores) leave the ragged cells, the group fit
    and the level where they were, and are counted; once most recent pure steps are that slow, they count
    again (the machine has changed)."""
    table = CostTable({(4, 4): 0.040, (4, 8): 0.050}, ragged={(4, 1): 0.006, (4, 7): 0.012})
    av = AdaptiveVerifier(table, NgramEstimator(7))
    base = table.lookup(4, 7) + float(table.ragged_array(4, 3))
    for i in range(30):  # the group fit learns 3 ms a group from normal steps
        av.observe_step(0.1, base + 0.003 * (i % 3), 0.0, 4, 7, True, ragged_extra=3, extra_groups=i % 3)
    ragged, group, level = float(table.ragged_array(4, 3)), table.group_s, dict(av.costs.level)
    for _ in range(5):  # a burst: 1 - (7/8)^5 = 0.49 of the recent steps
        av.observe_step(1.0, 10 * base, 0.0, 4, 7, True, ragged_extra=3, extra_groups=2)
    assert (float(table.ragged_array(4, 3)), table.group_s, av.costs.level) == (ragged, group, level)
    assert av.stats(100)["outlier_steps"] == 5
    av.observe_step(1.0, 10 * base, 0.0, 4, 7, True, ragged_extra=3, extra_groups=2)  # the 6th: learned
    assert float(table.ragged_array(4, 3)) > ragged and av.stats(100)["outlier_steps"] == 5


def test_slow_steps_are_learned_once_they_are_most_of_the_recent_ones():
    guard = OutlierGuard()  # 1.5x the prediction is slow; a running share at 1/8 a step
    assert guard.admits(0.14, 0.1)
    assert [guard.admits(0.16, 0.1) for _ in range(6)] == [False] * 5 + [True]  # share 0.49, then 0.55
    assert all(guard.admits(0.1, 0.1) for _ in range(10))  # the share decays to 0.15
    assert not guard.admits(1.0, 0.1) and guard.rejected == 6  # one slow step among normal ones: not learned
    assert guard.admits(5.0, 0.0)  # nothing predicted: nothing to compare with


def test_a_drafting_plan_keeps_one_step_in_n_plain_when_plain_probes_are_on():
    """calibration.plain_probe_every=N: after N calibrated drafting steps at a request count, the next pure
    decode step drafts nothing and measures the plain step (its ratio), then drafting goes on; off by default."""
    def run(every: int) -> list[int]:
        est = LogisticEstimator(7, 3)
        est.refits = est.warmup_refits
        # pure decode steps refresh the tables: copies, not the shared ones
        target = CostTable({(1, t): 0.040 + 0.0002 * t for t in range(1, 10)})
        av = AdaptiveVerifier(target, est, CostTable({(1, 1): 0.0045}), calibrate=True)
        av.calibration.plain_probe_every = every
        av._prior = torch.full((7,), 0.6)  # drafting pays at c=1
        req, depths = _Req(req_id="r", tokens=[1] * 20), []
        for _ in range(10):
            plan = ScheduledStep(decodes=[(req, 7)])
            av.plan_depths(plan)
            depth = plan.decodes[0][1]
            depths.append(depth)
            av.observe_step(0.045 if depth else 0.040, 0.040, 0.004 if depth else 0.0, 1, 1 + depth, True, 1, depth)
            req.tokens.append(1)
        assert av.plain_probes == depths.count(0)
        return depths

    assert 0 not in run(0)
    depths = run(4)
    assert [i for i, d in enumerate(depths) if d == 0] == [4, 9]


def test_an_idle_depth_plan_is_reused_until_the_batch_or_the_estimates_change():
    """A plan that drafted nothing is not recomputed for the same requests (no new estimates; catch-ups only
    grow), at most PROBE_EVERY times in a row; another batch is planned afresh."""
    av, req = _verifier(prior=0.01)
    calls = []
    real = depth_plan_module.plan_verify_lengths
    depth_plan_module.plan_verify_lengths = lambda *a, **kw: calls.append(1) or real(*a, **kw)
    try:
        for _ in range(PROBE_EVERY - 1):  # the first probe comes at plan PROBE_EVERY
            _depth(av, req)
        assert len(calls) + av.idle_plans_bounded == 1  # computed once (here the bound decides it)
        other = _Req(req_id="o", tokens=[1] * 20)
        av.plan_depths(ScheduledStep(decodes=[(req, 7), (other, 7)]))
        assert len(calls) + av.idle_plans_bounded == 2
    finally:
        depth_plan_module.plan_verify_lengths = real


def test_the_bound_read_from_the_running_mean_changes_no_depth_plan(monkeypatch):
    """Idle plans decided by `_cannot_pay` before any [B, K] tensor is built are the search's: random running
    means, batches (depths, catch-ups, outputs left), prefill chunks, calibration and drafting prices plan the
    same caps with and without it, and it decides a good share of them."""
    gen = torch.Generator().manual_seed(2)
    cases = []
    for i in range(200):
        B = int(torch.randint(1, 12, (1,), generator=gen))
        prior = torch.rand(7, generator=gen) ** int(torch.randint(1, 4, (1,), generator=gen))
        reqs = [_Req(req_id=f"r{i}-{b}", tokens=[1] * int(torch.randint(2, 80, (1,), generator=gen)),
                     max_tokens=int(torch.randint(1, 200, (1,), generator=gen)), num_prompt=1) for b in range(B)]
        drafted = {r.req_id: (len(r.tokens) - int(torch.randint(0, 3, (1,), generator=gen)), 2)
                   for r in reqs if float(torch.rand(1, generator=gen)) < 0.7}
        depths = torch.randint(0, 8, (B,), generator=gen).tolist()
        prefills = [PREFILL] if float(torch.rand(1, generator=gen)) < 0.4 else []
        draft_s = 0.0005 + 0.01 * float(torch.rand(1, generator=gen))
        cases.append((prior, reqs, drafted, depths, prefills, draft_s, bool(i % 2)))

    def plans() -> list[list[int]]:
        out = []
        for prior, reqs, drafted, depths, prefills, draft_s, calibrate in cases:
            est = LogisticEstimator(7, 3)
            est.refits = est.warmup_refits
            draft = CostTable({(r, t): draft_s * (1 + 0.05 * t) for r in (1, 4, 16) for t in (r, 17 * r)})
            av = AdaptiveVerifier(MIXED_TABLE, est, draft, calibrate=calibrate)
            av._prior, av.catch_ups.drafted_at, av.overhead_s = prior.clone(), dict(drafted), 0.003
            plan = ScheduledStep(decodes=list(zip(reqs, depths)), prefills=prefills)
            av.plan_depths(plan)
            out.append([d for _, d in plan.decodes])
        return out

    calls = []
    real = AdaptiveVerifier._cannot_pay
    monkeypatch.setattr(AdaptiveVerifier, "_cannot_pay", lambda *a: calls.append(real(*a)) or calls[-1])
    bounded = plans()
    monkeypatch.setattr(AdaptiveVerifier, "_cannot_pay", lambda *a: False)
    assert bounded == plans()
    assert 20 < sum(calls) < len(calls) - 20  # both outcomes are exercised
    assert sum(any(p) for p in bounded) > 20


def test_an_ngram_request_is_rated_by_how_its_last_draft_fared():
    """The verifier keys the n-gram table by each request's last verification: it appends that bucket to
    the draft's features in `trim` (which `learn` then reads) and updates it from the outcomes."""
    av = AdaptiveVerifier(CostTable({(2, t): 0.04 for t in range(2, 17)}), NgramEstimator(7))  # verify all
    reqs = [_Req(req_id=f"r{i}", tokens=[1] * 20) for i in range(2)]
    plan = ScheduledStep(decodes=[(r, 7) for r in reqs])

    def step(accepted: list[int]) -> SimpleNamespace:
        proposal = SimpleNamespace(features=torch.full((2, 7, 1), 3.0), num_drafts=torch.tensor([7, 7]))
        av.trim(proposal, plan)
        assert proposal.num_drafts.tolist() == [7, 7]
        av.learn(proposal, [(b, r, 7, 0) for b, r in enumerate(reqs)], accepted)
        return proposal.features[:, 0, 1].tolist()  # the buckets this step was rated by

    assert step([7, 0]) == [0.0, 0.0]  # no history yet
    assert step([1, 5]) == [3.0, 1.0]  # all accepted; none
    assert step([5, 0]) == [2.0, 3.0]  # 1 accepted; 5 accepted
    av.forget("r0")
    assert step([5, 0]) == [0.0, 1.0]


def test_a_step_whose_trim_cut_the_planned_drafts_does_not_calibrate_the_depth_plan():
    """The plan priced verifying what it drafted; a step whose trim cut those drafts took less time than
    that for another reason than the plan's cost model, so the plan's calibration leaves it out."""
    est = LogisticEstimator(7, 3)
    est.refits = est.warmup_refits
    av = AdaptiveVerifier(CostTable(dict(TARGET.seconds)), est, CostTable(dict(DRAFT.seconds)), calibrate=True)
    av._prior = torch.full((7,), 0.15)
    req = _Req(req_id="r", tokens=[1] * 20)
    plan = ScheduledStep(decodes=[(req, 7)])
    av.plan_depths(plan)
    assert plan.decodes[0][1] == 1 and av._planned is not None
    proposal = SimpleNamespace(features=torch.full((1, 7, 3), -30.0), num_drafts=torch.tensor([1]))
    av.estimator.predict = lambda f: torch.zeros(f.shape[:2])  # fresh estimates: nothing survives
    av.trim(proposal, plan)
    assert proposal.num_drafts.tolist() == [0] and av._planned is None
    av.observe_step(0.045, 0.040, 0.0045, 1, 1, True, 1, 1)
    assert 1 not in av.calibration._rows or av.calibration._rows[1].spec.steps == 0


def _plan_once(av: AdaptiveVerifier, req) -> int:
    """One depth plan, no time observed (so no probe comes due)."""
    plan = ScheduledStep(decodes=[(req, 7)])
    av.plan_depths(plan)
    return plan.decodes[0][1]


def _verified(av: AdaptiveVerifier, drafts: int, accepted: int) -> None:
    """`drafts` position-1 drafts verified, `accepted` of them accepted (no features: the estimator learns
    nothing)."""
    req = SimpleNamespace(req_id="x")
    av.learn(SimpleNamespace(features=None), [(0, req, 1, 0)] * drafts, [1] * accepted + [0] * (drafts - accepted))


def test_the_plan_drafts_when_position_1_outcomes_beat_low_estimates():
    """Estimates at 0.05 (one position pays above ~0.11 here): idle. Verified drafts accepted at 0.4: the plan
    reads position 1 from them and drafts (workers/first_position.py)."""
    av, req = _verifier(0.05)
    assert _plan_once(av, req) == 0
    _verified(av, 40, 16)
    assert _plan_once(av, _Req(req_id="r2", tokens=[1] * 20)) >= 1
    av.first.enabled = False  # the estimates' running mean alone: idle again
    assert _plan_once(av, _Req(req_id="r3", tokens=[1] * 20)) == 0


def test_idle_plans_try_again_a_level_close_to_paying_and_never_one_far_off():
    """Outcomes at 0.08 over 200 drafts (short of ~0.11 by more than their standard error): idle, until idle plans
    fade the count and the bonus lifts the level over the bar. Outcomes at 0 stay idle however long."""
    for accepted, drafts_later in ((16, True), (0, False)):
        av, req = _verifier(0.05)
        _verified(av, 200, accepted)
        depths = [_plan_once(av, req) for _ in range(400)]
        assert depths[0] == 0
        assert any(depths) is drafts_later


def test_a_depth_plan_with_a_margin_drafts_only_where_it_predicts_that_much_over_not_drafting():
    """`draft_margin`: drafting must beat not drafting's rate by that fraction. One request at c=1 (no catch-up
    priced: DRAFT has no catch-up cell, nor host time or overhead yet): the plan's predicted gain is the best
    depth's (1 + survival summed) / (its step + its draft iterations) over not drafting's 1 / step."""
    av, req = _verifier(prior=0.3)
    survival = list(itertools.accumulate(av._plan_prior_list(), operator.mul))  # what the plan counts on
    plain = 1 / TARGET.lookup(1, 1)
    gain = max((1 + sum(survival[:d])) / (TARGET.lookup(1, 1 + d) + d * DRAFT.lookup(1, 1)) for d in range(1, 8))
    gain = gain / plain - 1
    assert gain > 0.05  # drafting pays here
    for margin, drafts in ((0.0, True), (gain - 0.005, True), (gain + 0.005, False)):
        av, req = _verifier(prior=0.3)
        av.draft_margin = margin
        assert (_depth(av, req) > 0) == drafts, margin
