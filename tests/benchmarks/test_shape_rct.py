"""The randomized shape comparison's summary on exact step records (the benchmark itself runs the real engine,
not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from shape_rct import summarise  # noqa: E402


def _step(fixed: bool, mixed: bool, prefill: int, requests: int, verified: int, emitted: int, forward_s: float) -> dict:
    return {"fixed": fixed, "mixed": mixed, "prefill": prefill, "requests": requests, "verified": verified,
            "emitted": emitted, "forward_s": forward_s}


def test_the_arms_difference_is_read_with_prefill_and_requests_held_apart():
    """Forward = 50 ms + 0.5 ms per prefill token + 2 ms per request, + 30 ms in the adaptive arm, which emits 10
    more tokens: the least-squares difference recovers 30 ms and 10 tokens though the arms' prefill differs."""
    log = []
    for i, (prefill, requests) in enumerate([(100, 30), (200, 31), (0, 32), (150, 28), (50, 29), (120, 30)]):
        for fixed in (False, True):
            extra = 0.0 if fixed else 0.030
            forward = 0.050 + 0.0005 * (prefill + 20 * fixed) + 0.002 * requests + extra
            log.append(_step(fixed, True, prefill + 20 * fixed, requests, 20 if fixed else 40,
                             requests + (10 if fixed else 20), forward))
    out = summarise(log, min_requests=0)["with_prefill"]
    assert out["adaptive_minus_fixed"]["forward_ms"] == pytest.approx(30.0, abs=1e-6)
    assert out["adaptive_minus_fixed"]["tokens"] == pytest.approx(10.0, abs=1e-6)
    assert out["adaptive_minus_fixed"]["ms_per_extra_token"] == pytest.approx(3.0)
    assert out["arms"]["adaptive"]["steps"] == out["arms"]["fixed_k"]["steps"] == 6
    assert out["arms"]["fixed_k"]["verified_rows"] == 20


def test_steps_below_the_request_floor_and_kinds_without_both_arms_are_left_out():
    log = [_step(False, False, 0, 32, 40, 60, 0.2), _step(False, False, 0, 4, 8, 9, 0.05)]
    out = summarise(log, min_requests=16)
    assert out["pure_decode"]["arms"]["adaptive"]["steps"] == 1
    assert "adaptive_minus_fixed" not in out["pure_decode"]
    assert out["with_prefill"]["arms"] == {}
