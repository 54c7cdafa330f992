import torch

from workers.estimators import LogisticEstimator, NgramEstimator, calibration


def _simulate(n, k, gen):
    """Drafts whose true conditional acceptance is sigmoid(6 * top1 - 3); outcomes with full verification."""
    feats = torch.rand(n, k, 3, generator=gen)
    p_true = torch.sigmoid(6 * feats[..., 0] - 3)
    ok = torch.rand(n, k, generator=gen) < p_true
    accepted = ok.long().cumprod(1).sum(1)
    return feats, p_true, accepted


def test_logistic_verifies_full_drafts_until_warm_then_learns_calibrated_probabilities():
    g = torch.Generator().manual_seed(0)
    est = LogisticEstimator(k=4, num_features=3, refit_every=200, warmup_refits=3)
    feats, _, acc = _simulate(100, 4, g)
    assert torch.equal(est.predict(feats), torch.ones(100, 4))  # not warm: verify everything
    for _ in range(40):
        feats, _, acc = _simulate(100, 4, g)
        est.observe(feats, torch.full((100,), 4), acc)
    assert est.ready
    feats, p_true, acc = _simulate(4000, 4, g)
    pred = est.predict(feats)
    # held-out calibration on position 1 (always labelled): close to the truth, better than a constant
    label = (acc > 0).float()
    ours = calibration(pred[:, 0], label)["brier"]
    const = calibration(torch.full_like(label, float(label.mean())), label)["brier"]
    assert ours < const - 0.02
    assert (pred[:, 0] - p_true[:, 0]).abs().mean() < 0.06


def test_labels_only_positions_that_were_verified_after_accepted_prefix():
    est = LogisticEstimator(k=3, num_features=1, refit_every=10**9)
    feats = torch.zeros(2, 3, 1)
    est.observe(feats, verified=torch.tensor([3, 1]), accepted=torch.tensor([1, 1]))
    # request 0: positions 1 (accepted) and 2 (rejected) labelled, 3 unseen; request 1: only position 1
    assert [len(torch.cat(x)) if x else 0 for x in est._x] == [2, 1, 0]
    assert torch.cat(est._y[1]).tolist() == [0.0]


def test_ngram_table_learns_rates_by_match_length():
    est = NgramEstimator(k=2, max_match=4)
    feats = torch.tensor([[[4.0], [4.0]]] * 50 + [[[1.0], [1.0]]] * 50)
    accepted = torch.tensor([2] * 45 + [0] * 5 + [0] * 40 + [1] * 10)
    est.observe(feats, torch.full((100,), 2), accepted)
    p = est.predict(torch.tensor([[[4.0], [4.0]], [[1.0], [1.0]]]))
    assert p[0, 0] > 0.85 and p[1, 0] < 0.25 and p[0, 1] > 0.85


def test_calibration_report_shapes():
    rep = calibration(torch.tensor([0.1, 0.15, 0.9, 0.95]), torch.tensor([0.0, 0.0, 1.0, 1.0]), bins=2)
    assert rep["brier"] < 0.02 and [r["n"] for r in rep["reliability"]] == [2, 2]
