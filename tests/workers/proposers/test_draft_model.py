"""The draft model proposer: which rows it feeds its own cache each call, and what it sends the verifier."""
import pytest
import torch

from workers.llama import LlamaForward
from workers.model_runner import ModelRunner
from workers.proposers.base import DraftInput
from workers.proposers.draft_model import DraftModelProposer, _common_prefix


def _proposer(folder, k: int = 3) -> tuple[DraftModelProposer, list[list[tuple[list[int], int]]]]:
    """A proposer on the tiny draft and, per runner call, the (tokens, start position) of each chunk it fed."""
    model, _ = LlamaForward.load(folder, torch.device("cpu"), torch.float32)
    runner = ModelRunner(model, 2**22, 16, False)
    fed: list[list[tuple[list[int], int]]] = []
    run = runner.run

    def recording(chunks, *args):
        fed.append([(list(c.token_ids), c.start_pos) for c in chunks])
        return run(chunks, *args)

    runner.run = recording
    return DraftModelProposer(runner, k, top_s=8), fed


def test_common_prefix_compares_only_after_the_known_part():
    assert _common_prefix([1, 2, 3, 4], [1, 2, 5]) == 2
    assert _common_prefix([1, 2, 3, 4], [1, 2, 3, 4, 5]) == 4
    assert _common_prefix([9, 9, 3, 7], [1, 2, 3, 4], start=3) == 3  # the first 3 are taken as equal
    assert _common_prefix([1, 2], [1, 2, 3], start=5) == 2


def test_each_call_feeds_only_what_the_draft_cache_lacks(tiny_draft):
    p, fed = _proposer(tiny_draft)
    prompt = [3, 4, 5, 6, 7, 8]
    out = p.propose([DraftInput("a", 0, prompt, 2, 0.0, 0, 0)])
    first, second = out.draft_tokens[0, :2].tolist()
    assert fed == [[(prompt, 0)], [([first], 6)]]  # the whole prompt, then the first draft
    # the target accepted the first draft and emitted its own token 9: only those two tokens are new, and the
    # first is already in the cache (fed as a draft), so one row is fed at position 7
    fed.clear()
    p.propose([DraftInput("a", 6, [first, 9], 1, 0.0, 0, 2)])
    assert fed == [[([9], 7)]]
    # a step without drafts: nothing is fed, the committed tokens still move on
    fed.clear()
    p.propose([DraftInput("a", 8, [10, 11], 0, 0.0, 0, 4)])
    assert fed == []
    # the next draft catches up on everything since its last one, recomputing the token its last iteration left
    # unfed (its one draft was never fed, so position 8 is the first the cache lacks)
    p.propose([DraftInput("a", 10, [12], 1, 0.0, 0, 5)])
    assert fed == [[([10, 11, 12], 8)]]
    # tokens replaced from position 9 on (the committed context was truncated): recomputed from there
    fed.clear()
    p.propose([DraftInput("a", 9, [5, 5], 1, 0.0, 0, 3)])
    assert fed == [[([5, 5], 9)]]
    assert p._state["a"].kv_tokens == prompt + [first, 9, 10, 5, 5]


def test_incremental_drafts_equal_a_fresh_proposers_on_the_same_context(tiny_draft):
    """Cache reuse is exact: drafts and features after a history of calls equal a fresh proposer's from the whole
    context (fp32, no padding differences at these lengths)."""
    p, _ = _proposer(tiny_draft)
    ctx = [3, 4, 5, 6, 7, 8]
    p.propose([DraftInput("a", 0, ctx, 3, 0.0, 0, 0)])
    for new in ([9, 10], [11], [12, 13, 14]):
        start = len(ctx)
        ctx = ctx + new
        out = p.propose([DraftInput("a", start, new, 3, 0.0, 0, len(ctx) - 6)])
    fresh, _ = _proposer(tiny_draft)
    ref = fresh.propose([DraftInput("b", 0, ctx, 3, 0.0, 0, len(ctx) - 6)])
    assert out.draft_tokens.tolist() == ref.draft_tokens.tolist()
    assert torch.allclose(out.features, ref.features, atol=1e-5)


def test_greedy_drafts_are_the_argmax_with_a_one_hot_q_and_their_features(tiny_draft):
    p, _ = _proposer(tiny_draft, k=1)
    logits = []
    run = p.runner.run
    p.runner.run = lambda chunks, *a: logits.append(run(chunks, *a)) or logits[-1]
    out = p.propose([DraftInput("a", 0, [3, 4, 5], 1, 0.0, 0, 0), DraftInput("b", 0, [6, 7], 1, 0.0, 0, 0)])
    probs = logits[0].float().softmax(-1)  # [2, V]
    assert out.draft_tokens[:, 0].tolist() == probs.argmax(-1).tolist()
    assert torch.equal(out.probs.idx[:, 0, 0], out.draft_tokens[:, 0])
    assert torch.equal(out.probs.val[:, 0], torch.nn.functional.one_hot(torch.zeros(2, dtype=torch.long), 8).float())
    top2 = logits[0].float().topk(2, dim=-1).values
    entropy = -(probs * probs.log()).sum(-1)
    want = torch.stack((probs.max(-1).values, top2[:, 0] - top2[:, 1], entropy), dim=-1)
    assert torch.allclose(out.features[:, 0], want, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_sampled_drafts_send_their_exactly_sparse_q(tiny_draft, temperature):
    """A sampling request beside a greedy one: its q is the draft's top-S at its temperature (sums to 1), the
    draft is one of the S tokens, and the same seed draws the same drafts."""
    p, _ = _proposer(tiny_draft, k=2)
    batch = [DraftInput("s", 0, [3, 4, 5], 2, temperature, 123, 0), DraftInput("g", 0, [6, 7], 2, 0.0, 0, 0)]
    out = p.propose(batch)
    assert torch.allclose(out.probs.val[0].sum(-1), torch.ones(2))
    for i in range(2):
        assert int(out.draft_tokens[0, i]) in out.probs.idx[0, i].tolist()
    assert out.probs.val[1, :, 0].tolist() == [1.0, 1.0]
    again, _ = _proposer(tiny_draft, k=2)
    assert torch.equal(again.propose(batch).draft_tokens, out.draft_tokens)
