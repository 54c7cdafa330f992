"""Merging grid runs made in parts (the grid itself runs the real engine, not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from adaptive_engine import merge_runs, summarise  # noqa: E402

SETTINGS = {"modes": ["off", "ngram:2", "ngram:7:adaptive"], "repeat": 3, "max_tokens": 48, "sustained": True,
            "min_requests": 8, "per_slot": 2}


def rows(c: int, adaptive: float) -> list[dict]:
    out = [{"mode": "off", "k": 0, "output_tokens_per_s": 100.0}]
    out += [{"mode": "ngram", "k": k, "output_tokens_per_s": 90.0 + k} for k in (2, 4, 7)]
    out += [{"mode": "ngram-adaptive", "k": 7, "output_tokens_per_s": adaptive}]
    return [{**r, "workload": "repetitive", "concurrency": c, "samples_tokens_per_s": [r["output_tokens_per_s"]] * 3}
            for r in out]


def test_parts_merge_into_one_grid():
    settings, data = merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "rows": rows(16, 105.0)}])
    assert settings == {**SETTINGS, "interleave": False}  # runs from before the option ran one at a time
    summary = {s["concurrency"]: s["adaptive_vs_best"] for s in summarise(data)}
    assert summary == {1: pytest.approx(0.99), 16: pytest.approx(1.05)}


def test_parts_that_differ_or_overlap_are_refused():
    with pytest.raises(SystemExit, match="repeat"):
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "repeat": 5, "rows": rows(16, 99.0)}])
    with pytest.raises(SystemExit, match="interleave"):
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "interleave": True, "rows": rows(16, 99.0)}])
    with pytest.raises(SystemExit, match="twice"):
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "rows": rows(1, 99.0)}])
