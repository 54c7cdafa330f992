import time

import torch

from workers.budget import choose_verify_lengths, survival
from workers.cost_measure import measure
from workers.cost_table import CostTable


def test_measured_block_cost_prices_partial_blocks_by_their_rows():
    """A step costs a fixed part, a fixed cost per 32-row block and a cost per row: the warm-up finds the
    block's cost in rows, so 33 rows cost one block more than 32 (not the 64-row step), and the online refresh
    of partially filled steps keeps the full-block cell where it is. A second query length costs 8 ms more
    (the ragged cost): the block is timed on a uniform step, so it does not absorb that cost, and the ragged
    cells at 32 requests read it (timed on 31 x 1 + 1 x 2 rows, the block read ~117 rows and the cell 0)."""
    truth = lambda rows: (0.010 + 0.020 * -(-sum(rows) // 32) + 0.0005 * sum(rows)  # noqa: E731
                          + 0.008 * (len(set(rows)) > 1))
    t = measure(lambda r, n: time.sleep(truth([n // r] * r)), requests=(32,), extra=(0, 1), budget_s=30,
                repeats=3, ragged_step=lambda rows: time.sleep(truth(rows)), row_block=32)
    assert 25 < t.block_rows < 50  # 20 ms / 0.5 ms = 40 rows
    assert 0.005 < t.ragged[(32, 1)] < 0.011
    for rows in (33, 40, 48, 64):
        assert abs(t.lookup(32, rows) - truth([rows])) < 0.006, rows
    assert CostTable.from_json(t.to_json()).block_rows == t.block_rows
    for _ in range(200):
        for rows in (36, 41, 45):
            t.observe(32, rows, truth([rows]))
    assert abs(t.lookup(32, 64) - truth([64])) < 0.006
    # the policy at 32 requests: four 0.9 positions do not pay for a block; a block of 0.9 positions does
    p = torch.full((32, 1), 0.1)
    p[:4] = 0.9
    assert int(choose_verify_lengths(survival(p, torch.ones(32, dtype=torch.long)), t, 32, 32, 32.0).sum()) == 0
    full = survival(torch.full((32, 1), 0.9), torch.ones(32, dtype=torch.long))
    assert int(choose_verify_lengths(full, t, 32, 32, 32.0).sum()) == 32


def test_measure_respects_grid_and_time_budget():
    calls = []
    table = measure(lambda r, n: calls.append((r, n)), requests=(1, 2), extra=(0, 3), budget_s=5, repeats=1)
    assert sorted(table.seconds) == [(1, 1), (1, 4), (2, 2), (2, 8)]
    assert calls == [(1, 1)] * 2 + sorted(table.seconds)  # two untimed warm-up steps first
    assert measure(lambda r, n: time.sleep(0.02), requests=(1, 2, 4), extra=(0,), budget_s=0.01,
                   repeats=1).seconds.keys() == {(1, 1)}


def test_measure_leaves_out_a_cell_predicted_to_end_past_the_budget():
    """Checking only that time is left let the last cell overrun the budget by its whole length: here 16
    tokens at 10 ms each, which the 2 x 1 cell predicts (160 ms) to end past a 120 ms budget."""
    table = measure(lambda r, n: time.sleep(0.01 * n), requests=(1, 2, 16), extra=(0,), budget_s=0.12, repeats=1)
    assert sorted(table.seconds) == [(1, 1), (2, 2)]


def test_measure_times_ragged_cells_against_the_uniform_lookup():
    """A step where one request computes 1 + e rows and the others 1: its cost above the uniform cells'
    interpolation at the same tokens is stored per (requests, e); one request is never ragged."""
    uniform = lambda r, n: time.sleep(0.002 * n)  # noqa: E731
    rows_seen = []

    def ragged(rows):
        rows_seen.append(rows)
        time.sleep(0.002 * sum(rows) + 0.010)  # a ragged step costs 10 ms more

    t = measure(uniform, requests=(1, 2), extra=(0, 1, 7), budget_s=30, repeats=3, ragged_step=ragged)
    assert sorted(t.ragged) == [(2, 1), (2, 7)] and rows_seen[0] == [1, 2] and rows_seen[-1] == [1, 8]
    assert all(0.006 < s < 0.020 for s in t.ragged.values())
    back = CostTable.from_json(t.to_json())
    assert back.ragged == t.ragged and back.seconds == t.seconds


def test_measure_prices_each_key_slot_beyond_the_grids_context():
    """The context cells: r x 1 token with every sequence `context_slots` key slots past the grid's context;
    their time over the plain cell, per sequence and slot, pooled, is `key_slot_s`. Only the counts asked
    for are timed; the value is kept with the table."""
    seen = []

    def long(r):
        seen.append(r)
        time.sleep(0.001 * r + 1e-5 * r * 256)  # 10 us per sequence and slot

    t = measure(lambda r, n: time.sleep(0.001 * n), requests=(1, 2, 4), extra=(0,), budget_s=30, repeats=3,
                context_step=long, context_slots=256, context_requests=(2, 4))
    assert set(seen) == {2, 4}
    assert 0.8e-5 < t.key_slot_s < 1.3e-5
    assert CostTable.from_json(t.to_json()).key_slot_s == t.key_slot_s
    assert measure(lambda r, n: None, requests=(1, 2), extra=(0,), repeats=1).key_slot_s == 0.0  # not asked


def test_a_budget_cut_keeps_the_ragged_cells_of_every_request_count_it_measured():
    """Each request count's ragged cells follow its uniform ones, so a budget too short for the grid loses
    the largest request counts, not every ragged cell but the first (which was then read at every count)."""
    t = measure(lambda r, n: time.sleep(0.001 * n), requests=(1, 2, 4, 8, 16), extra=(0, 1, 7), budget_s=0.5,
                repeats=3, ragged_step=lambda rows: time.sleep(0.001 * sum(rows)))
    rows = sorted({r for r, _ in t.seconds})
    assert 4 <= rows[-1] < 16  # the budget was cut
    assert {r for r in rows if 1 < r < rows[-1]} <= {r for r, _ in t.ragged}


class _SpellClock:
    """A fake clock whose machine has a slow spell: every step from the `start`-th to the `stop`-th takes
    `extra_s` longer, whatever its shape (measured at 32 requests on an AMD EPYC: 32 x 1 rows ran ~95 ms,
    then ~160 ms, while 32 x 2 stayed ~55 ms above it)."""

    def __init__(self, start: int, stop: int, extra_s: float) -> None:
        self.now, self.steps, self.spell = 0.0, 0, (start, stop, extra_s)

    def perf_counter(self) -> float:
        return self.now

    def run(self, seconds: float) -> None:
        start, stop, extra_s = self.spell
        self.steps += 1
        self.now += seconds + (extra_s if start <= self.steps < stop else 0.0)


def _truth(rows: list[int], slots: int = 0) -> float:
    """10 ms a step, 2 ms a row, 20 ms per 32-row block opened after the first, 5 ms for a second query
    length, 4 us per key slot beyond the grid's context."""
    return (0.010 + 0.002 * sum(rows) + 0.020 * (-(-sum(rows) // 32) - 1) + 0.005 * (len(set(rows)) > 1)
            + 4e-6 * slots * len(rows))


def test_a_slow_spell_moves_a_rows_level_not_its_ragged_block_or_context_costs(monkeypatch):
    """A 60 ms spell over the 2-request row's last steps and the 32-request row's first. Timed cell after
    cell, the 32 x 1 cell read 60 ms too slow and the cells after it did not: the block came out at 0 rows,
    the ragged cells at 32 requests at 0 and the 2-request 1 + 7 cell at 65 ms. Timed in rounds, each cell is
    placed by its difference from its round's 1-row step."""
    from workers import cost_measure

    clock = _SpellClock(start=24, stop=40, extra_s=0.060)  # 2 warm-up steps, then 11 a round at 2 requests
    monkeypatch.setattr(cost_measure, "time", clock)
    t = measure(lambda r, n: clock.run(_truth([n // r] * r)), requests=(2, 32), extra=(0, 1, 7), budget_s=1e3,
                repeats=5, ragged_step=lambda rows: clock.run(_truth(rows)), row_block=32,
                context_step=lambda r: clock.run(_truth([1] * r, 256)), context_slots=256, context_requests=(2, 32))
    for cell in [(2, 1), (2, 7), (32, 1), (32, 7)]:
        assert abs(t.ragged[cell] - 0.005) < 1e-6, (cell, t.ragged[cell])
    assert abs(t.block_rows - 10.0) < 1e-6  # 20 ms / 2 ms a row
    assert abs(t.key_slot_s - 4e-6) < 1e-9
    assert abs(t.seconds[(32, 32)] - _truth([1] * 32)) < 1e-6  # one of five rounds was slow: the median


def test_rounds_stop_before_the_budget_when_the_row_runs_longer_than_predicted(monkeypatch, caplog):
    """The 64-request row is predicted from the 1-request one (10 ms a step, so 640 ms at 64 tokens) but runs
    2 s a step: after two rounds, a third that the last one predicts to end past the 6 s budget is not run,
    and the warm-up says its cell rests on fewer steps."""
    from workers import cost_measure

    clock = _SpellClock(0, 0, 0.0)
    monkeypatch.setattr(cost_measure, "time", clock)
    with caplog.at_level("WARNING"):
        t = measure(lambda r, n: clock.run(0.010 if r == 1 else 2.0), requests=(1, 64), extra=(0,),
                    budget_s=6.0, repeats=5)
    assert abs(t.seconds[(64, 64)] - 2.0) < 1e-9
    assert clock.now <= 6.0 + 2 * 0.010  # the two untimed warm-up steps run before the budget starts
    assert clock.steps == 2 + 5 + 2
    assert "1 cells were timed over fewer than 5 steps" in caplog.text
