"""The depth plan's calibration (workers/plan_calibration.py): ratios of observed to predicted per kind of step,
per position and per request count, neutral until enough steps were seen, and bounded."""
import pytest
import torch

from workers.plan_calibration import (CALIBRATION_MIN_STEPS, CALIBRATION_RATE, GAIN_BOUNDS, PLAIN_PROBE_RATE,
                                      PLAIN_STALE_STEPS, TIME_BOUNDS, PlanCalibration)

NEUTRAL = {"plain_scale": 1.0, "spec_scale": 1.0}


def test_time_scales_are_neutral_until_enough_steps_of_a_kind_were_seen():
    cal = PlanCalibration()
    assert cal.scales(4) == NEUTRAL
    for _ in range(CALIBRATION_MIN_STEPS - 1):
        cal.observe_plain(4, 0.050, 0.040)
        cal.observe_spec(4, 0.090, 0.060)
    assert cal.scales(4) == NEUTRAL
    cal.observe_plain(4, 0.050, 0.040)
    cal.observe_spec(4, 0.090, 0.060)
    assert cal.scales(4) == {"plain_scale": 1.25, "spec_scale": 1.5}
    assert cal.scales(8) == NEUTRAL  # another request count learns on its own


def test_a_kind_of_step_not_measured_yet_borrows_the_other_kinds_ratio():
    """Plain steps running 25% over the table at a request count where nothing drafted yet: drafting steps
    (which contain the same forward) are priced 25% over too, not at the table, which made drafting look
    better than it was; once drafting steps are measured, their own ratio counts."""
    cal = PlanCalibration()
    for _ in range(CALIBRATION_MIN_STEPS):
        cal.observe_plain(32, 0.250, 0.200)
    assert cal.scales(32) == pytest.approx({"plain_scale": 1.25, "spec_scale": 1.25})
    for _ in range(CALIBRATION_MIN_STEPS):
        cal.observe_spec(32, 0.220, 0.200)
    assert cal.scales(32) == pytest.approx({"plain_scale": 1.25, "spec_scale": 1.1})
    other = PlanCalibration()
    for _ in range(CALIBRATION_MIN_STEPS):
        other.observe_spec(2, 0.045, 0.050)
    assert other.scales(2) == pytest.approx({"plain_scale": 0.9, "spec_scale": 0.9})


def test_a_plain_ratio_no_plain_step_refreshed_goes_stale_and_is_then_measured_afresh():
    """Plain steps read 1.7x the table at one workload; the plan then drafts in every step, so no plain step
    refreshes that ratio. After PLAIN_STALE_STEPS drafting steps it borrows the drafting steps' ratio; the
    plain steps that follow are measured from scratch (0.95 now), not averaged into the stale 1.7."""
    cal = PlanCalibration()
    for _ in range(CALIBRATION_MIN_STEPS):
        cal.observe_plain(32, 0.340, 0.200)
    for _ in range(PLAIN_STALE_STEPS):
        cal.observe_spec(32, 0.220, 0.200)
    assert cal.scales(32) == pytest.approx({"plain_scale": 1.7, "spec_scale": 1.1})
    cal.observe_spec(32, 0.220, 0.200)
    assert cal.scales(32) == pytest.approx({"plain_scale": 1.1, "spec_scale": 1.1})
    cal.observe_plain(32, 0.190, 0.200)  # fresh, and not ready yet: still the drafting steps' ratio
    assert cal.scales(32) == pytest.approx({"plain_scale": 1.1, "spec_scale": 1.1})
    for _ in range(CALIBRATION_MIN_STEPS - 1):
        cal.observe_plain(32, 0.190, 0.200)
    assert cal.scales(32) == pytest.approx({"plain_scale": 0.95, "spec_scale": 1.1})
    for _ in range(PLAIN_STALE_STEPS):  # plain steps now and then keep the ratio fresh
        cal.observe_spec(32, 0.220, 0.200)
    cal.observe_plain(32, 0.190, 0.200)
    for _ in range(PLAIN_STALE_STEPS):
        cal.observe_spec(32, 0.220, 0.200)
    assert cal.scales(32) == pytest.approx({"plain_scale": 0.95, "spec_scale": 1.1})


def test_a_plain_probe_is_due_after_n_drafting_steps_and_weighs_more_than_a_plain_step():
    """With plain_probe_every=N, a plain step is due after N drafting steps at a request count, and its time moves the plain ratio's running means by PLAIN_PROBE_RATE, a plain step's by
    CALIBRATION_RATE."""
    assert not PlanCalibration(plain_probe_every=0).plain_probe_due(8)
    cal = PlanCalibration(plain_probe_every=4)
    for _ in range(CALIBRATION_MIN_STEPS):
        cal.observe_plain(8, 0.100, 0.100)
    for _ in range(3):
        cal.note_drafting(8)
        cal.observe_spec(8, 0.120, 0.100)
    assert not cal.plain_probe_due(8) and not cal.plain_probe_due(4)
    cal.note_drafting(8)  # a drafting step whose prediction was not observed (the trim cut it) counts too
    assert cal.plain_probe_due(8)
    cal.observe_plain(8, 0.060, 0.100)  # the machine sped up: the probe reads 0.6
    assert not cal.plain_probe_due(8)
    moved = (0.100 + PLAIN_PROBE_RATE * (0.060 - 0.100)) / 0.100
    assert cal.scales(8)["plain_scale"] == pytest.approx(moved)
    cal.observe_plain(8, 0.060, 0.100)  # not a probe: the usual weight
    assert cal.scales(8)["plain_scale"] == pytest.approx((moved * 0.1 + CALIBRATION_RATE * (0.06 - moved * 0.1)) / 0.1)


def test_the_gain_is_per_position_a_ratio_of_running_means_and_only_where_drafts_were_verified():
    """Two requests verify position 1 each step (survival 0.6 counted on, one accepted: 0.5 / 0.6 = 0.83
    of it came true); position 2 is verified by one request every other step at survival 0.4 and never
    accepted; position 3 never verified, so it keeps its neutral scale."""
    cal = PlanCalibration()
    for i in range(400):
        verified = torch.tensor([2.0, float(i % 2), 0.0])
        cal.observe_gain(2, torch.tensor([1.0, 0.0, 0.0]), torch.tensor([1.2, 0.4 * (i % 2), 0.0]), verified)
    gain = cal.gain(2, 4)
    assert abs(float(gain[0]) - 1 / 1.2) < 1e-6
    assert abs(float(gain[1]) - GAIN_BOUNDS[0]) < 1e-6
    assert gain[2:].tolist() == [1.0, 1.0]
    assert cal.gain(4, 3).tolist() == [1.0, 1.0, 1.0]


def test_scales_are_bounded():
    cal = PlanCalibration()
    for _ in range(50):
        cal.observe_plain(1, 0.2, 0.04)
        cal.observe_spec(1, 0.01, 0.05)
        cal.observe_gain(1, torch.tensor([5.0]), torch.tensor([1.0]), torch.tensor([1.0]))
    assert cal.scales(1) == {"plain_scale": TIME_BOUNDS[1], "spec_scale": TIME_BOUNDS[0]}
    assert abs(float(cal.gain(1, 1)[0]) - GAIN_BOUNDS[1]) < 1e-6
