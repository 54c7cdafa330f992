import torch

from workers.estimators import LogisticEstimator, NgramEstimator, calibration, history_bucket


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
    assert [len(est.labelled(i)[0]) for i in range(3)] == [2, 1, 0]
    assert est.labelled(1)[1].tolist() == [0.0]


def test_ngram_table_learns_rates_by_match_length():
    est = NgramEstimator(k=2, max_match=4)
    feats = torch.tensor([[[4.0], [4.0]]] * 50 + [[[1.0], [1.0]]] * 50)
    accepted = torch.tensor([2] * 45 + [0] * 5 + [0] * 40 + [1] * 10)
    est.observe(feats, torch.full((100,), 2), accepted)
    p = est.predict(torch.tensor([[[4.0], [4.0]], [[1.0], [1.0]]]))
    assert p[0, 0] > 0.85 and p[1, 0] < 0.25 and p[0, 1] > 0.85


def test_ngram_table_tells_requests_apart_by_their_last_verification():
    """Same match length, two kinds of request: one whose last draft was accepted whole (bucket 3), one whose
    last draft was rejected at once (bucket 1). Match length alone would rate both at the mix."""
    est = NgramEstimator(k=3, max_match=4)
    hot, cold = [[2.0, 3.0]] * 3, [[2.0, 1.0]] * 3
    feats = torch.tensor([hot] * 50 + [cold] * 50)
    est.observe(feats, torch.full((100,), 3), torch.tensor([3] * 50 + [0] * 50))
    p = est.predict(torch.tensor([hot, cold, [[2.0, 0.0]] * 3]))
    assert p[0].min() > 0.85 and p[1, 0] < 0.15
    assert 0.3 < p[2, 0] < 0.7  # no history yet: the overall rate of the position
    assert [history_bucket(x) for x in (None, (3, 0), (3, 2), (7, 5), (2, 2), (1, 1))] == [0, 1, 2, 3, 3, 2]


def test_ngram_table_learns_the_same_from_the_features_it_predicted_from():
    """The trim predicts from a proposal's features and learning observes that very tensor (the cells are kept
    for it): the table learns what it learns from a copy, rows that verified nothing are labelled nowhere."""
    g = torch.Generator().manual_seed(3)
    feats = torch.cat([torch.randint(0, 20, (6, 1, 1), generator=g).float().expand(6, 4, 1),
                       torch.randint(0, 4, (6, 1, 1), generator=g).float().expand(6, 4, 1)], -1).contiguous()
    verified, accepted = torch.tensor([4, 0, 2, 3, 0, 1]), torch.tensor([1, 0, 2, 0, 0, 1])
    kept, fresh = NgramEstimator(k=4, max_match=16), NgramEstimator(k=4, max_match=16)
    kept.predict(feats)
    kept.observe(feats, verified, accepted)
    fresh.observe(feats.clone(), verified, accepted)
    assert (kept.tot == fresh.tot).all() and (kept.acc == fresh.acc).all()
    assert kept.tot.sum() == 2 + 2 + 1 + 1  # positions labelled: min(verified, accepted + 1) per row
    assert torch.equal(kept.predict(feats), fresh.predict(feats.clone()))


def test_ngram_table_forgets_old_outcomes_so_a_new_workload_is_followed():
    est = NgramEstimator(k=1, max_match=4, memory=200.0)
    feats = torch.tensor([[[3.0]]] * 100)
    for _ in range(10):  # a long history where the first position is mostly rejected
        est.observe(feats, torch.ones(100, dtype=torch.long), torch.tensor([0] * 90 + [1] * 10))
    assert float(est.tot.sum()) <= 200.0 + 1e-3
    assert est.predict(feats[:1])[0, 0] < 0.2
    for _ in range(8):  # the workload changes: now it is mostly accepted (old weight (2/3)^8)
        est.observe(feats, torch.ones(100, dtype=torch.long), torch.tensor([1] * 90 + [0] * 10))
    assert est.predict(feats[:1])[0, 0] > 0.8


def test_calibration_report_shapes():
    rep = calibration(torch.tensor([0.1, 0.15, 0.9, 0.95]), torch.tensor([0.0, 0.0, 1.0, 1.0]), bins=2)
    assert rep["brier"] < 0.02 and [r["n"] for r in rep["reliability"]] == [2, 2]


def test_logistic_refits_by_drafts_while_warming_up_then_by_steps():
    """Warm-up refits count verified drafts (ready as soon with a batch of 16 as with 1); after them a refit
    comes every `refit_every` steps that verified any, whatever the batch (one every ~6 steps at c=16 cost
    ~0.4 ms a step)."""
    g = torch.Generator().manual_seed(1)
    est = LogisticEstimator(k=2, num_features=3, refit_every=32, warmup_refits=3)
    for _ in range(6):  # 6 steps x 16 drafts: 96 = 3 x 32 verified drafts
        feats, _, acc = _simulate(16, 2, g)
        est.observe(feats, torch.full((16,), 2), acc)
    assert est.refits == 3 and est.ready
    for step in range(1, 65):
        feats, _, acc = _simulate(16, 2, g)
        verified = torch.full((16,), 2) if step % 2 else torch.zeros(16, dtype=torch.long)  # every other step
        est.observe(feats, verified, acc)
    assert est.refits == 4  # 32 of the 64 steps verified: one refit, not 16
