"""Mixed prefill/decode stress: 200 requests, prompts of 1..2,000 tokens, arriving while others decode,
speculation on (ragged verify lengths next to prefill chunks: the dangerous path of seed-notes section 5)."""
import random

import pytest

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.engine import LLMEngine


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_mixed_prefill_decode_stress_completes_and_frees_every_block(tiny_target, tiny_draft, method):
    rng = random.Random(0)
    spec = SpecConfig(method=method, k=4, draft_model=str(tiny_draft) if method == "draft" else None)
    eng = LLMEngine(EngineConfig(model=str(tiny_target), spec=spec, max_num_seqs=32, max_num_batched_tokens=512,
                                 kv_cache_memory_gb=0.004))  # ~1,000 blocks: pressure, queueing, preemption
    lengths = [1, 2, 2000] + [rng.randint(1, 2000) for _ in range(197)]
    pending = [([rng.randrange(3, 16) for _ in range(n)],
                SamplingParams(max_tokens=rng.randint(1, 40), temperature=rng.choice([0.0, 0.8]), seed=i,
                               ignore_eos=True))
               for i, n in enumerate(lengths)]
    finished, ids, steps = {}, [], 0
    while pending or eng.has_unfinished():
        for _ in range(rng.randint(0, 3)):  # arrivals while others decode
            if pending:
                prompt, sp = pending.pop()
                ids.append(eng.add_request(prompt, sp))
        for o in eng.step():
            if o.finished:
                finished[o.req_id] = o.request
        steps += 1
        assert steps < 20_000, "engine stopped making progress"
    assert sorted(finished) == sorted(ids) and len(ids) == 200
    assert all(r.finish_reason == "length" and r.num_output == r.params.max_tokens for r in finished.values())
    assert eng.runner.pool.num_used == 0
    assert eng.spec_stats.num_drafts > 0
