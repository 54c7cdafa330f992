import numpy as np
import torch

from workers.proposers.base import DraftInput
from workers.proposers.ngram import NgramProposer, find_continuation


def test_longest_suffix_most_recent_match():
    toks = np.array([1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3])
    cont, n = find_continuation(toks, 1, 3, 3)
    assert n == 2 and cont.tolist() == [7, 8, 5]  # "2 3" last seen before "7 8 5"
    cont, n = find_continuation(np.array([4, 5, 6]), 1, 3, 3)
    assert n == 0 and cont.size == 0


def test_proposer_keeps_a_mirror_from_deltas_and_respects_budget():
    p = NgramProposer(k=4, ngram_min=1, ngram_max=3)
    out = p.propose([DraftInput("a", 0, [1, 2, 3, 4, 1, 2], 4, 0.0, 0, 0)])
    assert out.draft_tokens[0].tolist() == [3, 4, 1, 2] and out.num_drafts.tolist() == [4]
    # next step: the engine accepted "3" and sampled "9": delta from position 6
    out = p.propose([DraftInput("a", 6, [3, 9], 2, 0.0, 0, 2)])
    assert p._mirror.snapshot("a") == [1, 2, 3, 4, 1, 2, 3, 9]
    assert out.num_drafts.tolist() == [0]
    out = p.propose([DraftInput("a", 7, [4], 2, 0.0, 0, 3)])  # rollback of "9": truncated, then appended
    assert p._mirror.snapshot("a") == [1, 2, 3, 4, 1, 2, 3, 4]
    assert out.draft_tokens[0, :2].tolist() == [1, 2] and out.draft_tokens[0, 2:].tolist() == [-1, -1]
    assert torch.equal(out.features[0, :2, 0], torch.tensor([3.0, 3.0]))
    p.release("a")
    assert "a" not in p._mirror.buffers
