"""profile_steps' account of the adaptive engine's cuts, on exact records (the benchmark runs the real engine,
not in CI)."""
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from profile_steps import cut_report  # noqa: E402


def test_cut_drafts_are_scored_against_what_the_request_emitted_later():
    req = SimpleNamespace(tokens=[1, 2, 3, 4, 5, 6, 7, 8])  # the request's tokens at its end
    drafts = [
        (req, 2, [3, 4, 5, 9], 1, True),  # 3 would have matched, 1 verified: accepted 1
        (req, 4, [5, 6, 7, 8, 9], 5, False),  # 4 match (the 5th runs past its end), all verified
        (req, 6, [0, 8], 2, False),  # nothing matches
    ]
    report = cut_report(drafts, fixed_k=2)
    assert "steps that also prefill: drafted 4, verified 1, accepted 1 (all drafts verified: 3, the first 2: 2 of 2)" in report
    assert "decode-only steps: drafted 7, verified 7, accepted 4 (all drafts verified: 4, the first 2: 2 of 4)" in report
