"""Probes (workers/probes.py): when the depth plan drafts nothing, one request drafts one position now and then,
its cost bounded to a share of the time."""
from workers.catch_up import CatchUpLedger
from workers.cost_table import CostTable
from workers.probes import PROBE_EVERY, PROBE_SCALE_BOUNDS, PROBE_SHARE, PROBE_SHARE_MIN, ProbeSchedule

TARGET = CostTable({(2, t): 0.040 + 0.001 * t for t in range(1, 10)})
DRAFT = CostTable({(1, 1): 0.004})


def _plan(p: ProbeSchedule, extra: list[int], step_s: float = 0.040) -> int | None:
    b = p.choose(False, [7] * len(extra), extra, (2, 2), TARGET, DRAFT, CatchUpLedger())
    p.since_s += step_s  # as observe_step does
    return b


def test_a_probe_waits_for_enough_plans_and_time_then_takes_the_request_with_least_to_catch_up():
    p = ProbeSchedule()
    picks = [_plan(p, [5, 0]) for _ in range(PROBE_EVERY)]
    assert picks[:-1] == [None] * (PROBE_EVERY - 1)
    # the 8th plan: 7 steps x 40 ms x 1/8 = 35 ms >= one draft iteration plus a verified row (5 ms)
    assert picks[-1] == 1 and p.probes == 1 and p.share == PROBE_SHARE / 2 and p.priced == DRAFT.lookup(1, 1)


def test_the_share_halves_down_to_its_floor_and_a_drafting_plan_resets_it():
    p = ProbeSchedule()
    for _ in range(20_000):
        _plan(p, [0])
    assert p.share == PROBE_SHARE_MIN
    assert p.choose(True, [7], [0], (1, 1), TARGET, DRAFT, CatchUpLedger()) is None
    assert (p.share, p.since, p.since_s) == (PROBE_SHARE, 0, 0.0)


def test_what_probes_took_rescales_their_price_within_bounds():
    p = ProbeSchedule(priced=0.004)
    p.observe(0.012, 0.0, forward_over_s=0.001)  # 3x the price
    assert p.scale == 1.0 + 0.25 * 2.0 and p.draft_s == 0.012 and p.forward_over_s == 0.001
    for _ in range(50):
        p.observe(4.0, 0.0, None)  # 1000x: bounded
    assert abs(p.scale - PROBE_SCALE_BOUNDS[1]) < 1e-3
