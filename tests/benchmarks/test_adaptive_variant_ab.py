"""The probes of benchmarks/adaptive_variant_ab.py on exact inputs (the benchmark itself runs the real engine,
not in CI)."""
import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from adaptive_variant_ab import _variants, _without, calibration_part, per_request_depths, uniform_depth  # noqa: E402


def test_each_request_verifies_the_depth_of_its_least_cost_per_token():
    """A plain step costs 3.4 ms a request and a verified row 1 ms: a confident request (survival 0.9 ** d) stops
    at 5 (8.4 / 5.10 = 1.79 ms a token, against 1.80 at 6), a doubtful one (0.6, 0.4, 0.27, ...) at 2 (5.4 / 2.0
    < 6.4 / 2.27), one without drafts at 0; with rows as dear as a plain step, no depth pays."""
    confident = 0.9 ** np.arange(1, 8)
    doubtful = np.array([0.6, 0.4, 0.27, 0.1, 0.04, 0.01, 0.005])
    scores = np.stack([confident, doubtful, np.zeros(7)])
    assert per_request_depths(scores, 3.4e-3, 1e-3).tolist() == [5, 2, 0]
    assert per_request_depths(scores, 3.4e-3, 5e-3).tolist() == [0, 0, 0]
    short = np.stack([np.r_[confident[:3], np.zeros(4)]])  # only 3 drafts: never deeper than its draft
    assert per_request_depths(short, 3.4e-3, 1e-3).tolist() == [3]


def test_uniform_depth_is_the_fixed_k_a_batch_would_pick_this_step():
    """Two requests, one drafted 3 deep (survival 0.9, 0.8, 0.6), one 1 deep (0.5); a plain step 10 ms, a row
    `row_ms`: cheap rows take every depth (4.8 tokens at 10.4 ms), dear rows none, and at 3 ms a row depth 2
    (4.2 tokens at 19 ms, 221 tok/s, against depth 3's 4.8 at 22 ms, 218, and no draft's 2 at 10, 200)."""
    scores = np.array([[0.9, 0.8, 0.6], [0.5, 0.0, 0.0]])
    drafted = np.array([3, 1])
    for row_ms, depth in ((0.1, 3), (3.0, 2), (20.0, 0)):
        step_s = 0.010 + row_ms * 1e-3 * np.arange(5)
        assert uniform_depth(scores, drafted, step_s, 2.0) == depth


def test_variants_are_parsed_from_a_comma_list():
    assert _variants("cap2,perrequest,noexplore") == ["cap2", "perrequest", "noexplore"]
    assert _variants("uniformcap,rowsx2,rowsx1.5") == ["uniformcap", "rowsx2", "rowsx1.5"]
    assert _variants("cap3mixed,cap3pure") == ["cap3mixed", "cap3pure"]
    assert _variants("placebo,noguard") == ["placebo", "noguard"]  # placebo: the variant slot by itself
    assert _variants("plainprobe16,stale8") == ["plainprobe16", "stale8"]
    assert _variants("nolevel") == ["nolevel"]
    assert _variants("depth15,placebo") == ["depth15", "placebo"]  # a deeper draft beside the slot by itself
    assert _variants("margin3,margin2.5") == ["margin3", "margin2.5"]  # the depth plan's draft_margin, in percent
    assert _variants("survivalcal") == ["survivalcal"]  # calibrate_plan "time+survival"
    parts = ["depth15mixed7", "mixed0", "depth15mixed7rows32",  # deep drafts (or any) in pure decode steps only
             "depth15mixed7rows32wait4"]  # and at most 4 while prompts wait
    assert _variants(",".join(parts)) == parts
    with pytest.raises(argparse.ArgumentTypeError):
        _variants("depthmixed")
    with pytest.raises(argparse.ArgumentTypeError):
        _variants("cap,x")
    for bad in ("rowsx", "cap3both", "norelax", "plainprobe"):  # norelax: taken out with the relaxation it read
        with pytest.raises(argparse.ArgumentTypeError):
            _variants(bad)


def test_calibration_parts_set_the_depth_plans_calibration_and_nothing_else():
    from types import SimpleNamespace
    from workers.plan_calibration import PlanCalibration

    engine = SimpleNamespace(adaptive=SimpleNamespace(calibration=PlanCalibration()))
    assert calibration_part(engine, "plainprobe0") and engine.adaptive.calibration.plain_probe_every == 0
    assert calibration_part(engine, "stale8") and engine.adaptive.calibration.plain_stale_steps == 8
    assert not calibration_part(engine, "placebo") and not calibration_part(engine, "cap2")


def test_nolevel_has_the_depth_plan_read_position_1_from_the_estimates():
    from types import SimpleNamespace
    from workers.first_position import FirstPositionLevel

    engine = SimpleNamespace(adaptive=SimpleNamespace(first=FirstPositionLevel()))
    engine.adaptive.first.observe(100, 50)
    _without(engine, "nolevel")
    assert engine.adaptive.first.level(0.2) == 0.2
