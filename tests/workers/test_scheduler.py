"""The scheduler's draft budget while prompts wait (adaptive verification's reservation)."""
from workers.block_pool import BlockPool
from workers.config import SamplingParams
from workers.request import Request, Status
from workers.scheduler import Scheduler

K = 7


def _request(i: int, prompt_len: int) -> Request:
    return Request(f"r{i}", list(range(1, prompt_len + 1)), SamplingParams(), 0, frozenset(), 64, None)


def _scheduler(budget: int) -> Scheduler:
    return Scheduler(BlockPool(num_blocks=64, block_size=16), max_num_seqs=8, max_num_batched_tokens=budget,
                     max_model_len=512)


def _decoding(sched: Scheduler, i: int, last_verified: int, last_cut: bool = True) -> Request:
    """A running request whose next step decodes (all but its last token cached), that verified
    `last_verified` drafts in its last step (fewer than it drafted when `last_cut`)."""
    req = _request(i, 10)
    req.tokens.append(0)
    req.num_computed, req.status, req.last_verified = len(req.tokens) - 1, Status.RUNNING, last_verified
    req.last_cut = last_cut
    sched._grow(req, len(req.tokens))
    sched.running.append(req)
    return req


def test_while_prompts_wait_a_request_the_trim_cut_is_capped_at_one_more_than_last_verified():
    sched = _scheduler(budget=64)
    a, b = _decoding(sched, 0, last_verified=1), _decoding(sched, 1, last_verified=7)
    sched.waiting.append(_request(2, 60))
    plan = sched.schedule(K, adaptive_drafts=True)
    assert [(r.req_id, d) for r, d in plan.decodes] == [(a.req_id, 2), (b.req_id, K)]
    assert [(r.req_id, c) for r, c in plan.prefills] == [("r2", 64 - 3 - 8)]  # the rest of the budget


def test_a_request_whose_whole_draft_was_verified_is_not_capped_while_prompts_wait():
    # its short last draft was the proposer's (a short n-gram match), not the trim's: capping would only
    # shorten its next match, and at low load nothing needs the budget it would save
    sched = _scheduler(budget=64)
    a = _decoding(sched, 0, last_verified=1, last_cut=False)
    b = _decoding(sched, 1, last_verified=1, last_cut=True)
    sched.waiting.append(_request(2, 60))
    assert [(r.req_id, d) for r, d in sched.schedule(K, adaptive_drafts=True).decodes] == [(a.req_id, K),
                                                                                          (b.req_id, 2)]


def test_the_old_rule_caps_every_request_while_prompts_wait():
    sched = _scheduler(budget=64)
    sched.cap_only_cut = False
    a = _decoding(sched, 0, last_verified=1, last_cut=False)
    sched.waiting.append(_request(1, 60))
    assert sched.schedule(K, adaptive_drafts=True).decodes == [(a, 2)]


def test_fixed_k_is_not_capped_while_prompts_wait():
    sched = _scheduler(budget=64)
    a = _decoding(sched, 0, last_verified=1)
    sched.waiting.append(_request(1, 20))
    assert sched.schedule(K, adaptive_drafts=False).decodes == [(a, K)]


def test_no_prompt_waiting_means_no_cap():
    sched = _scheduler(budget=64)
    a = _decoding(sched, 0, last_verified=0)
    assert sched.schedule(K, adaptive_drafts=True).decodes == [(a, K)]


def test_drafts_never_take_the_last_of_the_budget_from_a_waiting_prompt():
    sched = _scheduler(budget=8)
    a = _decoding(sched, 0, last_verified=7)
    sched.waiting.append(_request(1, 20))
    plan = sched.schedule(K, adaptive_drafts=False)
    assert plan.decodes == [(a, 8 - 1 - 1)]  # one token kept for prefill (chunk_align 1)
    assert [c for _, c in plan.prefills] == [1]


def _deep_drafts_beside_a_prompt(prefill_share: float, k_under_load: int | None = None, k_waiting: int | None = None,
                                 deep_rows: int | None = None) -> tuple[list[int], list[int]]:
    """Four requests whose whole 15-token drafts were verified, a prompt waiting: (drafts, prefill chunks)."""
    sched = _scheduler(budget=64)
    sched.prefill_share, sched.k_under_load, sched.k_waiting = prefill_share, k_under_load, k_waiting
    sched.deep_rows = deep_rows
    for i in range(4):
        _decoding(sched, i, last_verified=15, last_cut=False)
    sched.waiting.append(_request(4, 60))
    plan = sched.schedule(15, adaptive_drafts=True)
    return [d for _, d in plan.decodes], [c for _, c in plan.prefills]


def test_while_prompts_wait_adaptive_drafts_share_half_the_budget_evenly():
    # deep drafts (k=15) of requests whose whole drafts were verified would take the budget from prefill
    assert _deep_drafts_beside_a_prompt(0.5) == ([7, 7, 7, 7], [64 - 32])  # (7 + 1) x 4 = 32
    assert _deep_drafts_beside_a_prompt(0.0) == ([15, 15, 15, 14], [1])  # before: drafts first (chunk_align 1)


def test_while_prompts_wait_adaptive_drafts_stop_at_the_k_under_load():
    assert _deep_drafts_beside_a_prompt(0.5, k_under_load=3) == ([3, 3, 3, 3], [64 - 16])
    assert _deep_drafts_beside_a_prompt(0.0, k_under_load=7) == ([7, 7, 7, 7], [64 - 32])


def test_while_prompts_wait_adaptive_drafts_pass_k_waiting_only_where_the_rows_fit():
    # 4 decoding requests: 16 rows fit 3 drafts each, 32 rows fit 7
    assert _deep_drafts_beside_a_prompt(0.5, k_under_load=7, k_waiting=4, deep_rows=16) == ([4, 4, 4, 4], [64 - 20])
    assert _deep_drafts_beside_a_prompt(0.5, k_under_load=7, k_waiting=4, deep_rows=32) == ([7, 7, 7, 7], [64 - 32])
    # with or without k_under_load
    assert _deep_drafts_beside_a_prompt(0.5, k_waiting=2, deep_rows=8) == ([2, 2, 2, 2], [64 - 12])
    assert _deep_drafts_beside_a_prompt(0.5, k_waiting=2) == ([7, 7, 7, 7], [64 - 32])  # no row bound: no bound
    assert _deep_drafts_beside_a_prompt(0.5, k_waiting=9, deep_rows=8) == ([7, 7, 7, 7], [64 - 32])  # the share binds
    sched = _scheduler(budget=64)
    sched.k_waiting, sched.deep_rows = 4, 32
    a = _decoding(sched, 0, last_verified=2, last_cut=False)
    sched.waiting.append(_request(1, 20))
    assert sched.schedule(2, adaptive_drafts=True).decodes == [(a, 2)]  # never above k
    sched = _scheduler(budget=512)
    sched.k_under_load, sched.deep_rows, sched.k_waiting = 7, 32, 4
    for i in range(8):
        _decoding(sched, i, last_verified=15, last_cut=False)
    assert [d for _, d in sched.schedule(15, adaptive_drafts=True).decodes] == [7] * 8  # nothing waits
    sched.waiting.append(_request(8, 60))
    assert [d for _, d in sched.schedule(15, adaptive_drafts=True).decodes] == [4] * 8  # 8 x 8 rows do not fit 32


def _pure_decode_drafts(requests: int, deep_rows: int | None, adaptive: bool = True) -> list[int]:
    """Drafts of k=15 for `requests` decoding requests, nothing waiting, beyond depth 7 only while rows fit."""
    sched = _scheduler(budget=512)
    sched.k_under_load, sched.deep_rows = 7, deep_rows
    for i in range(requests):
        _decoding(sched, i, last_verified=15, last_cut=False)
    return [d for _, d in sched.schedule(15, adaptive_drafts=adaptive).decodes]


def test_deep_drafts_only_while_the_decoding_rows_fit():
    assert _pure_decode_drafts(1, 32) == [15]
    assert _pure_decode_drafts(2, 32) == [15, 15]  # 2 x 16 rows = 32
    assert _pure_decode_drafts(3, 32) == [9, 9, 9]  # 3 x 10 rows <= 32
    assert _pure_decode_drafts(8, 32) == [7] * 8  # never under k_under_load
    assert _pure_decode_drafts(8, None) == [15] * 8  # unbounded: deep in every pure decode step
    assert _pure_decode_drafts(8, 32, adaptive=False) == [15] * 8  # fixed k verifies all k: no bound applies
