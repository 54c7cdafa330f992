"""The point-variance analysis on exact samples (the benchmark itself runs the real engine, not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from point_variance import analyse  # noqa: E402


def test_paired_and_grid_point_ratios():
    samples = {"off": [100.0, 90.0, 110.0, 100.0], "k2": [95.0, 100.0, 100.0, 80.0],
               "adaptive": [99.0, 99.0, 99.0, 99.0]}
    out = analyse(samples, "adaptive", grid_repeat=3)
    # per cycle: 99 / max(off, k2) = 0.99, 0.99, 0.9, 0.99
    assert out["paired_ratio"]["median"] == pytest.approx(0.99)
    assert out["paired_ratio"]["min"] == pytest.approx(0.9)
    assert out["paired_at_least_0.98"] == 0.75
    # every 3 of 4 cycles, each configuration its own median: off 100 in all four picks, k2 100 / 95 / 95 / 100
    assert out["grid_point_ratio"]["median"] == pytest.approx(0.99)
    assert out["grid_point_at_least_0.98"] == 1.0
    assert out["relative_spread"]["off"] == pytest.approx(0.2)
    assert out["paired_vs_off"]["max"] == pytest.approx(1.1)  # 99 / 90
    assert out["grid_repeat"] == 3


def test_grid_points_default_to_the_grid_of_records_two_cycles():
    samples = {"off": [100.0, 90.0, 110.0], "adaptive": [99.0, 90.0, 99.0]}
    out = analyse(samples, "adaptive")
    # every 2 of 3 cycles, medians of two (their means): 94.5/95, 99/105, 94.5/100
    assert out["grid_repeat"] == 2
    assert out["grid_point_ratio"]["max"] == pytest.approx(94.5 / 95, abs=1e-4)
    assert out["grid_point_ratio"]["min"] == pytest.approx(99 / 105, abs=1e-4)
    assert out["grid_point_at_least_0.98"] == pytest.approx(1 / 3, abs=1e-3)


def test_a_placebo_is_read_like_adaptive_against_the_same_configurations():
    samples = {"off": [50.0] * 3, "k7": [100.0, 90.0, 95.0], "adaptive": [95.0] * 3,
               "k7#placebo": [90.0, 100.0, 95.0]}
    out = analyse(samples, "adaptive", "k7#placebo")
    # adaptive is read against off and k7 only (not against the placebo): 0.95, 95/90 and 1.0
    assert out["paired_ratio"]["min"] == pytest.approx(0.95)
    assert out["paired_ratio"]["max"] == pytest.approx(95 / 90, abs=1e-4)  # rounded to 4 places
    # the placebo against the same two, its twin among them: 0.9, 1.0, 1.0 per cycle; medians 95 / 95
    assert out["placebo"]["paired_ratio"]["min"] == pytest.approx(0.9)
    assert out["placebo"]["copy_of"] == "k7"
    assert out["placebo"]["paired_ratio"]["median"] == pytest.approx(1.0)
    assert out["placebo"]["medians_ratio"] == pytest.approx(1.0)
    assert "placebo" not in analyse(samples, "adaptive")


def test_variants_are_read_against_no_speculation_and_fixed_k_only():
    samples = {"off": [100.0, 100.0], "k2": [90.0, 110.0], "adaptive": [95.0, 99.0], "adaptive#v": [105.0, 121.0]}
    out = analyse(samples, "adaptive", variants=("adaptive#v",))
    # adaptive: 95 / 100 and 99 / 110, not against the variant's 105 and 121
    assert out["paired_ratio"]["min"] == pytest.approx(0.9)
    assert out["paired_ratio"]["max"] == pytest.approx(0.95)
    # the variant: 105 / 100 and 121 / 110, above 1.0 (it once counted itself in the max)
    assert out["variants"]["adaptive#v"]["paired_ratio"]["min"] == pytest.approx(1.05)
    assert out["variants"]["adaptive#v"]["paired_ratio"]["max"] == pytest.approx(1.1)
