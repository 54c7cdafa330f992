"""Exploration: now and then the trim verifies more of a draft than it chose, so that every position keeps
being labelled (estimators that `explore`: the n-gram table).

Every EXPLORE_EVERY trims that cut a draft, the request with the most cut positions verifies more of its draft.
Positions rated low are otherwise never verified, so never relabelled (the one label source the n-gram table
lacks, having no warm-up). Not shown to matter alone: with fading, after a ShareGPT history, repetitive prompts
at c=4 stayed at 0.88-0.91x of fixed k=7 either way (docs/performance.md). With row blocks (the batch-invariant
path) it verifies only the cut positions that fit the step's last open row block, and waits for a step with
room: a whole draft opened a block of its own at n-gram ShareGPT c=32 (32 decode rows fill one), and without
exploration adaptive read 1.2% faster there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from workers.scheduler import ScheduledStep

EXPLORE_EVERY = 8


class Exploration:
    """When the trim explores and how far (`extend`), and the positions it added (`positions`)."""

    def __init__(self) -> None:
        # only the cut positions that fit the last open row block; False: the whole draft, as before
        # (benchmarks/adaptive_variant_ab.py --variant wholeexplore)
        self.in_open_block = True
        self.since = 0  # trims that cut a draft since the last exploration
        self.positions = 0  # positions verified beyond the trim's choice

    def extend(self, lengths: torch.Tensor, n: torch.Tensor, plan: "ScheduledStep",
               row_block: int) -> torch.Tensor:  # [B]
        """The trim's `lengths` [B] for drafts of `n` [B], extended when due: the request with the most cut
        positions verifies its whole draft, or with row blocks (`row_block` > 1) as much of it as fits the
        step's last open block. The choice depends only on the drafts, their estimates and the step's shape, so
        the labels stay unbiased given the features."""
        kept = torch.minimum(n, lengths)
        cut = n - kept
        if not bool(cut.any()):
            return lengths
        self.since += 1
        if self.since < EXPLORE_EVERY:
            return lengths
        room = self._block_room(plan, int(kept.sum()), row_block)
        if room == 0:
            return lengths  # due, at the next step with room
        self.since = 0
        b = int(cut.argmax())
        extra = min(int(cut[b]), room)
        self.positions += extra
        kept[b] += extra
        return kept

    def _block_room(self, plan: "ScheduledStep", verified: int, row_block: int) -> int:
        """Rows left in the last row block of the step's small rows (decodes, their `verified` drafts, prefill
        chunks of <= one block), packed densely as the cost table reads them; any number without row blocks."""
        if row_block <= 1 or not self.in_open_block:
            return 1 << 30
        rows = len(plan.decodes) + verified + sum(c for _, c in plan.prefills if c <= row_block)
        return -rows % row_block
