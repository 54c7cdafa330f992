"""The point-variance analysis on exact samples (the benchmark itself runs the real engine, not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from point_variance import analyse  # noqa: E402


def test_paired_and_grid_point_ratios():
    samples = {"off": [100.0, 90.0, 110.0, 100.0], "k2": [95.0, 100.0, 100.0, 80.0],
               "adaptive": [99.0, 99.0, 99.0, 99.0]}
    out = analyse(samples, "adaptive")
    # per cycle: 99 / max(off, k2) = 0.99, 0.99, 0.9, 0.99
    assert out["paired_ratio"]["median"] == pytest.approx(0.99)
    assert out["paired_ratio"]["min"] == pytest.approx(0.9)
    assert out["paired_at_least_0.98"] == 0.75
    # every 3 of 4 cycles, each configuration its own median: off 100 in all four picks, k2 100 / 95 / 95 / 100
    assert out["grid_point_ratio"]["median"] == pytest.approx(0.99)
    assert out["grid_point_at_least_0.98"] == 1.0
    assert out["relative_spread"]["off"] == pytest.approx(0.2)
    assert out["paired_vs_off"]["max"] == pytest.approx(1.1)  # 99 / 90
