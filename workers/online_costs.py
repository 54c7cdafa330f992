"""The target's cost table refreshed online from observed pure decode steps.

Uniform steps (every request verifies the same count) refresh the table's cells, OBSERVE_BATCH steps at a time
(each step shape with its mean time and the weight of as many single observations): one refresh rebuilds the
lookup curves, 0.22 ms of a 41 ms step at c=1 when done every step (~0.5%).

Ragged steps: a pure decode step whose requests verify different counts refreshes the table's ragged cost by its
forward over a uniform step's. That uniform step is priced as one run now: the table's lookup times the recent
uniform pure steps' forward over their lookup (the level: per row, a running mean over ~1 / LEVEL_RATE steps),
since the table itself is refreshed OBSERVE_BATCH steps at a time and then by its EMA, so it lags when the
machine's speed moves. Read against the lookup alone (trained draft, ShareGPT c=32 then repetitive c=32, one
process; ad-hoc price log, not committed): in a stretch where pure steps ran ~2.2x the table (2.4-2.5 s
forwards, uniform and ragged alike) the ragged steps put that whole gap into the ragged cost, which went from ~0
to 290-370 ms at 32 requests and stayed, as no plan took a ragged step at that price again. At repetitive c=32
the trim then cut all the plan had drafted in 24 of 72 drafting steps (every plan that was not uniform), wasting
129 ms of drafting a step. With the level, the same history left the ragged cells at 0 and 16 ms, and the point
read 1.010 and 1.001 of no speculation against 0.983 and 0.992 (A/B in one process, 2 cycles;
docs/performance.md).

Steps far slower than predicted teach nothing (workers/step_outliers.py).

The step's shape the engine reports with each observation (`ragged_extra`, `extra_groups`) and the per-group
cost fit (`GroupCostFit`) are defined here, with the learning that reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from workers.cost_table import CostTable
from workers.step_outliers import OutlierGuard

OBSERVE_BATCH = 8
LEVEL_RATE = 0.25
LEVEL_BOUNDS = (0.25, 4.0)


class OnlineTargetCosts:
    def __init__(self, cost: CostTable) -> None:
        self.cost = cost
        self.level: dict[int, float] = {}  # row -> recent uniform forward / table (the module's docstring)
        self.groups = GroupCostFit()  # the cost of query-length groups beyond two (cost.group_s)
        self.outliers = OutlierGuard()  # steps too slow to learn the cost model from
        self._step_times: dict[tuple[int, int], list[float]] = {}  # (requests, tokens) -> [seconds summed, steps]
        self._step_times_n = 0

    def read(self, requests: int, tokens: int) -> tuple[int, float]:
        """A pure decode step's table row and uniform lookup, read before the step refreshes them."""
        return self.cost.nearest_requests(requests), self.cost.lookup(requests, tokens)

    def now(self, row: int, table_s: float) -> float:
        """A uniform step that the table prices `table_s` at `row`, as run now (the level)."""
        return table_s * self.level.get(row, 1.0)

    def learn(self, row: int, table_s: float, forward_s: float, requests: int, tokens: int, ragged_extra: int,
              extra_groups: int) -> None:
        """Refresh from a pure decode step (`row`, `table_s`: `read` before it): a uniform step refreshes the
        uniform cells and the level, a ragged one, whose longest request computed 1 + `ragged_extra` rows, the
        ragged cost (its time over the uniform step run now, less the fitted cost of its `extra_groups`
        query-length groups beyond two; `CostTable.observe_ragged` says why). Not from a step far slower than
        predicted: a disturbed machine, not the step's shape (step_outliers.py)."""
        uniform_s = self.now(row, table_s)
        ragged_s = float(self.cost.ragged_array(requests, ragged_extra)) if ragged_extra > 0 else 0.0
        if not self.outliers.admits(forward_s, uniform_s + ragged_s + self.cost.group_s * extra_groups):
            return
        if ragged_extra > 0:  # refreshes the ragged cost, not the uniform cells (uniform steps do)
            fitted = self.groups.observe(extra_groups, forward_s - uniform_s - ragged_s)
            if fitted is not None:
                self.cost.group_s = fitted
            group_s = self.cost.group_s * extra_groups
            self.cost.observe_ragged(requests, ragged_extra, forward_s - uniform_s - group_s)
        else:
            self.observe_level(row, forward_s, table_s)
            self.observe_uniform(requests, tokens, forward_s)

    def observe_level(self, row: int, uniform_s: float, table_s: float) -> None:
        """Recent uniform pure decode steps' forward over the table's lookup, per row: how far the machine
        runs from the table right now (`LEVEL_RATE`). Only uniform steps: ragged ones are what it is for, and
        the table's cells are refreshed by uniform steps alone, so without them both stay as they were."""
        ratio = min(max(uniform_s / max(table_s, 1e-12), LEVEL_BOUNDS[0]), LEVEL_BOUNDS[1])
        level = self.level.get(row, 1.0)
        self.level[row] = level + LEVEL_RATE * (ratio - level)

    def observe_uniform(self, requests: int, tokens: int, seconds: float) -> None:
        """Collect a uniform pure decode step's forward time; every OBSERVE_BATCH steps refresh the table."""
        acc = self._step_times.setdefault((requests, tokens), [0.0, 0])
        acc[0] += seconds
        acc[1] += 1
        self._step_times_n += 1
        if self._step_times_n >= OBSERVE_BATCH:
            rows = {self.cost.nearest_requests(r) for r, _ in self._step_times}
            before = {row: self.cost.lookup(row, row) for row in rows}
            for (r, t), (total, n) in self._step_times.items():
                self.cost.observe(r, t, total / n, count=n)
            self._step_times, self._step_times_n = {}, 0
            for row in rows & self.level.keys():  # the table took up part of the gap the level measured
                self.level[row] *= before[row] / max(self.cost.lookup(row, row), 1e-12)


def extra_groups(rows: list[int]) -> int:
    """Distinct row counts of a step's sequences beyond the two a ragged cell is measured with."""
    return max(0, len(set(rows)) - 2)


@dataclass
class GroupCostFit:
    """What each query-length group beyond two costs a pure decode step, fitted online: the least-squares
    slope of (observed forward - table prediction, ragged cell included) over `extra_groups`, in exponentially
    weighted sums. The ragged cells time two groups (n - 1 requests at 1 row, one at 1 + e). Measured at 16
    requests (n-gram, ShareGPT, ~800 pure steps of fixed k=4 and adaptive k <= 7): 2.9 ms per group beyond
    two on ~120 ms steps, 3.5 ms with an intercept; adaptive's ragged steps had 3 or more groups in 77% of
    cases, fixed k=4's in 23%."""

    decay: float = 0.995  # ~200 steps of memory
    min_weight: float = 8.0  # weighted steps with extra groups before the slope is read
    _sums: list[float] = field(default_factory=lambda: [0.0] * 6)  # weights of: 1, x, x^2, y, xy, x > 0

    def observe(self, groups: int, residual_s: float) -> float | None:
        """Add one pure ragged step; returns the fitted seconds per group (>= 0), or None until it has
        seen enough steps with extra groups."""
        x, y = float(groups), residual_s
        self._sums = [self.decay * a + b for a, b in zip(self._sums, (1.0, x, x * x, y, x * y, float(x > 0)))]
        n, sx, sxx, sy, sxy, seen = self._sums
        var = sxx - sx * sx / n
        if seen < self.min_weight or var <= 1e-9 * n:
            return None
        return max(0.0, (sxy - sx * sy / n) / var)


def ragged_extra(rows: list[int]) -> int:
    """Rows beyond 1 of the longest sequence of a step whose sequences compute different row counts (the
    `e` of the ragged cells); 0 for a uniform step."""
    return max(rows) - 1 if min(rows) < max(rows) else 0
