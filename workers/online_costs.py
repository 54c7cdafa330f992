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
"""
from __future__ import annotations

from workers.cost_table import CostTable, GroupCostFit
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
