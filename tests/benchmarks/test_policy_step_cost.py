"""policy_step_cost's step: the verifier's four calls on its synthetic tables, each timed, with the plan and the
trim in force, for a draft model and for n-gram drafts (a few hot steps; the benchmark itself is not run in CI)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from policy_step_cost import _req, _step, _verifier  # noqa: E402


def test_a_step_times_each_call_and_the_policy_drafts_and_trims():
    av, gen = _verifier("draft"), torch.Generator().manual_seed(0)
    reqs = [_req(f"r{i}") for i in range(4)]
    steps = [_step(av, reqs, gen, lambda: None) for _ in range(30)]
    assert all(set(t) == {"plan", "trim", "learn", "observe"} and min(t.values()) > 0 for t in steps)
    assert 0 < av.verified_positions < av.drafted_positions  # drafts are made, and the trim cuts some
    assert av.estimator.labelled(0)[0].shape[0] > 0  # the outcomes were learned


def test_an_ngram_step_trims_and_learns_the_table():
    av, gen = _verifier("ngram"), torch.Generator().manual_seed(0)
    reqs = [_req(f"r{i}") for i in range(4)]
    steps = [_step(av, reqs, gen, lambda: None) for _ in range(30)]
    assert all(set(t) == {"plan", "trim", "learn", "observe"} for t in steps)
    assert 0 < av.verified_positions <= av.drafted_positions == 30 * 4 * 7  # every draft offered; n-gram drafts are free
    assert av.estimator.tot.sum() > 0  # the outcomes were learned
