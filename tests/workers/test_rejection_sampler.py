import math

import pytest
import torch
from scipy import stats

from workers.rejection_sampler import SparseProbs, rejection_sample
from workers.sampling import BatchSampling, hash_uniform, logits_to_probs


def _sampling(B, temperature=1.0, top_k=0, top_p=1.0, seed0=0):
    return BatchSampling(torch.full((B,), temperature), torch.full((B,), top_k, dtype=torch.long),
                         torch.full((B,), top_p), torch.arange(seed0, seed0 + B, dtype=torch.long),
                         torch.zeros(B, dtype=torch.long))


def test_greedy_accepts_matching_prefix_then_emits_target_token():
    V, K = 6, 3
    logits = torch.full((2, K + 1, V), -5.0)
    target = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
    logits.scatter_(-1, target[..., None], 5.0)
    drafts = torch.tensor([[1, 2, 5], [1, 0, 3]])
    out, acc = rejection_sample(logits, drafts, torch.tensor([3, 3]), None, _sampling(2, temperature=0.0))
    assert acc.tolist() == [2, 1]
    assert out.tolist() == [[1, 2, 3, -1], [1, 2, -1, -1]]


def test_bonus_token_when_all_drafts_pass_and_verify_lengths_respected():
    V, K = 5, 3
    target = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    logits = torch.full((2, K + 1, V), -5.0).scatter_(-1, target[..., None], 5.0)
    drafts = torch.tensor([[0, 1, 2], [0, 1, 2]])
    out, acc = rejection_sample(logits, drafts, torch.tensor([3, 1]), None, _sampling(2, temperature=0.0))
    assert acc.tolist() == [3, 1]
    assert out.tolist() == [[0, 1, 2, 3], [0, 1, -1, -1]]  # row 2 verified only 1 draft: bonus from position 2


def test_no_drafts_is_plain_sampling():
    logits = torch.tensor([[[0.0, 10.0, 0.0]]])
    out, acc = rejection_sample(logits, torch.zeros(1, 0, dtype=torch.long), torch.tensor([0]), None,
                                _sampling(1, temperature=0.0))
    assert out.tolist() == [[1]] and acc.tolist() == [0]


def test_hash_uniform_is_deterministic_and_uniform():
    seeds = torch.arange(50_000, dtype=torch.long)
    u = hash_uniform(seeds, torch.zeros_like(seeds), 1)
    assert torch.equal(u, hash_uniform(seeds, torch.zeros_like(seeds), 1))
    assert not torch.equal(u, hash_uniform(seeds, torch.zeros_like(seeds), 2))
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert stats.kstest(u.numpy(), "uniform").pvalue > 1e-3


def _chi2_pvalue(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    expected = probs.double() * tokens.numel()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "sampled a token of probability 0"
    return float(stats.chisquare(counts[keep], expected[keep] * counts[keep].sum() / expected[keep].sum()).pvalue)


@pytest.mark.parametrize("sparse_draft", [False, True])
def test_first_token_follows_target_distribution(sparse_draft):
    """20,000 sampled steps with a draft that differs from the target: the emitted token ~ p (chi-square)."""
    torch.manual_seed(0)
    N, K, V = 20_000, 3, 8
    p_logits = torch.randn(K + 1, V) * 1.5
    q = torch.randn(K, V).mul(1.5).softmax(-1)
    if sparse_draft:  # the draft samples from its top-4 only: q exactly sparse
        top = q.topk(4, dim=-1)
        q = torch.zeros_like(q).scatter_(-1, top.indices, top.values)
        q = q / q.sum(-1, keepdim=True)
    g = torch.Generator().manual_seed(1)
    drafts = torch.stack([torch.multinomial(q[i], N, replacement=True, generator=g) for i in range(K)], 1)
    S = 4 if sparse_draft else V
    idx = q.topk(S, dim=-1).indices.expand(N, K, S)
    val = q.gather(-1, q.topk(S, dim=-1).indices).expand(N, K, S)
    logits = p_logits.expand(N, K + 1, V).contiguous()
    out, acc = rejection_sample(logits, drafts, torch.full((N,), K), SparseProbs(idx, val), _sampling(N))
    p = p_logits[0].softmax(-1)
    assert _chi2_pvalue(out[:, 0], p) > 1e-3
    assert 0 < acc.float().mean() < K  # some accepted, some rejected: both paths exercised


def test_deterministic_drafts_follow_target_distribution():
    """n-gram drafts (q one-hot): accepted with probability p(x), else residual p without x."""
    torch.manual_seed(0)
    N, V = 20_000, 6
    p_logits = torch.randn(2, V)
    drafts = torch.full((N, 1), 3)
    out, _ = rejection_sample(p_logits.expand(N, 2, V).contiguous(), drafts, torch.ones(N, dtype=torch.long),
                              None, _sampling(N))
    assert _chi2_pvalue(out[:, 0], p_logits[0].softmax(-1)) > 1e-3


def test_top_k_top_p_temperature_processing():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = logits_to_probs(logits, torch.tensor([1.0]), torch.tensor([2]), torch.tensor([1.0]))
    assert torch.allclose(p, torch.tensor([[0.625, 0.375, 0, 0]]))
    p = logits_to_probs(logits, torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0.8]))
    assert torch.allclose(p, torch.tensor([[0.625, 0.375, 0, 0]]))
    p = logits_to_probs(logits, torch.tensor([0.5]), torch.tensor([0]), torch.tensor([1.0]))
    expected = torch.tensor([0.5, 0.3, 0.15, 0.05]) ** 2
    assert torch.allclose(p[0], expected / expected.sum())
    assert math.isclose(float(p.sum()), 1.0, rel_tol=1e-6)
