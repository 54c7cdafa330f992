"""Slow means of the drafted positions' estimates, one per request count, that an idle depth plan's running
mean relaxes toward.

The depth plan reads one running mean of the estimates (`AdaptiveVerifier._prior`, ~10 drafted positions).
When it dips below what drafting needs, the plan drafts nothing, so nothing moves it but a probe's one
position at a time: the dip stays while the requests that caused it, and the next ones, go undrafted. Measured
at the trained draft, ShareGPT c=1, prompt sample 4, the grid's 9 configurations interleaved (ad-hoc
`c1_trace.py`, not committed): position 1's running mean read 0.173 or less in a tenth of the plans, and four
requests in a row drafted in 27 of 49, 1 of 28, 1 of 65 and 19 of 67 plans (174 of 585 plans idle) while drafted
positions were accepted at 0.35; adaptive read 1.089x of no speculation against fixed k=2's 1.109x.
A request's last estimates say little about its next draft (the Brier scores in workers/depth_plan.py: a
constant beat the last estimate), so the longer nothing drafts, the less the dip is worth: each idle plan moves
the running mean IDLE_RELAX of the way to the slow mean of its request count (SLOW_RATE per drafted position,
~30). Per request count, as what drafts at a load (probes alone where nothing pays) is what that load's plan
should expect: one slow mean for all would carry a low load's drafting into a high load that only probes.
"""
from __future__ import annotations

import torch

SLOW_RATE = 0.03
IDLE_RELAX = 0.1
SLOW_MIN_POSITIONS = 20  # position-1 drafts a request count's slow mean needs before the plan relaxes to it


class SlowMeans:
    def __init__(self) -> None:
        self._means: dict[int, torch.Tensor] = {}  # cost-table row -> [K]
        self._seen: dict[int, int] = {}  # row -> drafts counted at position 1

    def observe(self, row: int, mean: torch.Tensor, count: torch.Tensor, start: torch.Tensor) -> None:
        """A step's mean estimate per position (`mean` [K]) over its `count` [K] drafted positions; a request
        count seen first starts from `start` [K] (the running mean), as positions not drafted have no mean."""
        slow = self._means.get(row)
        if slow is None:
            slow = self._means[row] = start.clone()
            self._seen[row] = 0
        slow += (1.0 - (1.0 - SLOW_RATE) ** count) * (mean - slow)
        self._seen[row] += int(count[0])

    def relaxed(self, row: int, prior: torch.Tensor, idle_plans: int) -> torch.Tensor:
        """`prior` [K] moved toward `row`'s slow mean as `idle_plans` idle plans move it (unchanged until that
        mean has seen SLOW_MIN_POSITIONS drafts)."""
        slow = self._means.get(row)
        if slow is None or idle_plans <= 0 or self._seen[row] < SLOW_MIN_POSITIONS:
            return prior
        return prior + (1.0 - (1.0 - IDLE_RELAX) ** idle_plans) * (slow - prior)
