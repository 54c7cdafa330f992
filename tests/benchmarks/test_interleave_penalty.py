"""The interleave-penalty analysis on exact step records (the benchmark itself runs the real engine, not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from interleave_penalty import penalty  # noqa: E402


def test_first_steps_are_read_against_later_steps_of_the_same_rows():
    # (first in turn, rows, tick s, forward s)
    records = [(False, 4, 0.10, 0.08), (False, 4, 0.12, 0.09), (False, 4, 0.11, 0.10),
               (False, 8, 0.20, 0.18), (False, 8, 0.20, 0.18), (False, 8, 0.22, 0.19),
               (True, 4, 0.121, 0.10), (True, 8, 0.20, 0.18)]
    tick = penalty(records, 0)
    # later medians: 0.11 (4 rows), 0.20 (8 rows); first steps 0.121 / 0.11 = 1.1 and 0.20 / 0.20 = 1.0
    assert tick["steps"] == 2
    assert tick["mean"] == pytest.approx(1.05)
    assert tick["median"] == pytest.approx(1.05)
    assert penalty(records, 1)["mean"] == pytest.approx((0.10 / 0.09 + 1.0) / 2, abs=1e-4)


def test_a_shape_with_too_few_later_steps_is_not_read():
    records = [(False, 4, 0.1, 0.1), (False, 4, 0.1, 0.1), (True, 4, 0.5, 0.5)]
    assert penalty(records, 0) == {"steps": 0}
