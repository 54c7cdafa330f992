"""The scheduler's draft budget while prompts wait (adaptive verification's reservation)."""
import pytest

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


def _decoding(sched: Scheduler, i: int, last_verified: int) -> Request:
    """A running request whose next step decodes (all but its last token cached), that verified
    `last_verified` drafts in its last step."""
    req = _request(i, 10)
    req.tokens.append(0)
    req.num_computed, req.status, req.last_verified = len(req.tokens) - 1, Status.RUNNING, last_verified
    sched._grow(req, len(req.tokens))
    sched.running.append(req)
    return req


@pytest.mark.parametrize("prompt_len, capped", [(40, False), (60, True)])
def test_drafts_are_capped_while_prompts_wait_only_where_k_drafts_would_leave_prefill_short(prompt_len, capped):
    sched = _scheduler(budget=64)
    a, b = _decoding(sched, 0, last_verified=1), _decoding(sched, 1, last_verified=7)
    sched.waiting.append(_request(2, prompt_len))  # 2 x (1 + 7) + 40 fits 64; + 60 does not
    plan = sched.schedule(K, adaptive_drafts=True)
    assert dict((r.req_id, d) for r, d in plan.decodes) == {a.req_id: 2 if capped else K, b.req_id: K}
    assert [(r.req_id, c) for r, c in plan.prefills] == [("r2", min(prompt_len, 64 - 2 - (2 if capped else K) - K))]


def test_without_adaptive_verification_or_with_the_old_rule():
    for adaptive, binding_only, want in ((False, True, K), (True, False, 2)):
        sched = _scheduler(budget=64)
        sched.reserve_only_when_binding = binding_only
        a = _decoding(sched, 0, last_verified=1)
        sched.waiting.append(_request(1, 20))
        plan = sched.schedule(K, adaptive_drafts=adaptive)
        assert plan.decodes == [(a, want)]


def test_no_prompt_waiting_means_no_cap():
    sched = _scheduler(budget=8)
    a = _decoding(sched, 0, last_verified=0)
    assert sched.schedule(K, adaptive_drafts=True).decodes == [(a, K)]
