"""How a step's tiled sequences are grouped (workers/attention.py runs each group as one padded tile): by query
length (`group_by_length`), then each query tile by context (`split_by_context`), each split the cheapest by a
group's fixed cost against the padding it saves. Here apart from the kernels so the costs that decide the
grouping (GROUP_COST_ROWS, GROUP_COST_SLOTS: benchmarks set them) live in one small module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import numpy as np

    from workers.attention import SeqSpan

KEY_BLOCK = 128  # keys are gathered in blocks of this many (workers/attention.py)


def padded_key_slots(context_len: int) -> int:
    """Key slots a tiled sequence of `context_len` tokens is gathered over when it is the longest of its group:
    its context rounded up to whole KEY_BLOCKs (every sequence of a group pads to its longest's)."""
    return -(-context_len // KEY_BLOCK) * KEY_BLOCK


# A tiled group's fixed cost (~12 ops x layers) in padded query rows (measured ~0.3 ms/row). 40 was tried
# (2026-12-04): synthetic ragged steps at contexts 64-256 ran 0.981 of their time (benchmarks/ragged_groups.py),
# but in closed loop (n-gram, ShareGPT; A/B in one process, 3 interleaved cycles) adaptive ran 1.8% (c=16) and
# 3.5% (c=32) slower and fixed k=4 0.4% slower. Likely, not tested: a padded row's cost grows with its context,
# which this weight does not see (docs/architecture.md, "How the attention groups lengths").
GROUP_COST_ROWS = 12
# The same on CUDA, where a step is bound by the host's launches (SmolLM2 on an H200: 35-70 ms a step at
# c=8-128): a group's ~20 ops x 30 layers cost what thousands of padded rows do. Measured on an H200
# (benchmarks/ragged_groups.py --random-weights, contexts 256 and 1024, 32 and 128 requests, 2026-12-04): 12
# ragged shapes took 0.768x their time at 12 (geometric mean; 256: 0.833x, 10^6: 0.771x); 31 x 1 + 1 x 2 rows
# 34.4 -> 25.4 ms and 24 x 1 + 8 x (2..8) 45.4 -> 25.3 ms at 32 requests, context 256.
GROUP_COST_ROWS_CUDA = 4096


def group_cost_rows(device: torch.device) -> int:
    """What one more tiled group costs on `device`, in padded query rows (`group_by_length`)."""
    return GROUP_COST_ROWS_CUDA if device.type == "cuda" else GROUP_COST_ROWS


def group_by_length(small: list[tuple["SeqSpan", np.ndarray]],
                    cost_rows: int | None = None) -> list[list[tuple["SeqSpan", np.ndarray]]]:
    """Split sequences into groups of similar query length, each padded to its own longest query: a ragged
    verify plan (one request at 1 + 7 rows, the rest at 1 + 1) would otherwise pad every sequence to 8 rows.
    The cheapest runs of the distinct lengths by sum(cost_rows + sequences x longest), `cost_rows`
    GROUP_COST_ROWS unless given."""
    return _cheapest_runs(small, lambda item: item[0].query_len, GROUP_COST_ROWS if cost_rows is None else cost_rows)


# A tiled group's fixed cost in key slots of one sequence (what splitting a group by context must save): ~3.6 ms
# a group (GROUP_COST_ROWS) over ~4-6.6 us a key slot (AMD EPYC, bf16; workers/cost_table.py, `key_slot_s`).
# Every sequence of a group is gathered over its longest context: at ShareGPT c=32 one long prompt padded the
# other 31 sequences' keys to its own (32 x 1 token: 73 ms at context 100, 189 ms at 1000, ad hoc).
GROUP_COST_SLOTS = 768


def context_cost_slots(device: torch.device) -> int | None:
    """`split_by_context`'s group cost on `device` (None: groups are not split by context). On CUDA a group's
    launches cost what thousands of padded rows do (GROUP_COST_ROWS_CUDA), and nothing was measured there."""
    return None if device.type == "cuda" else GROUP_COST_SLOTS


def split_by_context(group: list[tuple["SeqSpan", np.ndarray]],
                     cost_slots: int | None) -> list[list[tuple["SeqSpan", np.ndarray]]]:
    """Split one group (a query tile) by context: the cheapest runs of the distinct padded contexts (whole key
    blocks) by sum(cost_slots + sequences x longest padded context)."""
    if cost_slots is None:
        return [group]
    return _cheapest_runs(group, lambda item: padded_key_slots(item[0].context_len), cost_slots)


def _cheapest_runs(items: list, key, fixed: float) -> list[list]:
    """Items in groups of contiguous runs of their sorted distinct `key` values, each group costing
    `fixed` + its items x its largest key: the cheapest such split (a dynamic programme over the values)."""
    by_key: dict[int, list] = {}
    for item in items:
        by_key.setdefault(key(item), []).append(item)
    keys = sorted(by_key)
    if len(keys) == 1:
        return [items]
    count = [len(by_key[k]) for k in keys]
    best = [0.0] + [float("inf")] * len(keys)  # best[i]: cost of the first i distinct values
    cut = [0] * (len(keys) + 1)
    for i in range(1, len(keys) + 1):
        n = 0
        for j in range(i, 0, -1):  # group = values j-1 .. i-1, padded to keys[i-1]
            n += count[j - 1]
            c = best[j - 1] + fixed + n * keys[i - 1]
            if c < best[i]:
                best[i], cut[i] = c, j - 1
    groups, i = [], len(keys)
    while i > 0:
        groups.append([item for k in keys[cut[i]:i] for item in by_key[k]])
        i = cut[i]
    return groups[::-1]
