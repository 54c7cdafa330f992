"""Sampled output with speculation follows the target's distribution: end to end through the engine, a tiny
target and a deliberately different draft, 20,000 sampled requests, chi-square against exact probabilities."""
import itertools

import pytest
import torch
from scipy import stats

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.engine import LLMEngine

PROMPT = [3, 4, 5, 3, 4]
N = 20_000


def _exact_joint(model_dir) -> torch.Tensor:
    """P(x2, x3) after PROMPT (x1 marginalised), computed from the HF model in float32."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    V = m.config.vocab_size
    with torch.no_grad():
        seqs = torch.tensor([PROMPT + [a, b] for a, b in itertools.product(range(V), range(V))])
        logp = m(seqs).logits.float().log_softmax(-1)  # [V*V, L, V]
    L = len(PROMPT)
    p1 = logp[0, L - 1].exp()  # [V]
    p2 = logp[::V, L].exp()  # [V(x1), V]
    p3 = logp[:, L + 1].exp().view(V, V, V)  # [x1, x2, x3]
    return (p1[:, None, None] * p2[:, :, None] * p3).sum(0)  # [x2, x3]


def _sample_joint(engine: LLMEngine, V: int) -> torch.Tensor:
    params = [SamplingParams(max_tokens=3, temperature=1.0, seed=s, ignore_eos=True) for s in range(N)]
    res = engine.generate([PROMPT] * N, params)
    counts = torch.zeros(V, V)
    for r in res:
        counts[r.output_ids[1], r.output_ids[2]] += 1
    return counts


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_speculative_sampling_matches_target_distribution(tiny_target, tiny_draft, method):
    spec = SpecConfig(method=method, k=3, ngram_min=1, draft_model=str(tiny_draft) if method == "draft" else None)
    eng = LLMEngine(EngineConfig(model=str(tiny_target), dtype="float32", spec=spec, max_num_seqs=2048,
                                 max_num_batched_tokens=16384, enable_prefix_caching=False))
    counts = _sample_joint(eng, eng.model.vocab_size)
    s = eng.spec_stats
    assert s.num_drafts > 0 and 0 < s.acceptance_rate < 1  # both accept and reject paths ran
    exact = _exact_joint(tiny_target).double()
    keep = exact * N >= 5  # chi-square validity; the rest pooled into one cell
    obs = torch.cat([counts.double()[keep], counts.double()[~keep].sum()[None]])
    exp = torch.cat([exact[keep], exact[~keep].sum()[None]]) * N
    p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    assert p > 1e-3, f"p={p:.2e}"
