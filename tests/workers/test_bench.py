"""The closed-loop benchmark, drained and sustained, on a real (tiny) engine."""
import pytest

from workers.bench import run_ours, sustained_plan, varied_lengths
from workers.config import EngineConfig
from workers.engine import LLMEngine

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 3], [4, 5, 6], [7, 8, 9, 10]]


def _engine(model) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model), dtype="float32", kv_cache_memory_gb=0.05))


def test_drained_run_serves_every_prompt_to_its_end(tiny_target):
    r = run_ours(_engine(tiny_target), PROMPTS[:4], 3, 8)
    assert r["output_tokens"] == 32 and r["num_requests"] == 4


def test_token_window_stops_with_every_slot_busy_and_leaves_the_engine_clean(tiny_target):
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


def test_admission_window_serves_the_same_prompts_and_stops_when_one_more_would_enter(tiny_target):
    engine = _engine(tiny_target)
    # 3 slots, one token per request per step; the first prompt ends at step 4 and the 4th enters in its place
    # (step 5); the 2nd and 3rd end at step 8, when the 4th has 4 tokens: all 4 are in and a slot is free
    r = run_ours(engine, PROMPTS, 3, [4, 8, 8, 8, 8, 8], admit=4)
    assert r["num_requests"] == 4 and r["prompt_tokens"] == sum(map(len, PROMPTS[:4]))
    assert r["output_tokens"] == 4 + 8 + 8 + 4
    assert not engine.has_unfinished() and engine.runner.pool.num_used == 0  # the 4th was aborted
    assert run_ours(engine, PROMPTS[:1], 1, 5, admit=1)["output_tokens"] == 5  # c=1: the request's own end
    with pytest.raises(ValueError, match="admit"):
        run_ours(engine, PROMPTS[:2], 2, 4, admit=3)


def test_the_first_wave_is_untimed(tiny_target):
    engine = _engine(tiny_target)
    # the wave of 3 is in; the first refill (4th prompt, step 5) starts the clock; the 2nd ends at step 8 and
    # the 5th enters (step 9); the 3rd ends at step 9 and the run stops. Timed: steps 5-9, 4 + 5 + 5 + 1 tokens
    r = run_ours(engine, PROMPTS, 3, [4, 8, 9, 8, 8, 8], admit=5, untimed=3)
    assert r["output_tokens"] == 15 and r["num_requests"] == 2
    assert r["prompt_tokens"] == len(PROMPTS[3]) + len(PROMPTS[4])
    assert engine.latency.ttft and len(engine.latency.ttft) == 2  # the engine's statistics: the window's own
    with pytest.raises(ValueError, match="admit"):
        run_ours(engine, PROMPTS, 3, 4, admit=3, untimed=3)


def test_each_prompt_may_have_its_own_length(tiny_target):
    r = run_ours(_engine(tiny_target), PROMPTS[:3], 2, [2, 5, 3])
    assert r["output_tokens"] == 10 and r["num_requests"] == 3 and r["prompt_tokens"] == 9


def test_sustained_lengths_vary_around_the_mean():
    lengths = varied_lengths(2000, 48, seed=3)
    assert lengths == varied_lengths(2000, 48, seed=3)  # every configuration gets the same draw
    assert min(lengths) == 16 and max(lengths) == 80 and abs(sum(lengths) / 2000 - 48) < 1.5
    assert sustained_plan(32, 32) == (32, 64)  # the first wave untimed, then 32 more admitted
    assert sustained_plan(32, 32, waves=2) == (64, 96)  # two waves untimed


def test_a_mode_suffix_names_another_engine_of_the_same_configuration():
    from workers.bench import _spec

    assert _spec("ngram:7#copy", 4) == _spec("ngram:7", 4)
    assert _spec("ngram:7:adaptive#2", 4).verify == "adaptive"
    assert _spec("off#placebo", 4).method == "off"


@pytest.mark.parametrize("fresh", [False, True])
def test_fresh_prompts_give_each_repeat_its_own_sample(tiny_full_vocab, monkeypatch, fresh):
    """Repeats of one point serve the same prompts, or with `fresh_prompts` each its own (seed + repeat; the
    first repeat the same as without)."""
    from functools import partial

    from workers import bench

    monkeypatch.setattr(bench, "_ENGINES", {})
    monkeypatch.setattr(bench, "EngineConfig", partial(bench.EngineConfig, model=str(tiny_full_vocab)))
    served = []
    run = bench.run_ours
    monkeypatch.setattr(bench, "run_ours", lambda e, prompts, *a, **kw: served.append(prompts) or run(e, prompts, *a, **kw))
    runs = bench._run_plan(["repetitive"], [2], ["off"], 7, 4, [], 2, 0, "float32", 2, 0.05, sustained=True,
                           min_requests=4, fresh_prompts=fresh)
    timed = [p for p in served if len(p) == 6]  # the runs of the point (2 + 4 prompts), not the 2-prompt warm-ups
    assert len(runs) == 2 and len(timed) == 2
    assert (timed[0] != timed[1]) == fresh
    engine = next(iter(bench._ENGINES.values()))
    assert timed[0] == bench.point_sample(engine, "repetitive", 6, 4, 0, True)[0]
    assert timed[1] == bench.point_sample(engine, "repetitive", 6, 4, 1 if fresh else 0, True)[0]
