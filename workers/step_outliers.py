"""Steps the cost model should not learn from: a forward far slower than predicted says the machine was
disturbed (another process took the cores), not what the step's shape costs.

Measured (2026-12-05, the 2-core Xeon, bf16; ad hoc, `docs/architecture.md`, "Not from a disturbed machine"):
a CPU-bound process beside an interleaved run at n-gram repetitive c=32 made single steps take 1.4-3.7 s where
~0.25 s was usual (oversubscribed threads). The adaptive engines took those steps' time into their ragged
cells (4-8 -> 22-26 ms at 32 requests x 7 rows) and into the fitted cost of a query-length group (0-7 -> 15-25
ms), which only move again on ragged pure decode steps, which the trim then avoided: the group cost was still
16-18 ms two minutes after the load had gone. A 3x threshold let most of it in (21-35 ms).

A pure decode step is slow when its forward exceeds OUTLIER_RATIO x its prediction (the table at the row's
level, plus its ragged and group costs); normal steps ran 1.1-1.25x the table. Slow steps are not learned
from while they are a minority of the recent pure decode steps (a running share, OUTLIER_RATE per step): a
burst of a few is a disturbance, a machine that stays slower is learned after ~6 such steps.
"""
from __future__ import annotations

from dataclasses import dataclass

OUTLIER_RATIO = 1.5
OUTLIER_RATE = 0.125


@dataclass(slots=True)
class OutlierGuard:
    ratio: float = OUTLIER_RATIO
    rate: float = OUTLIER_RATE
    rejected: int = 0  # steps not learned from (`AdaptiveVerifier.stats`)
    share: float = 0.0  # running share of slow steps among recent pure decode steps

    def admits(self, observed_s: float, predicted_s: float) -> bool:
        """Whether a pure decode step's forward may refresh the cost model."""
        slow = predicted_s > 0 and observed_s > self.ratio * predicted_s
        self.share += self.rate * (float(slow) - self.share)
        if not slow or self.share > 0.5:  # most recent steps slow: the machine changed, learn it
            return True
        self.rejected += 1
        return False
