"""How a step's tiled sequences are grouped (workers/attention_groups.py): the cheapest runs of query lengths,
then of contexts. That any grouping gives the same logits is tested with the kernels (test_attention.py)."""
import torch

import workers.attention_groups as attention_groups
from workers.attention import SeqSpan
from workers.attention_groups import group_by_length


def _spans(lengths: list[int]) -> list[tuple[SeqSpan, torch.Tensor]]:
    spans, row = [], 0
    for n in lengths:
        spans.append((SeqSpan(row, n, 64, [0]), torch.zeros(1, dtype=torch.long)))
        row += n
    return spans


def _group_lengths(lengths: list[int]) -> list[list[int]]:
    return [[s.query_len for s, _ in g] for g in group_by_length(_spans(lengths))]


def _cost(groups: list[list[int]]) -> int:
    return sum(attention_groups.GROUP_COST_ROWS + len(g) * max(g) for g in groups)


def _runs(lengths: list[int]) -> list[list[list[int]]]:
    """Every split of the sorted distinct lengths into runs, as groups of the sequences."""
    distinct = sorted(set(lengths))
    out = []
    for mask in range(1 << (len(distinct) - 1)):
        groups, cur = [], []
        for i, n in enumerate(distinct):
            cur += [m for m in lengths if m == n]
            if i == len(distinct) - 1 or mask >> i & 1:
                groups.append(cur)
                cur = []
        out.append(groups)
    return out


def test_the_grouping_is_the_cheapest_split_into_runs_of_lengths():
    """The dynamic programme finds the least `groups x GROUP_COST_ROWS + padded rows` over every split (brute
    force, 200 random steps): a lone 2-row verify among 1-row decodes keeps its own group at 12, a group of
    8 x 2 rows joins them."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        lengths = torch.randint(1, 9, (int(torch.randint(1, 20, (1,), generator=gen)),), generator=gen).tolist()
        assert _cost(_group_lengths(lengths)) == min(_cost(g) for g in _runs(lengths))
    assert len(_group_lengths([1] * 15 + [2])) == (2 if attention_groups.GROUP_COST_ROWS < 15 else 1)
    assert len(_group_lengths([1] * 8 + [2] * 8)) == 1


def test_groups_are_runs_of_the_sorted_lengths_covering_every_sequence():
    lengths = [1] * 9 + [3, 5, 5, 8, 2, 1, 4]
    groups = _group_lengths(lengths)
    assert sorted(n for g in groups for n in g) == sorted(lengths)
    for a, b in zip(groups, groups[1:]):
        assert max(a) < min(b)


def test_on_cuda_a_steps_lengths_share_one_group_and_on_cpus_they_do_not():
    """A group's launches cost more than thousands of padded rows on CUDA (an H200 ran ragged steps in 0.77
    of their time with one group), so an adaptive plan's spread of lengths is one group there; on CPUs,
    where padded rows cost compute, the same step keeps its lengths apart."""
    lengths = [1] * 24 + [2 + i % 7 for i in range(8)]
    on_cuda = group_by_length(_spans(lengths), attention_groups.group_cost_rows(torch.device("cuda")))
    on_cpu = group_by_length(_spans(lengths), attention_groups.group_cost_rows(torch.device("cpu")))
    assert [len(g) for g in on_cuda] == [32]
    assert len(on_cpu) > 2 and attention_groups.group_cost_rows(torch.device("cpu")) == attention_groups.GROUP_COST_ROWS


def _ctx_spans(contexts: list[int]) -> list[tuple[SeqSpan, torch.Tensor]]:
    return [(SeqSpan(i, 1, c - 1, [0]), torch.zeros(1, dtype=torch.long)) for i, c in enumerate(contexts)]


def test_a_group_is_split_by_context_where_the_padding_saved_pays_for_a_group():
    """Every sequence of a group gathers keys up to its longest context: one long prompt among short ones
    is split off (31 x 128 + 1 x 1024 slots and one more group, not 32 x 1024), contexts within a key block or
    two stay together, and on CUDA nothing is split."""
    contexts = [100] * 31 + [1000]
    groups = attention_groups.split_by_context(_ctx_spans(contexts), attention_groups.GROUP_COST_SLOTS)
    assert sorted(len(g) for g in groups) == [1, 31]
    assert len(attention_groups.split_by_context(_ctx_spans(contexts), None)) == 1
    near = _ctx_spans([100, 200, 250] * 4)
    assert len(attention_groups.split_by_context(near, attention_groups.GROUP_COST_SLOTS)) == 1
    assert attention_groups.context_cost_slots(torch.device("cuda")) is None
    assert attention_groups.context_cost_slots(torch.device("cpu")) == attention_groups.GROUP_COST_SLOTS
