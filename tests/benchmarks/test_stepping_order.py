"""The stepping-order check's configurations and ratios (the benchmark itself runs the real engines, not in CI)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from adaptive_engine import MODES  # noqa: E402
from stepping_order import modes, ratios  # noqa: E402


def test_the_copy_comes_right_after_no_speculation_and_the_grid_keeps_its_order():
    order = modes("draft:7:adaptive")
    assert order[:2] == ["off", "draft:7:adaptive#early"]
    assert [m for m in order if m != "draft:7:adaptive#early"] == MODES


def test_the_grid_engine_is_read_against_its_copy_cycle_by_cycle():
    order = ["off", "a#early", "a"]
    r = ratios(order, [[100.0, 200.0], [99.0, 202.0], [98.0, 198.0]], "a")
    assert r["over_off"]["a"] == [0.98, 0.99]
    assert r["engine_over_copy"] == [round(98 / 99, 4), round(198 / 202, 4)]
