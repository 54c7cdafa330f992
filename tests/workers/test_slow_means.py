"""The slow means per request count that an idle depth plan's running mean relaxes toward
(workers/slow_means.py)."""
import torch

from workers.slow_means import IDLE_RELAX, SLOW_MIN_POSITIONS, SLOW_RATE, SlowMeans


def test_a_request_count_seen_first_starts_from_the_running_mean_where_nothing_was_drafted():
    slow = SlowMeans()
    start = torch.tensor([0.3, 0.5, 0.6])
    slow.observe(4, torch.tensor([0.1, 0.0, 0.0]), torch.tensor([2.0, 0.0, 0.0]), start)
    moved = 0.3 + (1 - (1 - SLOW_RATE) ** 2) * (0.1 - 0.3)
    assert torch.allclose(slow._means[4], torch.tensor([moved, 0.5, 0.6]))
    assert slow._seen[4] == 2 and 1 not in slow._means  # one mean per request count


def test_an_idle_plan_moves_the_prior_toward_its_request_counts_slow_mean_once_it_has_seen_enough():
    slow, prior = SlowMeans(), torch.full((3,), 0.1)
    slow.observe(1, torch.full((3,), 0.4), torch.full((3,), SLOW_MIN_POSITIONS - 1.0), torch.full((3,), 0.4))
    assert slow.relaxed(1, prior, 8) is prior  # too few drafts behind that mean
    assert slow.relaxed(2, prior, 8) is prior  # no mean for that request count
    slow.observe(1, torch.full((3,), 0.4), torch.ones(3), torch.full((3,), 0.4))
    assert slow.relaxed(1, prior, 0) is prior
    expected = 0.1 + (1 - (1 - IDLE_RELAX) ** 8) * (0.4 - 0.1)
    assert torch.allclose(slow.relaxed(1, prior, 8), torch.full((3,), expected))

