"""Catch-ups (workers/catch_up.py): the rows a draft model first feeds for a request, and their price."""
from types import SimpleNamespace

import torch

from workers.catch_up import CATCH_UP_HORIZON, CatchUpLedger
from workers.cost_table import CostTable


def _req(req_id: str, tokens: int, left: int = 10_000) -> SimpleNamespace:
    """What the ledger reads of a request (workers/request.py): its tokens, and the tokens it may still emit."""
    return SimpleNamespace(req_id=req_id, tokens=[1] * tokens, max_tokens=left, num_output=0)


def test_catch_up_rows_count_the_tokens_since_the_last_draft():
    ledger, req = CatchUpLedger(), _req("r", 100)
    assert ledger.rows(req) == 100  # never drafted: the whole context
    ledger.drafted_at["r"] = (100, 4)  # drafted 4 (fed 3 of them) at 100 tokens
    req.tokens += [1] * 3  # 2 accepted + the target's token: 1 new row, 2 already fed
    assert ledger.rows(req) == 1
    req.tokens += [1] * 10  # ten more steps without drafting: 13 new tokens, of which the 3 fed drafts
    assert ledger.rows(req) == 10  # are taken as accepted (here 2 were: 11 rows, off by <= depth - 1)
    ledger.forget("r")
    assert ledger.rows(req) == 113


def test_only_the_requests_that_drafted_pay_their_noted_catch_up():
    ledger = CatchUpLedger()
    a, b = _req("a", 40), _req("b", 7)
    assert ledger.note([a, b]) == [39, 6]  # rows beyond the usual 1
    ledger.drafted([(a, 7), (b, 7)], [2, 0])
    assert ledger.step_rows == 39 and ledger.drafted_at == {"a": (40, 2)}
    ledger.clear()
    assert ledger.planned == {} and ledger.step_rows == 0


def test_the_catch_up_rate_follows_the_drafter_where_catch_ups_are_a_sizeable_part():
    draft = CostTable({(4, 4): 0.0045, (4, 68): 0.025})  # 4 requests feeding 17 tokens each: 4.5 -> 25 ms
    ledger = CatchUpLedger()
    rate = ledger.row_s(draft, 4)
    assert rate == (0.025 - 0.0045) / (4 * 16)
    ledger.step_rows = 199
    ledger.observe(draft, 2 * (2 * 0.0045 + rate * 199), 4, 2)  # twice the predicted time
    assert ledger.scale > 1.05 and ledger.row_s(draft, 4) > rate * 1.05
    ledger.step_rows, scale = 0, ledger.scale
    ledger.observe(draft, 0.1, 4, 2)  # no catch-up this step: only the iteration's cell moves
    assert ledger.scale == scale


def test_a_catch_up_is_spread_over_the_steps_a_request_has_left_at_most_the_horizon():
    reqs = [_req(name, 10, left) for name, left in (("long", 1000), ("short", 4), ("done", 0))]
    scores = torch.full((3, 2), 0.5)  # a drafting step emits 1 + 1.0 tokens
    assert CatchUpLedger.horizon(reqs, scores).tolist() == [CATCH_UP_HORIZON, 2.0, 1.0]



def test_the_drafters_iteration_cell_is_refreshed_every_drafting_step():
    """Each drafting step refreshes the iteration's cell at once (refreshed a batch of steps at a time, the plan read
    stale drafting prices and the engine ran ~1% slower under load: workers/catch_up.py)."""
    draft, direct = CostTable({(4, 4): 0.004, (4, 68): 0.020}), CostTable({(4, 4): 0.004, (4, 68): 0.020})
    ledger = CatchUpLedger()
    for seconds in (0.006, 0.007, 0.008):  # one iteration a step, no catch-up
        ledger.observe(draft, seconds, 4, 1)
        direct.observe(4, 4, seconds)
        assert draft.lookup(4, 4) == direct.lookup(4, 4) > 0.004
