"""The embedded default model (SmolLM2-135M-Instruct), in the dtype served by default."""
import pytest

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.engine import LLMEngine
from workers.model_store import ModelNotFoundError, resolve_model
from workers.workloads import sharegpt_prompts

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def engine(default_model_dir):
    return LLMEngine(EngineConfig())


def test_real_output(engine):
    r = engine.generate(["The capital of Germany is"], SamplingParams(max_tokens=4, temperature=0))[0]
    assert "Berlin" in r.text


def test_missing_model_is_a_clear_error():
    with pytest.raises(ModelNotFoundError, match="not found"):
        resolve_model("/no/such/model")


def _require_invariant_gemm(engine) -> None:
    """Token identity across batches needs GEMM rows that do not depend on the row count (see
    workers/gemm_invariance.py); where neither the plain nor a split GEMM has that property, say so instead of
    asserting what cannot hold."""
    if engine.gemm_rows_invariant is False:  # checked at start-up
        pytest.xfail(f"this CPU's {engine.model.dtype} GEMM rows depend on the row count even split along their "
                     "inputs: greedy output depends on the batch (docs/architecture.md, batch-invariant verify path)")


def test_greedy_ngram_speculation_is_token_identical_on_sharegpt(engine):
    """20 ShareGPT prompts x 64 new tokens: n-gram k=4 and k=8 equal no speculation, token for token."""
    _require_invariant_gemm(engine)
    prompts = sharegpt_prompts(20, seed=0)
    sp = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)
    base = [r.output_ids for r in engine.generate(prompts, sp, chat=True)]
    for k in (4, 8):
        spec_engine = LLMEngine(EngineConfig(spec=SpecConfig(method="ngram", k=k)))
        got = [r.output_ids for r in spec_engine.generate(prompts, sp, chat=True)]
        same = sum(a == b for a, b in zip(base, got))
        assert same == 20, f"k={k}: {same}/20 identical"
        assert spec_engine.spec_stats.num_accepted_tokens > 0


def test_trained_draft_is_lossless_with_fixed_and_adaptive_verification(engine):
    """The shipped draft (workers/assets): greedy output equals no speculation with fixed k=4 and with
    adaptive verification (k=7), and it is a trained draft, not a random one."""
    prompts = sharegpt_prompts(20, seed=0)
    sp = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)
    base = [r.output_ids for r in engine.generate(prompts, sp, chat=True)]
    for spec in (SpecConfig(method="draft", k=4),
                 SpecConfig(method="draft", k=7, verify="adaptive", cost_table_budget_s=20)):
        eng = LLMEngine(EngineConfig(spec=spec))
        got = [r.output_ids for r in eng.generate(prompts, sp, chat=True)]
        same = sum(a == b for a, b in zip(base, got))
        assert same == 20, f"{spec.verify}: {same}/20 identical"
        if spec.verify == "fixed":
            assert eng.spec_stats.acceptance_per_position[0] > 0.3  # a random 2-layer draft scores ~0


def test_second_turn_prefills_only_new_tokens(engine):
    first = " ".join(sharegpt_prompts(8, seed=3))[:4000]
    sp = SamplingParams(max_tokens=8, temperature=0)
    r1 = engine.generate([first], sp, chat=True)[0]
    turn2 = engine.encode_prompt(first, chat=True) + r1.output_ids + engine.encode_prompt("Summarise.", chat=True)
    r2 = engine.generate([turn2], sp)[0]
    assert r2.num_cached_tokens >= len(turn2) - 2 * 128 - 16
    ttft1 = r1.first_token_time - r1.arrival
    ttft2 = r2.first_token_time - r2.arrival
    assert ttft2 < ttft1 / 2, (ttft1, ttft2)
    cold = LLMEngine(EngineConfig(enable_prefix_caching=False)).generate([turn2], sp)[0]
    assert cold.output_ids == r2.output_ids


def test_stop_strings_and_streamed_deltas(engine):
    rid = engine.add_request("Count from one to ten in words: one, two,", SamplingParams(
        max_tokens=40, temperature=0, stop=[" six"]))
    text, last = "", None
    while engine.has_unfinished():
        for o in engine.step():
            if o.req_id == rid:
                text += o.delta_text
                last = o
    assert last.finished and last.finish_reason == "stop"
    assert text == last.request.text and "six" not in text and "five" in text


def test_two_tensor_parallel_shards_equal_one_in_float32():
    """SmolLM2's 3 KV heads split unevenly (2 + 1) over 2 shards (gloo, local processes): in fp32 the greedy
    output equals one shard. In bf16 outputs drift (measured 4/20 identical over 64 tokens, docs/architecture.md):
    the same class of difference tensor parallelism has on GPUs."""
    prompts = sharegpt_prompts(6, seed=1)
    sp = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    outs = []
    for tp in (1, 2):
        eng = LLMEngine(EngineConfig(dtype="float32", device="cpu", tensor_parallel_size=tp, kv_cache_memory_gb=0.25))
        outs.append([r.output_ids for r in eng.generate(prompts, sp, chat=True)])
        if eng.shard_peers is not None:
            eng.shard_peers.close()
    assert outs[1] == outs[0]
