"""The step's sampling half: logits rows of a ragged step -> tokens and accepted counts per verified request."""
import torch

from workers.config import SamplingParams
from workers.proposers.base import Proposal
from workers.request import Request
from workers.step_sampling import sample_verified


def _request(temperature: float = 0.0) -> Request:
    return Request("r", [1, 2], SamplingParams(temperature=temperature), seed=7, stop_ids=frozenset(),
                   max_tokens=16, detok=None)


def _logits(argmaxes: list[int], vocab: int = 10) -> torch.Tensor:  # [rows, V] one peak per row
    logits = torch.zeros(len(argmaxes), vocab)
    logits[torch.arange(len(argmaxes)), torch.tensor(argmaxes)] = 5.0
    return logits


def test_greedy_rows_of_a_ragged_step() -> None:
    # request 0 verifies 3 drafts (rows 0-3), request 1 none (row 4), a completed prefill last (row 5)
    logits = _logits([4, 5, 9, 1, 3, 8])
    proposal = Proposal(torch.tensor([[4, 5, 6], [2, -1, -1]]), torch.tensor([3, 0]), None, None)
    verify = [(0, _request(), 3, 0), (1, _request(), 0, 4), (-1, _request(), 0, 5)]
    out, accepted = sample_verified(logits, verify, proposal)
    # drafts 4, 5 match the target's argmax at rows 0-1, 6 does not (9): 2 accepted, then the target's 9
    assert accepted == [2, 0, 0]
    assert out[0][:3] == [4, 5, 9] and out[1][0] == 3 and out[2][0] == 8
    assert out[1][1:] == [-1, -1, -1]  # padded to K + 1


def test_sampled_rows_accept_a_draft_the_target_is_sure_of() -> None:
    logits = _logits([4, 6], vocab=10) * 20  # p(4) ~ 1 at row 0: a one-hot draft of 4 is accepted
    proposal = Proposal(torch.tensor([[4]]), torch.tensor([1]), None, None)
    out, accepted = sample_verified(logits, [(0, _request(temperature=1.0), 1, 0)], proposal)
    assert accepted == [1] and out[0] == [4, 6]
