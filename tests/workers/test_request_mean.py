"""The depth plan's mean estimate, balanced over recent requests (workers/request_mean.py)."""
import torch

from workers.request_mean import PRIOR_CAP, PRIOR_REQUESTS, RequestBalancedMean

K = 3


def _draft(mean: RequestBalancedMean, req_ids: list[str], p: float, depth: int = K) -> torch.Tensor:
    B = len(req_ids)
    drafted = (torch.arange(K)[None, :] < depth).float().expand(B, K)
    return mean.add(req_ids, torch.full((B, K), p), drafted, torch.full((K,), -1.0))


def test_one_request_probed_again_and_again_cannot_stand_for_the_batch():
    """The case it was built for: a batch drafted at 0.33, then only probes of one request at 0.1. A running mean
    over positions at rate 0.1 would have fallen to ~0.2 after 8 probes; here that request weighs as one of 16."""
    mean = RequestBalancedMean(K)
    batch = [f"r{i}" for i in range(PRIOR_REQUESTS)]
    for _ in range(PRIOR_CAP):
        _draft(mean, batch, 0.33)
    for _ in range(50):
        value = _draft(mean, ["probe"], 0.1, depth=1)
    # the probe displaced the least recently drafted request; it weighs PRIOR_CAP like the 15 others
    assert abs(float(value[0]) - (15 * 0.33 + 0.1) / 16) < 1e-6
    assert torch.allclose(value[1:], torch.tensor(0.33))  # it drafted position 1 only


def test_a_request_weighs_its_drafted_positions_up_to_the_cap():
    mean = RequestBalancedMean(K)
    for _ in range(PRIOR_CAP):
        _draft(mean, ["long"], 0.4)
    value = _draft(mean, ["new"], 0.1)  # one position each against the long request's PRIOR_CAP
    assert abs(float(value[0]) - (PRIOR_CAP * 0.4 + 0.1) / (PRIOR_CAP + 1)) < 1e-6


def test_positions_no_remembered_request_drafted_keep_the_fallback():
    mean = RequestBalancedMean(K)
    value = _draft(mean, ["a", "b"], 0.5, depth=1)
    assert value.tolist() == [0.5, -1.0, -1.0]


def test_the_least_recently_drafted_request_is_forgotten_first():
    mean = RequestBalancedMean(K, requests=2)
    _draft(mean, ["a"], 0.9)
    _draft(mean, ["b"], 0.1)
    _draft(mean, ["a"], 0.9)  # a drafted again: b is now the least recent
    value = _draft(mean, ["c"], 0.3)  # replaces b
    assert set(mean.rows) == {"a", "c"}
    assert abs(float(value[0]) - (2 * 0.9 + 0.3) / 3) < 1e-6
