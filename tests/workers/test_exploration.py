"""Exploration (workers/exploration.py) through the trim: every EXPLORE_EVERY trims that cut a draft, one request
verifies more of it, within the step's open row block where there are row blocks."""
from types import SimpleNamespace

import torch

from workers.adaptive import AdaptiveVerifier
from workers.cost_table import CostTable
from workers.estimators import NgramEstimator
from workers.exploration import EXPLORE_EVERY
from workers.scheduler import ScheduledStep


def _request(req_id: str, tokens: list[int]) -> SimpleNamespace:  # what the trim reads of a request
    return SimpleNamespace(req_id=req_id, tokens=tokens)


def test_an_ngram_verifier_verifies_one_whole_draft_every_few_trims():
    """Positions rated low are never verified, so never relabelled: every EXPLORE_EVERY trims that cut a
    draft, the request with the most cut positions verifies all of it (and only then, only it)."""
    est = NgramEstimator(7)
    est.observe(torch.full((200, 7, 1), 2.0), torch.full((200,), 7), torch.zeros(200, dtype=torch.long))
    table = CostTable({(r, t): 0.1 + 0.01 * t for r in (2,) for t in range(2, 17)})  # drafts never pay
    av = AdaptiveVerifier(table, est)
    reqs = [_request(req_id=f"r{i}", tokens=[1] * 20) for i in range(2)]
    verified = []
    for _ in range(2 * EXPLORE_EVERY):
        plan = ScheduledStep(decodes=[(r, 7) for r in reqs])
        proposal = SimpleNamespace(features=torch.full((2, 7, 1), 2.0), num_drafts=torch.tensor([7, 5]))
        av.trim(proposal, plan)
        verified.append(proposal.num_drafts.tolist())
    explored = [i for i, v in enumerate(verified) if any(v)]
    assert explored == [EXPLORE_EVERY - 1, 2 * EXPLORE_EVERY - 1]
    assert verified[explored[0]] == [7, 0] and av.explored_positions == 14


def test_with_row_blocks_exploration_verifies_only_what_fits_the_open_block():
    """With row blocks a whole explored draft could open a block of its own: exploration waits for a step whose
    last open block has room, and verifies only as many cut positions as fit there."""
    est = NgramEstimator(7)
    est.observe(torch.full((200, 7, 1), 2.0), torch.full((200,), 7), torch.zeros(200, dtype=torch.long))
    table = CostTable({(r, t): 0.1 + 0.01 * t for r in (30, 32) for t in range(r, r + 8 * 32)}, row_block=32)
    av = AdaptiveVerifier(table, est)

    def trim(batch: int) -> list[int]:
        reqs = [_request(req_id=f"r{i}", tokens=[1] * 20) for i in range(batch)]
        plan = ScheduledStep(decodes=[(r, 7) for r in reqs])
        drafts = torch.full((batch,), 7)
        drafts[-1] = 5
        proposal = SimpleNamespace(features=torch.full((batch, 7, 1), 2.0), num_drafts=drafts)
        av.trim(proposal, plan)
        return proposal.num_drafts.tolist()

    full = [trim(32) for _ in range(2 * EXPLORE_EVERY)]  # 32 decode rows fill the block: no room, no exploring
    assert not any(any(v) for v in full) and av.explored_positions == 0
    assert trim(30) == [2] + [0] * 29 and av.explored_positions == 2  # due since: 2 rows of room
    assert not any(trim(30)) and av.explored_positions == 2  # the count starts again
