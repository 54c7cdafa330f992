"""The closed-loop benchmark, drained and sustained, on a real (tiny) engine."""
from workers.bench import run_ours, sustained_plan, varied_lengths
from workers.config import EngineConfig
from workers.engine import LLMEngine

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 3], [4, 5, 6], [7, 8, 9, 10]]


def _engine(model) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model), dtype="float32", kv_cache_memory_gb=0.05))


def test_drained_run_serves_every_prompt_to_its_end(tiny_target):
    r = run_ours(_engine(tiny_target), PROMPTS[:4], 3, 8)
    assert r["output_tokens"] == 32 and r["num_requests"] == 4


def test_sustained_run_stops_with_every_slot_busy_and_leaves_the_engine_clean(tiny_target):
    engine = _engine(tiny_target)
    # 3 slots of 8 tokens: a prefill step emits 3, then 3 per step; the first wave ends at 24 tokens and is
    # refilled at once (3 more prefills), and the run stops at the first step with >= 36 tokens out
    r = run_ours(engine, PROMPTS, 3, 8, stop_after_tokens=36)
    assert r["output_tokens"] == 36 and r["num_requests"] == 6
    assert r["prompt_tokens"] == sum(map(len, PROMPTS))  # the prefill work the window paid for
    assert not engine.has_unfinished() and not engine.requests
    assert engine.runner.pool.num_used == 0  # the aborted requests' KV blocks are back
    # the prompt list is cycled rather than running dry
    r = run_ours(engine, PROMPTS[:2], 2, 4, stop_after_tokens=24)
    assert r["output_tokens"] == 24 and r["num_requests"] == 6


def test_each_prompt_may_have_its_own_length(tiny_target):
    r = run_ours(_engine(tiny_target), PROMPTS[:3], 2, [2, 5, 3])
    assert r["output_tokens"] == 10 and r["num_requests"] == 3 and r["prompt_tokens"] == 9


def test_sustained_lengths_vary_around_the_mean_and_the_supply_covers_the_shortest():
    lengths = varied_lengths(2000, 48, seed=3)
    assert lengths == varied_lengths(2000, 48, seed=3)  # every configuration gets the same draw
    assert min(lengths) == 16 and max(lengths) == 80 and abs(sum(lengths) / 2000 - 48) < 1.5
    count, stop = sustained_plan(32, 32, 48)
    assert stop == 32 * 48 + 16 * 48
    assert count >= stop // 16 + 32  # every request at the shortest length: still no prompt repeats
