"""The summary of benchmarks/grid_step_log.py on a hand-made log (the log itself comes from the real engines,
not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from grid_step_log import summary  # noqa: E402


def _tick(s: float, emitted: int, depths=None, catch_up_rows: int = 0, prefill: int = 0) -> dict:
    t = {"workload": "repetitive", "cycle": 0, "timed": True, "s": s, "emitted": emitted}
    if depths is not None:
        t.update(depths=depths, prefill_tokens=prefill, catch_up_rows=catch_up_rows, plain_s=0.050,
                 scales={"plain_scale": 1.2, "spec_scale": 1.0})
    return t


def test_each_kind_of_pure_decode_step_is_read_against_no_speculations_step_of_the_same_round():
    """Round by round: a plain step as fast as no speculation's (1.000), drafting steps 1.3x as long for 1.25x
    the tokens (0.962), a drafting step with a 200-row catch-up 2x as long (0.625); a round where either engine
    prefilled is left out; the plain price (0.050 s x 1.2) over no speculation's 0.050 s step reads 1.2."""
    ours = [_tick(0.050, 8, [0, 0]), _tick(0.065, 10, [1, 1]), _tick(0.065, 10, [1, 1]),
            _tick(0.100, 10, [1, 1], catch_up_rows=200), _tick(0.300, 8, [0], prefill=100), _tick(0.050, 8, [0, 0])]
    off = [_tick(0.050, 8), _tick(0.050, 8), _tick(0.050, 8), _tick(0.050, 8), _tick(0.300, 8), _tick(0.200, 8)]
    log = {"ticks": {"off": off, "draft:7:adaptive": ours},
           "cycles": [{"workload": "repetitive", "cycle": 0,
                       "tokens_per_s": {"off": 100.0, "draft:7:adaptive": 97.0}}]}
    row = summary(log).splitlines()[-1]
    assert row.startswith("| adaptive | repetitive | 0 | 0.970 | 1: 1.000 | 2: 0.962 | 1: 0.625 | 1.200 | `.DDDp.` |")


def test_variants_are_checked_before_any_engine_is_built(monkeypatch):
    """The A/B's take-out parts are accepted (`nolevel` is checked by name here, its engines are not built); the
    old cost tables' parts, which build their engines apart, and unknown names stop at once."""
    import grid_step_log

    built = []
    monkeypatch.setattr(grid_step_log, "run", lambda *a: built.append(a[-1]) or {"ticks": {}, "cycles": []})
    monkeypatch.setattr(grid_step_log.Path, "write_text", lambda self, text: None)
    for bad in ("oldtable", "oldrowprice", "bogus"):
        monkeypatch.setattr(sys, "argv", ["grid_step_log.py", "--variants", bad])
        with pytest.raises(SystemExit, match=f"unknown variant '{bad}'"):
            grid_step_log.main()
    monkeypatch.setattr(sys, "argv", ["grid_step_log.py", "--variants", "nolevel,placebo,plainprobe16"])
    grid_step_log.main()
    assert built == [["nolevel", "placebo", "plainprobe16"]]
