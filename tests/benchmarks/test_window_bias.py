"""benchmarks/window_bias.py: the timelines it cuts windows from (the benchmark itself runs the real model, not
in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from window_bias import interleaved_timelines, rate, timeline, windows  # noqa: E402
from workers.config import EngineConfig  # noqa: E402
from workers.engine import LLMEngine  # noqa: E402

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 3], [4, 5, 6], [7, 8, 9, 10]]
LENGTHS = [4, 8, 9, 8, 8, 8]


def _engine(model) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model), dtype="float32", kv_cache_memory_gb=0.05))


def test_interleaved_timelines_count_what_each_engine_serves_alone(tiny_target):
    """Two engines stepped in turn: each timeline admits every prompt, ends with the tokens a run alone emits
    up to the same admission, and its seconds only grow (each engine's own ticks)."""
    alone = timeline(_engine(tiny_target), PROMPTS, 2, LENGTHS)
    lines = interleaved_timelines({"a": _engine(tiny_target), "b": _engine(tiny_target)}, PROMPTS, 2, LENGTHS)
    for tl in lines.values():
        assert tl[-1][2] == len(PROMPTS)
        assert all(later[0] >= earlier[0] for earlier, later in zip(tl, tl[1:]))
        # the same tokens by the step that admitted the last prompt: greedy, the same schedule
        assert next(o for _, o, a in tl if a == len(PROMPTS)) == next(o for _, o, a in alone if a == len(PROMPTS))


def test_windows_and_rates_are_cut_at_admissions():
    tl = [(1.0, 10, 2), (2.0, 30, 3), (4.0, 70, 4), (5.0, 80, 6)]
    assert rate(tl, 0, 3) == pytest.approx(30 / 2.0)  # from the start to the last step with <= 3 admitted
    assert rate(tl, 3, 6) == pytest.approx((80 - 30) / (5.0 - 2.0))
    w = windows(2, 8)
    assert w["all after the second wave"] == [(4, 7)] and w["c after the first wave"] == [(2, 4), (4, 6), (6, 8)]
