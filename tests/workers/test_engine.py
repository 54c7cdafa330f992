"""Engine mechanics on tiny random models: losslessness, KV accounting, scheduling, errors."""
import pytest
import torch
from pydantic import ValidationError

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.engine import InvalidRequestError, LLMEngine
from workers.model_runner import pick_device, pick_dtype


def _engine(model, spec=None, **kw):
    return LLMEngine(EngineConfig(model=str(model), spec=spec or SpecConfig(), **kw))


PROMPTS = [[1, 5, 6, 7, 5, 6, 7, 5, 6], [3, 4], [9, 10, 11, 12, 13, 14, 15, 9, 10, 11] * 5, [7] * 40]


def _kv_gb(blocks: int) -> float:
    """KV memory for `blocks` blocks of 16 tokens of the tiny models (128 KV values per token: 256 B in bf16,
    512 B in fp32, as `dtype="auto"` picks on the device the engine picks: bf16 on CUDA whatever the CPU)."""
    dtype = pick_dtype("auto", pick_device("auto"))
    return blocks * 16 * 128 * torch.tensor([], dtype=dtype).element_size() / 2**30


def _greedy(n=24):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def test_greedy_with_speculation_equals_without(tiny_target, tiny_draft):
    base = [r.output_ids for r in _engine(tiny_target).generate(PROMPTS, _greedy())]
    for spec in (SpecConfig(method="ngram", k=4), SpecConfig(method="ngram", k=8, ngram_min=2),
                 SpecConfig(method="draft", k=3, draft_model=str(tiny_draft)),
                 SpecConfig(method="draft", k=5, draft_model=str(tiny_target))):
        eng = _engine(tiny_target, spec)
        assert [r.output_ids for r in eng.generate(PROMPTS, _greedy())] == base, spec
        assert eng.spec_stats.num_drafts > 0
        assert eng.runner.pool.num_used == 0


def test_the_proposer_is_not_called_in_steps_where_no_request_may_draft(tiny_target, tiny_draft):
    """Every other step offers no request a draft (as an idle adaptive plan does): the proposer is not called
    then, and catches up on the tokens it missed by the larger delta the next time; output is unchanged."""
    base = [r.output_ids for r in _engine(tiny_target).generate(PROMPTS, _greedy())]
    for spec in (SpecConfig(method="ngram", k=4), SpecConfig(method="draft", k=3, draft_model=str(tiny_draft))):
        eng = _engine(tiny_target, spec)
        schedule, steps, calls = eng.scheduler.schedule, [0], []
        propose = eng.proposer.propose

        def every_other(k, adaptive_drafts=False):
            plan = schedule(k, adaptive_drafts)
            steps[0] += 1
            if steps[0] % 2:
                plan.decodes = [(r, 0) for r, _ in plan.decodes]
            return plan

        eng.scheduler.schedule = every_other
        eng.proposer.propose = lambda batch: calls.append(steps[0]) or propose(batch)
        assert [r.output_ids for r in eng.generate(PROMPTS, _greedy())] == base, spec.method
        assert calls and all(step % 2 == 0 for step in calls)
        assert eng.spec_stats.num_drafts > 0


def test_identical_draft_accepts_everything(tiny_target):
    eng = _engine(tiny_target, SpecConfig(method="draft", k=4, draft_model=str(tiny_target)))
    eng.generate(PROMPTS, _greedy(30))
    s = eng.spec_stats
    assert s.acceptance_rate == 1.0
    assert s.acceptance_per_position == [1.0] * len(s.acceptance_per_position)
    assert s.mean_acceptance_length > 4.0  # capped only where max_tokens truncates the last drafts


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_target):
    sp = SamplingParams(max_tokens=16, temperature=1.0, seed=1234, ignore_eos=True)
    alone = _engine(tiny_target).generate([PROMPTS[0]], sp)[0].output_ids
    crowd = _engine(tiny_target).generate(PROMPTS, [sp] + [SamplingParams(max_tokens=16, seed=i) for i in range(3)])
    assert crowd[0].output_ids == alone
    other = _engine(tiny_target).generate([PROMPTS[0]], sp.model_copy(update={"seed": 99}))[0].output_ids
    assert other != alone


def test_max_tokens_stop_ids_and_finish_reasons(tiny_target):
    eng = _engine(tiny_target)
    r = eng.generate([PROMPTS[0]], _greedy(5))[0]
    assert r.num_output == 5 and r.finish_reason == "length"
    first = r.output_ids[0]
    r2 = eng.generate([PROMPTS[0]], SamplingParams(max_tokens=5, temperature=0, stop_token_ids=[first]))[0]
    assert r2.output_ids == [first] and r2.finish_reason == "stop"


def test_abort_frees_blocks_and_others_continue(tiny_target):
    eng = _engine(tiny_target, SpecConfig(method="ngram", k=4))
    a = eng.add_request(PROMPTS[2], _greedy(50))
    b = eng.add_request(PROMPTS[3], _greedy(20))
    eng.step()
    eng.step()
    assert eng.abort(a)
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    outs += eng.step()
    done = {o.req_id: o for o in outs if o.finished}
    assert done[b].finish_reason == "length" and done[b].request.num_output == 20
    assert eng.runner.pool.num_used == 0
    assert not eng.abort(a)  # already gone


def test_bad_input_is_a_clear_error_and_engine_keeps_serving(tiny_target):
    eng = _engine(tiny_target, max_model_len=64)
    ok = eng.add_request(PROMPTS[0], _greedy(8))
    with pytest.raises(InvalidRequestError, match="empty"):
        eng.add_request([], _greedy())
    with pytest.raises(InvalidRequestError, match="context"):
        eng.add_request([5] * 64, _greedy())
    with pytest.raises(InvalidRequestError, match="token ids"):
        eng.add_request([99999], _greedy())
    for bad in ({"temperature": -1}, {"top_p": 0}, {"temperature": float("nan")}, {"max_tokens": 0},
                {"top_k": -2}, {"stop": [""]}, {"stop": ["x"] * 1000}, {"bogus": 1}):
        with pytest.raises(ValidationError):
            SamplingParams(**bad)
    done = []
    while eng.has_unfinished():
        done += [o for o in eng.step() if o.finished]
    assert [o.req_id for o in done] == [ok] and done[0].request.num_output == 8


def test_queues_and_preempts_when_kv_runs_short(tiny_target):
    # 20 blocks of 16 tokens: 6 requests x (50 prompt + 60 output) need 42
    eng = _engine(tiny_target, SpecConfig(method="ngram", k=4), kv_cache_memory_gb=_kv_gb(20))
    assert eng.runner.pool.num_blocks == 20
    prompts = [PROMPTS[2]] * 6
    base = [r.output_ids for r in _engine(tiny_target).generate(prompts, _greedy(60))]
    res = eng.generate(prompts, _greedy(60))
    assert [r.output_ids for r in res] == base
    assert sum(r.num_preemptions for r in res) > 0
    assert eng.runner.pool.num_used == 0


def test_prefix_cache_reuses_turn_one_and_keeps_outputs(tiny_target):
    turn1 = [(i * 7) % 13 + 3 for i in range(300)]
    eng = _engine(tiny_target)
    r1 = eng.generate([turn1], _greedy(8))[0]
    turn2 = turn1 + r1.output_ids + [4, 5, 6, 7]
    r2 = eng.generate([turn2], _greedy(8))[0]
    assert r2.num_cached_tokens >= 256  # whole 128-token segments of turn 1 were not prefilled again
    cold = _engine(tiny_target, enable_prefix_caching=False).generate([turn2], _greedy(8))[0]
    assert cold.num_cached_tokens == 0
    assert r2.output_ids == cold.output_ids


def test_an_adaptive_engine_starts_with_a_kv_pool_too_small_for_the_largest_warm_up_step(tiny_target, tmp_path,
                                                                                          monkeypatch):
    """No table on disk and a pool of 200 blocks (the warm-up's 64 requests need 64 x 17): the warm-up
    measures what fits instead of failing the start with NoFreeBlocksError."""
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path))
    eng = _engine(tiny_target, SpecConfig(method="ngram", k=4, verify="adaptive", cost_table_budget_s=3),
                  kv_cache_memory_gb=_kv_gb(200))
    assert eng.runner.pool.num_blocks == 200
    assert max(r for r, _ in eng.adaptive.cost.seconds) <= 8  # 8 x 17 blocks fit, 16 x 17 do not
    base = [r.output_ids for r in _engine(tiny_target).generate(PROMPTS, _greedy())]
    assert [r.output_ids for r in eng.generate(PROMPTS, _greedy())] == base


def test_adaptive_verification_is_lossless_and_trims(tiny_target, tiny_draft, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path))  # the warm-up cost table is persisted there
    base = [r.output_ids for r in _engine(tiny_target).generate(PROMPTS, _greedy())]
    for spec in (SpecConfig(method="ngram", k=6, ngram_min=1, verify="adaptive", cost_table_budget_s=5),
                 SpecConfig(method="draft", k=4, draft_model=str(tiny_draft), verify="adaptive",
                            cost_table_budget_s=5)):
        eng = _engine(tiny_target, spec)
        assert [r.output_ids for r in eng.generate(PROMPTS * 3, _greedy())] == base * 3, spec.method
        assert eng.adaptive.offered_positions > 0
        assert eng.runner.pool.num_used == 0
        times = eng.stats()["step_times"]  # every step's time, split: forward, drafter, policy, the rest
        assert times["steps"] == eng.num_steps and times["policy_ms"] > 0 and times["forward_ms"] > 0
        parts = times["forward_ms"] + times["draft_ms"] + times["policy_ms"] + times["other_ms"]
        assert abs(parts - times["wall_ms"]) < 0.01 and times["other_ms"] > 0
        by_call = times["policy_ms_by_call"]  # the policy's time by the verifier's call, adding up to it
        assert set(by_call) == {"plan_depths", "trim", "learn", "observe_step"}
        assert abs(sum(by_call.values()) - times["policy_ms"]) < 0.01
    assert list((tmp_path / "cost_tables").glob("*.json"))  # persisted: a restart reuses it


def test_deep_adaptive_drafts_stay_in_pure_decode_steps_that_fit_the_rows_and_lose_nothing(tiny_target, tmp_path,
                                                                                           monkeypatch):
    """k above SpecConfig.k_under_load: deeper drafts only in pure decode steps whose decoding requests fit
    deep_draft_rows rows at that depth, and beside a prefill deeper than k_waiting only where they fit; greedy
    output as without speculation."""
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path))
    base = [r.output_ids for r in _engine(tiny_target).generate(PROMPTS, _greedy())]
    eng = _engine(tiny_target, SpecConfig(method="ngram", k=15, ngram_min=1, verify="adaptive", cost_table_budget_s=5,
                                          k_under_load=5, deep_draft_rows=40, k_waiting=3))
    assert (eng.scheduler.k_under_load, eng.scheduler.deep_rows, eng.scheduler.k_waiting) == (5, 40, 3)
    schedule, seen = eng.scheduler.schedule, []

    def recorded(k, adaptive_drafts=False):
        plan = schedule(k, adaptive_drafts)
        seen.extend((d, len(plan.decodes), bool(plan.prefills)) for _, d in plan.decodes)
        return plan

    eng.scheduler.schedule = recorded
    assert [r.output_ids for r in eng.generate(PROMPTS, _greedy())] == base
    assert all(d <= (min(5, max(3, 40 // n - 1)) if mixed else max(5, min(15, 40 // n - 1))) for d, n, mixed in seen)
    assert any(d > 5 for d, _, _ in seen)  # deep where the rows fit


def test_the_engine_marks_each_request_whose_draft_the_trim_cut(tiny_target, tmp_path, monkeypatch):
    """`Request.last_cut`, which the scheduler's draft reservation reads: set in every decode step, True only
    where the trim verified fewer drafts than were drafted."""
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path))
    eng = _engine(tiny_target, SpecConfig(method="ngram", k=6, ngram_min=1, verify="adaptive", cost_table_budget_s=5))
    expected = []

    def cut_the_first_draft(proposal, plan) -> None:  # a trim that cuts the first request's draft only
        drafted = proposal.num_drafts.tolist()
        proposal.num_drafts[0] = 0
        expected.append([(req, b == 0 and d > 0) for b, ((req, _), d) in enumerate(zip(plan.decodes, drafted))])

    eng.adaptive.trim = cut_the_first_draft
    for p in PROMPTS:
        eng.add_request(p, _greedy())
    checked = 0
    while eng.has_unfinished():
        before = len(expected)
        eng.step()
        if len(expected) > before:
            assert [req.last_cut for req, _ in expected[-1]] == [cut for _, cut in expected[-1]]
            checked += 1
    assert checked > 0 and any(cut for step in expected for _, cut in step)
    assert any(not cut for step in expected for _, cut in step)
