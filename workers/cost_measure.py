"""The warm-up's timing of a `CostTable`: the uniform grid, the ragged cells, the row block's cost and the
context cells, each request count's cells timed in interleaved rounds.

Why in rounds: the differences the policy reads (one more row, a second query length, a second row block)
are a few ms on steps of 30-200 ms, while this machine has slow spells that add tens of ms to every step
(`_paired`). Timed cell after cell (5 repeats of one shape, then the next), two tables measured minutes apart
on one AMD EPYC read a 32-row block at 12.7 and 1.9 rows and the ragged cells at 8 requests at 10.8/16.0 ms
and 0/0. Timed in rounds (every cell of a request count once, then again), each cell is placed by its
difference from the same round's 1-row step, so a spell moves the row's level, not its shape
(docs/performance.md, "A steadier warm-up table").
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workers.cost_table import DEFAULT_EXTRA_TOKENS, DEFAULT_REQUESTS, RAGGED_EXTRA, CostTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """One step shape of the warm-up: `kind` uniform (r x (1 + extra) rows), ragged (r - 1 x 1 and one
    1 + extra), context (r x 1 at more context) or block (row_block + 1 x 1: a second row block opens)."""

    requests: int
    extra: int
    kind: str

    def tokens(self) -> int:
        if self.kind == "uniform":
            return self.requests * (1 + self.extra)
        if self.kind == "ragged":
            return self.requests + self.extra
        return self.requests + (self.kind == "block")


def measure(step: Callable[[int, int], None], requests: tuple[int, ...] = DEFAULT_REQUESTS,
            extra: tuple[int, ...] = DEFAULT_EXTRA_TOKENS, budget_s: float = 60.0, repeats: int = 5,
            ragged_step: Callable[[list[int]], None] | None = None, row_block: int = 1,
            context_step: Callable[[int], None] | None = None, context_slots: int = 0,
            context_requests: tuple[int, ...] = (), in_rounds: bool = True) -> CostTable:
    """Time `step(requests, tokens)` over the grid (median of `repeats`), smallest request counts first,
    within the time budget: a cell whose `repeats` steps the table so far predicts to end past it is left
    out (lookups extrapolate), and so is every cell once the budget is spent (checking only that time was
    left let the last cell run the whole budget over: 5 steps of 64 x 9 tokens are the grid's longest).
    A request count's cells are timed in rounds, one step of each per round, and each is placed by its
    median difference from the round's 1-row step (`_paired`); `in_rounds=False` times each cell's steps one
    after another and keeps their medians, as before 2026-12-05 (benchmarks/warmup_table_noise.py compares).
    With `ragged_step` (rows per request -> one step), each request count >= 2 also gets its `ragged` cells:
    the step's seconds over the lookup the policy will make (`row_block` as the runner computes).
    With `row_block` > 1, the count equal to it also times `row_block` + 1 requests of 1 row
    (`block_cost_rows`). With `context_step` (r requests x 1 token, each `context_slots` key slots beyond the
    grid's context), each of `context_requests` times one more step, and `key_slot_s` is their seconds over
    the plain cells' per slot, pooled (per slot it was about the same at 2-32 requests; the largest counts,
    least noisy, weigh most)."""
    table = CostTable(row_block=row_block)
    over = [0.0, 0.0]  # seconds and sequence-slots of the context cells over their plain cells
    runs: dict[str, Callable[[Cell], None]] = {
        "uniform": lambda c: step(c.requests, c.tokens()),
        "ragged": lambda c: ragged_step([1] * (c.requests - 1) + [1 + c.extra]),
        "context": lambda c: context_step(c.requests),
        "block": lambda c: ragged_step([1] * (c.requests + 1)),
    }
    for _ in range(2):  # untimed: the first steps after loading run slow (measured 55 ms vs 34 for 1 x 1)
        step(requests[0], requests[0])
    deadline = time.perf_counter() + budget_s
    # each request count's ragged, block and context cells with its uniform ones: a budget cut then loses the
    # largest request counts, which extrapolate, not every ragged cell but the first (a grid of uniform cells
    # first left an AVX2 machine only the 2-request ragged cells, read at every count; see observe_ragged)
    rows = {r: [Cell(r, e, "uniform") for e in extra]
            + ([Cell(r, 0, "block")] if ragged_step and r == row_block > 1 and 1 in extra else [])
            + [Cell(r, e, "ragged") for e in RAGGED_EXTRA if r > 1 and ragged_step]
            + ([Cell(r, 0, "context")] if context_step and context_slots > 0 and r in context_requests else [])
            for r in requests}
    skipped = short = 0
    for r, cells in rows.items():
        chosen = _cells_that_fit(table, cells, repeats, deadline)
        skipped += len(cells) - len(chosen)
        if in_rounds:
            timed = _time_in_rounds(chosen, runs, repeats, deadline)
            placed = _paired(timed, Cell(r, 0, "uniform"))
        else:
            timed = {c: _time_in_rounds([c], runs, repeats, deadline)[c] for c in chosen}
            placed = {c: _median(v) for c, v in timed.items()}
        short += sum(1 for v in timed.values() if len(v) < repeats)
        for c, s in placed.items():
            if c.kind == "uniform":
                table.seconds[(r, c.tokens())] = s
        for c, s in placed.items():
            if c.kind == "block" and (r, 2 * r) in table.seconds:
                table.block_rows = block_cost_rows(table, s)
        for c, s in placed.items():
            if c.kind == "ragged":
                table.ragged[(r, c.extra)] = max(0.0, s - table.lookup(r, c.tokens()))
            elif c.kind == "context":
                over[0] += s - table.seconds[(r, r)]
                over[1] += r * context_slots
    table.key_slot_s = max(0.0, over[0] / over[1]) if over[1] else 0.0
    if skipped:
        log.warning("cost table: %d of %d cells did not fit the %.0f s budget and are extrapolated",
                    skipped, sum(map(len, rows.values())), budget_s)
    if short:  # rounds cut short by the deadline: their cells rest on fewer steps (noisier)
        log.warning("cost table: %d cells were timed over fewer than %d steps to keep the %.0f s budget",
                    short, repeats, budget_s)
    return table


def _cells_that_fit(table: CostTable, cells: list[Cell], repeats: int, deadline: float) -> list[Cell]:
    """The cells, in order, whose `repeats` steps the table so far predicts to end before the deadline;
    a ragged, block or context cell only with its row's 1-row cell (what it is timed against)."""
    chosen: list[Cell] = []
    end = time.perf_counter()
    for c in cells:
        if c.kind != "uniform" and chosen[:1] != [Cell(c.requests, 0, "uniform")]:
            continue
        predicted = repeats * _predicted_step_s(table, c.requests, c.tokens())
        if end + predicted * (1.5 if c.kind == "context" else 1.0) <= deadline:
            chosen.append(c)
            end += predicted
    return chosen


def _time_in_rounds(cells: list[Cell], runs: dict[str, Callable[[Cell], None]], repeats: int,
                    deadline: float) -> dict[Cell, list[float]]:
    """Seconds of each cell's steps, one step of every cell per round; after the first round, a round that
    the last one predicts to end past the deadline is not run (the prediction that chose the cells was short:
    64 requests' cells predicted from 32's)."""
    samples: dict[Cell, list[float]] = {c: [] for c in cells}
    start = time.perf_counter()
    for i in range(repeats if cells else 0):
        now = time.perf_counter()
        if i and now + (now - start) > deadline:
            break
        start = now
        for c in cells:
            t = time.perf_counter()
            runs[c.kind](c)
            samples[c].append(time.perf_counter() - t)
    return samples


def _paired(samples: dict[Cell, list[float]], base: Cell) -> dict[Cell, float]:
    """Each cell's seconds as the `base` cell's median plus the median of its difference from the base
    cell's step of the same round. Measured at 32 requests (AMD EPYC, 30 rounds): 32 x 1 rows ran ~95 ms for
    16 rounds, then ~160 ms, while its difference from 32 x 2 stayed at ~55 ms and from 33 x 1 at ~21: the
    machine's slow spells add to every step alike, and a cell timed in another spell than its neighbour
    reads them as a cost of its shape."""
    if base not in samples:  # a grid without the 1-row cell: each cell on its own
        return {c: _median(times) for c, times in samples.items()}
    ref = samples[base]
    level = _median(ref)
    return {c: level + _median([a - b for a, b in zip(times, ref)]) for c, times in samples.items()}


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _predicted_step_s(table: CostTable, requests: int, tokens: int) -> float:
    """A cell's step time as the table measured so far predicts it (0 before any cell). A row of one cell
    looks up flat, so there it grows in proportion to tokens: the next cell of a new row is the compute-bound
    case (64 x 1 tokens to 64 x 2), and over-predicting a small memory-bound cell costs no cell near the end."""
    if not table.seconds:
        return 0.0
    xs, ss = table._curve(requests)
    if len(xs) == 1:
        return float(ss[0]) * max(1.0, tokens / max(float(xs[0]), 1.0))
    return table.lookup(requests, tokens)


def block_cost_rows(table: CostTable, opened_s: float) -> float:
    """A row block's fixed cost in rows, from three steps: q = row_block requests of 1 row (one full block),
    q + 1 requests of 1 row (`opened_s`: a second block opens) and q requests of 2 rows (two full blocks).
    The rows cost (2q - (q + 1)) apart; the jump from q to q + 1 rows, less one row, is the block.
    `opened_s` is a uniform step. Until 2026-12-05 it was q - 1 requests of 1 row and one of 2, which also
    held the cost of a second query length (the ragged cost, ~7 ms at 31 requests on an AMD EPYC): the block
    absorbed it, and the ragged cells at q requests and above, measured against this lookup, read 0, so a
    step of 31 decoding requests and one verified row was priced as free (docs/performance.md, "A verified
    row beside a prefill chunk")."""
    q = table.row_block
    one, two = table.seconds[(q, q)], table.seconds[(q, 2 * q)]
    per_row = max((two - opened_s) / (q - 1), 1e-9)
    return float(min(max((opened_s - one - per_row) / per_row, 0.0), 4.0 * q))


def load_or_measure(path: Path, step: Callable[[int, int], None], **kw) -> CostTable:
    if path.exists():
        return CostTable.from_json(path.read_text())
    table = measure(step, **kw)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table.to_json())
    return table
