import time

import numpy as np
import torch

from workers.budget import _ranked, allocate_capacity, choose_verify_lengths, plan_verify_lengths, survival
from workers.cost_table import LEVEL_SHARE, CostTable

PROFILE = [0.437, 0.503, 0.541, 0.571, 0.632, 0.628, 0.593]  # seed-notes conditional acceptance, k=7


def _table(per_token_s: float, fixed_s: float = 0.02) -> CostTable:
    """A step costs fixed_s + per_token_s * tokens (memory-bound: per_token_s small)."""
    return CostTable({(r, t): fixed_s + per_token_s * t for r in (1, 16, 256) for t in (r, 2 * r, 4 * r, 8 * r, 16 * r)})


def test_survival_is_cumulative_product_within_drafts():
    s = survival(torch.tensor([[0.5, 0.5, 0.5], [0.9, 0.1, 1.0]]), torch.tensor([3, 2]))
    assert torch.allclose(s, torch.tensor([[0.5, 0.25, 0.125], [0.9, 0.09, 0.0]]))


def test_idle_hardware_verifies_everything_and_saturated_verifies_little():
    scores = survival(torch.tensor([PROFILE] * 4), torch.full((4,), 7))
    idle = choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0)
    assert idle.tolist() == [7, 7, 7, 7]
    busy = choose_verify_lengths(scores, _table(5e-3, fixed_s=0.0), 4, 4, 4.0)  # cost proportional to tokens
    assert busy.tolist() == [0, 0, 0, 0]  # every position's survival < 1 token per token of cost


def test_confident_request_gets_more_positions_and_selection_is_a_prefix():
    probs = torch.tensor([[0.95] * 6, [0.3] * 6])
    scores = survival(probs, torch.tensor([6, 6]))
    lengths = choose_verify_lengths(scores, _table(4e-3, fixed_s=0.01), 2, 2, 2.0)
    assert lengths[0] > lengths[1]
    chosen = scores >= scores.flatten().sort(descending=True).values[lengths.sum() - 1]
    for b in range(2):  # the positions taken are the first lengths[b] of each row
        assert chosen[b, : lengths[b]].all()


def test_policy_under_1ms_for_256_requests_by_8_positions():
    torch.manual_seed(0)
    scores = survival(torch.rand(256, 8), torch.full((256,), 8))
    table = _table(2e-5)
    choose_verify_lengths(scores, table, 256, 256, 256.0)
    t = time.perf_counter()
    for _ in range(20):
        choose_verify_lengths(scores, table, 256, 256, 256.0)
    assert (time.perf_counter() - t) / 20 < 1e-3 * 3  # budget 1 ms; x3 headroom for a loaded CI machine


def test_cost_table_interpolates_extrapolates_and_refreshes():
    t = CostTable({(1, 1): 0.010, (1, 5): 0.014, (8, 8): 0.02, (8, 40): 0.05})
    assert abs(t.lookup(1, 3) - 0.012) < 1e-9
    assert abs(t.lookup(1, 9) - 0.018) < 1e-9  # last slope continued
    assert abs(t.lookup(7, 24) - 0.035) < 1e-9  # nearest request count: 8
    assert torch.allclose(t.lookup_many(1, torch.tensor([1, 3, 9])), torch.tensor([0.010, 0.012, 0.018],
                                                                                  dtype=torch.float64))
    t.observe(1, 5, 0.024)  # 1.714x the table: the (1, 5) cell moves 10% of the way
    assert abs(t.seconds[(1, 5)] - 0.014 * (1 + 0.1 * (0.024 / 0.014 - 1))) < 1e-9
    # the row's other cell by the level's share of it; other rows not at all
    assert abs(t.seconds[(1, 1)] - 0.010 * (1 + LEVEL_SHARE * 0.1 * (0.024 / 0.014 - 1))) < 1e-9
    assert t.seconds[(8, 8)] == 0.02
    assert CostTable.from_json(t.to_json()).seconds == t.seconds
    before = t.seconds[(1, 1)]
    t.observe(1, 1, 2 * before, count=8)  # the mean of 8 steps at 2x: as far as 8 single observations would go
    assert abs(t.seconds[(1, 1)] - before * (1 + (1 - 0.9 ** 8) * (2 - 1))) < 1e-9


def test_a_row_measured_in_a_slow_hour_follows_its_plain_cell_and_keeps_its_marginal_rows():
    """An engine that does not speculate refreshes only the plain cell. The machine runs 1.4x faster than
    at the warm-up: the row's other cells (and its ragged cells) must follow, or one verified row is priced
    at the two cells' gap (measured: 80 against 121 ms at 2 requests on an AVX2 CPU, ~20 ms a row where it
    cost ~2). Other rows stay."""
    t = CostTable({(2, 2): 0.126, (2, 4): 0.130, (2, 6): 0.134, (8, 8): 0.2}, ragged={(2, 1): 0.020})
    for _ in range(100):
        t.observe(2, 2, 0.126 / 1.4)
    assert abs(t.lookup(2, 2) - 0.090) < 1e-4
    assert t.lookup(2, 3) - t.lookup(2, 2) < 0.004  # truth 1.4 ms; the read cell alone: 20 ms
    assert t.ragged[(2, 1)] < 0.017 and t.seconds[(8, 8)] == 0.2


def test_integer_lookups_read_a_dense_table_equal_to_the_interpolation_and_refreshed_with_it():
    rng = np.random.default_rng(0)
    for row_block, block_rows in ((1, None), (32, None), (32, 3.5)):
        t = CostTable({(r, r * (1 + e)): float(rng.uniform(0.01, 0.5)) for r in (1, 4, 32) for e in (0, 1, 4, 8)},
                      row_block=row_block, block_rows=block_rows)
        for r in (1, 3, 9, 40):
            tokens = rng.integers(0, 3000, size=50)
            assert np.array_equal(t.lookup_array(r, tokens), t._interpolate(r, tokens))
            assert [t.lookup(r, int(n)) for n in tokens] == t._interpolate(r, tokens).tolist()  # to the bit
            start = int(tokens[0])
            assert np.array_equal(t.lookup_range(r, start, 40), t._interpolate(r, np.arange(start, start + 40)))
        far = np.arange(65_530, 65_545)  # a run that ends past the dense range
        assert np.array_equal(t.lookup_range(4, 65_530, 15), t._interpolate(4, far))
        assert t.lookup(4, 70_000) == float(t._interpolate(4, np.array([70_000]))[0])  # past the dense range
        assert t.lookup(4, 7.5) == float(t._interpolate(4, np.array([7.5]))[0])  # not a token count: interpolated
        before = t.lookup(4, 8)
        t.observe(4, 8, 2 * before)  # a refresh moves the cell, and the dense table with it
        assert t.lookup(4, 8) > before and t.lookup(4, 8) == float(t._interpolate(4, np.array([8]))[0])


def test_a_refresh_drops_the_cached_curves_of_its_row_only_and_every_lookup_reads_the_refreshed_cells():
    rng = np.random.default_rng(1)
    cells = {(r, r * (1 + e)): float(rng.uniform(0.01, 0.5)) for r in (1, 4, 32) for e in (0, 1, 16)}
    t = CostTable(dict(cells), {(r, e): 0.01 for r in (1, 4) for e in (1, 7)}, row_block=32)
    reads = lambda table: ([table.lookup(r, n) for r in (1, 4, 32) for n in range(1, 600, 7)]
                           + [table.row_slope(r, 17) for r in (1, 4, 32)]
                           + list(table.ragged_array(4, np.arange(9))) + list(table.lookup_range(1, 0, 64)))
    reads(t)
    kept = {k: v for k, v in t._curves.items() if k[0] == 32 or (k[0] in ("lists", "dense") and k[1] == 32)}
    for r, n in ((4, 4), (4, 9), (1, 17), (4, 70)):
        t.observe(r, n, 1.5 * t.lookup(r, n))
        assert all(t._curves.get(k) is v for k, v in kept.items())  # row 32 was not refreshed: its curves stay
        fresh = CostTable(dict(t.seconds), dict(t.ragged), row_block=32)
        assert reads(t) == reads(fresh)


def test_refresh_keeps_the_slope_when_steps_fall_between_cells():
    """Observations that agree with a steeper truth must steepen the curve, wherever they fall."""
    t = CostTable({(32, 32): 0.100, (32, 64): 0.110})
    truth = lambda n: 0.100 + (n - 32) * 0.002  # noqa: E731  (the real marginal token costs 2 ms, not 0.3)
    for _ in range(400):
        for n in (36, 40, 44, 52, 60):  # adaptive steps: never exactly on a grid cell
            t.observe(32, n, truth(n))
    assert abs(t.lookup(32, 40) - truth(40)) < 0.004 and abs(t.lookup(32, 60) - truth(60)) < 0.004
    assert t.lookup(32, 64) - t.lookup(32, 32) > 0.05  # the old nearest-cell update: ~0.03 (half the true slope)


def test_row_blocks_make_the_cost_a_staircase():
    """Batch-invariant steps compute 32-row blocks that cost about the same however full: a few tokens
    past a block boundary cost the next whole block."""
    t = CostTable({(32, 32): 0.140, (32, 64): 0.200, (32, 96): 0.320, (16, 16): 0.080, (16, 32): 0.095},
                  row_block=32)
    assert t.lookup(32, 33) == t.lookup(32, 45) == t.lookup(32, 64) == 0.200
    assert abs(t.lookup(16, 24) - 0.0875) < 1e-9  # within one block: interpolated as before
    # (32, 96), 32 sequences of 3 rows, fills 3 whole blocks (the runner splits a sequence between blocks)
    assert t.lookup(32, 65) == t.lookup(32, 96) == 0.320
    t.observe(32, 45, 0.230)  # 15% over the 64-row cell: that cell moves 10% of the way, the row by the level
    assert abs(t.seconds[(32, 64)] - 0.203) < 1e-9
    assert abs(t.seconds[(32, 32)] - 0.140 * (1 + LEVEL_SHARE * 0.015)) < 1e-9
    assert CostTable.from_json(t.to_json()).row_block == 32
    # the policy at 32 requests: 4 confident requests (0.9) do not pay for opening a second block
    # (and the other 28 requests' positions, at 0.05, do not fill it up to paying)
    p = torch.full((32, 4), 0.05)
    p[:4] = 0.9
    scores = survival(p, torch.full((32,), 4))
    assert int(choose_verify_lengths(scores, t, 32, 32, 32.0).sum()) == 0
    smooth = CostTable(dict(t.seconds))  # interpolating between blocks prices them at a fraction
    assert int(choose_verify_lengths(scores, smooth, 32, 32, 32.0).sum()) > 0


def test_ragged_steps_refresh_the_ragged_cost_of_their_row_and_leave_the_uniform_cells():
    """The warm-up measured ragged cells only at 2 requests (80 ms, read at every count); ragged steps at
    8 requests that run 2 ms over their uniform lookup teach that row its own cells, towards 2 ms, and
    leave the uniform cells and the 2-request cells as they were."""
    t = CostTable({(2, 2): 0.16, (2, 4): 0.17, (8, 8): 0.20, (8, 16): 0.21}, ragged={(2, 1): 0.08, (2, 7): 0.08})
    uniform, two = dict(t.seconds), dict(t.ragged)
    assert float(t.ragged_array(8, 3)) == 0.08
    for i in range(300):
        t.observe_ragged(8, (1, 3, 7)[i % 3], 0.002)
    assert all(abs(float(t.ragged_array(8, e)) - 0.002) < 1e-3 for e in (1, 3, 7))
    assert t.seconds == uniform and {k: v for k, v in t.ragged.items() if k[0] == 2} == two
    assert float(t.ragged_array(2, 3)) == 0.08 and float(t.ragged_array(8, 0)) == 0.0
    assert CostTable.from_json(t.to_json()).ragged == t.ragged


def test_ragged_lookup_interpolates_in_rows_and_is_zero_without_drafts():
    t = CostTable({(4, 4): 0.04, (4, 8): 0.05, (16, 16): 0.1, (64, 64): 0.3},
                  ragged={(4, 1): 0.004, (4, 7): 0.010, (16, 1): 0.02})
    # beyond the last cell (7 rows) the last segment's slope goes on: a draft of 15 is not priced as one of 7
    assert t.ragged_array(4, np.array([0, 1, 4, 7, 9, 15])).round(4).tolist() == [0.0, 0.004, 0.007, 0.010, 0.012,
                                                                                  0.018]
    # the uniform lookups' row; where it has no ragged cells (64: cut by the budget), the nearest that has
    assert float(t.ragged_array(6, 1)) == 0.004 and float(t.ragged_array(14, 1)) == 0.02
    assert float(t.ragged_array(50, 1)) == 0.02
    assert CostTable({(1, 1): 0.04}).ragged_array(4, np.array([3])).tolist() == [0.0]  # old tables: none


def test_a_noisy_ragged_cell_never_makes_more_rows_look_cheaper():
    """The H200's table (benchmarks/results/gpu_check_h200_4119ce9.json) had, at 32 requests, 40 ms over the
    uniform lookup for 1 extra row and 22 ms for 7: read as measured, verifying 7 rows looked cheaper than 1.
    The lookup pools such cells (as the uniform curves are pooled in tokens); ordered cells stay as they are."""
    t = CostTable({(4, 4): 0.015, (4, 8): 0.016, (32, 32): 0.017, (32, 64): 0.021},
                  ragged={(32, 1): 0.040, (32, 7): 0.022, (4, 1): 0.004, (4, 7): 0.010})
    priced = t.ragged_array(32, np.array([1, 4, 7]))
    assert np.allclose(priced, 0.031) and (np.diff(priced) >= 0).all()
    assert t.ragged_array(4, np.array([1, 7])).round(4).tolist() == [0.004, 0.010]


def test_a_ragged_step_must_pay_for_itself_a_uniform_one_does_not_pay_it():
    """One doubtful draft that would pay at the uniform price is dropped once the step's raggedness is
    priced; when every request verifies the same count the step stays uniform and pays nothing extra."""
    table = CostTable({(4, t): 0.040 + 0.002 * t for t in (4, 8, 16, 32)})
    one = survival(torch.tensor([[0.6, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([1, 0, 0, 0]))
    assert choose_verify_lengths(one, table, 4, 4, 4.0).tolist() == [1, 0, 0, 0]
    table.ragged = {(4, 1): 0.006, (4, 7): 0.012}
    assert choose_verify_lengths(one, table, 4, 4, 4.0).tolist() == [0, 0, 0, 0]
    every = survival(torch.full((4, 2), 0.6), torch.full((4,), 2))
    uniform = choose_verify_lengths(every, table, 4, 4, 4.0)
    assert uniform.min() > 0 and uniform.min() == uniform.max()


def test_a_step_that_also_prefills_prices_drafts_as_decode_rows_with_the_ragged_cost():
    """Next to a prefill chunk a verified row is read on the decode curve of the B decoding requests, not at the
    mixed step's token count (where this table's slope is 10x steeper), and it pays the ragged cost as in a pure
    decode step: their attention still splits by query length (a 1-draft verify beside a 24-256-token chunk
    added 5-11 ms to 8-31 decoding requests, AMD EPYC). `mixed_ragged=False` is the price before that."""
    ragged = {(4, 1): 0.006, (4, 7): 0.012}
    table = CostTable({(4, t): 0.040 + 0.002 * t for t in (4, 8, 16)} | {(4, t): 0.020 * t for t in (64, 256)},
                      ragged=ragged)
    one = survival(torch.tensor([[0.6, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([1, 0, 0, 0]))
    assert choose_verify_lengths(one, table, 4, 4, 4.0).tolist() == [0, 0, 0, 0]
    worth = 4 * table.lookup(5, 4 + 128) / table.lookup(4, 4)  # the step's work at the decode rate (adaptive.py)
    assert choose_verify_lengths(one, table, 5, 4 + 128, worth).tolist() == [0, 0, 0, 0]  # mixed, read as decode
    assert choose_verify_lengths(one, table, 5, 4 + 128, worth, prefill_tokens=128).tolist() == [0, 0, 0, 0]
    assert choose_verify_lengths(one, table, 5, 4 + 128, worth, prefill_tokens=128,
                                 mixed_ragged=False).tolist() == [1, 0, 0, 0]
    table.ragged = {}  # without the ragged cost, the decode rows' price alone: the draft pays
    assert choose_verify_lengths(one, table, 5, 4 + 128, worth, prefill_tokens=128).tolist() == [1, 0, 0, 0]
    every = survival(torch.full((4, 2), 0.6), torch.full((4,), 2))  # all verify the same count: no ragged cost
    table.ragged = ragged
    uniform = choose_verify_lengths(every, table, 5, 4 + 128, worth, prefill_tokens=128)
    assert uniform.min() > 0 and uniform.min() == uniform.max()


def test_the_depth_plan_of_a_step_that_prefills_pays_at_least_the_decode_rows():
    """A depth plan next to a prefill chunk reads its rows on the step's token curve; where that curve is flat
    (the chunk's last row block has room), the rows still cost what they do as decode rows of the decoding
    requests, so a doubtful position is not drafted for all of them."""
    flat = {(5, t): 0.300 for t in (4, 64, 128, 256)}  # the chunk's step: flat over these rows
    table = CostTable({(4, t): 0.040 + 0.004 * t for t in (4, 8, 16, 32)} | flat)
    scores = survival(torch.full((4, 7), 0.3), torch.full((4,), 7))
    worth = 4 * table.lookup(5, 4 + 128) / table.lookup(4, 4)
    free = choose_verify_lengths(scores, table, 5, 4 + 128, worth, draft_step_s=0.001)
    assert free.tolist() == [3] * 4  # deeper positions do not pay their draft iterations
    floored = choose_verify_lengths(scores, table, 5, 4 + 128, worth, draft_step_s=0.001, decode_rows_floor=True)
    assert floored.tolist() == [0] * 4  # 4 ms a decode row for 0.3 of a token


def test_cost_curve_is_made_monotone():
    t = CostTable({(1, 1): 0.040, (1, 2): 0.042, (1, 3): 0.048, (1, 5): 0.039, (1, 9): 0.042})
    curve = [t.lookup(1, n) for n in (1, 2, 3, 5, 9)]
    assert curve == sorted(curve) and abs(curve[-1] - 0.043) < 1e-3


def test_drafting_cost_makes_the_batch_draft_shallower():
    scores = survival(torch.tensor([PROFILE] * 4), torch.full((4,), 7))
    free = choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0)
    priced = choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0, draft_step_s=0.004)
    assert free.tolist() == [7] * 4 and 0 < priced.max() < 7
    # a draft as slow as the target step never pays: no drafting at all
    assert choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0, draft_step_s=0.05).tolist() == [0] * 4


def test_drafting_host_time_is_paid_once_by_a_step_that_drafts():
    """A marginal draft (first position 0.3, a cheap drafter) pays while drafting costs the host nothing;
    a host cost of a few percent of the step tips it, however few requests draft."""
    scores = survival(torch.tensor([[0.3] + [0.2] * 6] * 4), torch.full((4,), 7))
    table = _table(1e-4, fixed_s=0.06)  # ~60 ms memory-bound steps
    free = choose_verify_lengths(scores, table, 4, 4, 4.0, draft_step_s=0.01)
    assert free.tolist() == [1] * 4
    priced = choose_verify_lengths(scores, table, 4, 4, 4.0, draft_step_s=0.01, draft_host_s=0.01)
    assert priced.tolist() == [0] * 4
    # the verify choice (drafts already made) does not read it
    assert choose_verify_lengths(scores, table, 4, 4, 4.0, draft_host_s=0.01).sum() > 0


def test_a_plan_reports_its_unscaled_time_and_the_time_scales_move_the_choice():
    """The marginal draft above: the plan that drafts one position each reports the step it priced (the
    table's step with 8 tokens, one draft iteration), 11% above not drafting. Steps that drafted running 15%
    over that, or plain steps running 15% under the table, make not drafting the better choice; the
    reported time stays unscaled."""
    scores = survival(torch.tensor([[0.3] + [0.2] * 6] * 4), torch.full((4,), 7))
    table = _table(1e-4, fixed_s=0.06)
    plan = plan_verify_lengths(scores, table, 4, 4, 4.0, draft_step_s=0.01)
    assert plan.lengths.tolist() == [1] * 4
    assert abs(plan.seconds - (table.lookup(4, 8) + 0.01)) < 1e-12
    for scale in ({"spec_scale": 1.15}, {"plain_scale": 0.85}):
        scaled = plan_verify_lengths(scores, table, 4, 4, 4.0, draft_step_s=0.01, **scale)
        assert scaled.lengths.tolist() == [0] * 4, scale
        assert scaled.seconds == table.lookup(4, 4)
    assert plan_verify_lengths(scores, table, 4, 4, 4.0, draft_step_s=0.01, spec_scale=0.9).lengths.sum() >= 4


def test_a_long_catch_up_keeps_that_request_from_drafting_not_the_others():
    """The most confident request ranks first; if its first draft must feed a whole prompt (catch-up) it
    stays out, and the cheap requests ranked after it still draft."""
    scores = survival(torch.tensor([[0.95] * 7] + [PROFILE] * 3), torch.full((4,), 7))
    catch_up = torch.tensor([0.2, 0.0, 0.0, 0.0])  # seconds: four times the target's step
    free = choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0, draft_step_s=0.004)
    priced = choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0, draft_step_s=0.004, request_s=catch_up)
    assert free.min() > 0
    assert priced[0] == 0 and priced[1:].min() > 0
    # a catch-up as cheap as nothing changes nothing
    same = choose_verify_lengths(scores, _table(1e-6), 4, 4, 4.0, draft_step_s=0.004, request_s=torch.zeros(4))
    assert torch.equal(same, free)


def test_the_bound_that_skips_the_depth_plans_search_changes_no_plan(monkeypatch):
    """Where drafting cannot pay by the bound (budget.drafting_cannot_pay), the search would have drafted
    nothing too: random batches, tables, draft prices, catch-ups and steps that prefill plan the same with and
    without it, and the bound decides a good share of them alone."""
    import workers.budget as budget
    gen = torch.Generator().manual_seed(0)
    cases, decided = [], 0
    for _ in range(300):
        B = int(torch.randint(1, 9, (1,), generator=gen))
        scores = survival(torch.rand(B, 7, generator=gen) ** 2, torch.randint(0, 8, (B,), generator=gen))
        fixed = float(torch.rand(1, generator=gen)) * 0.05
        table = CostTable({(r, t): fixed + 0.001 * float(torch.rand(1, generator=gen)) * t
                           for r in (1, 8, 16) for t in (r, 2 * r, 4 * r, 8 * r, 64 * r)})
        prefill = int(torch.randint(0, 2, (1,), generator=gen)) * 64
        kw = dict(fixed_s=0.002, draft_step_s=0.001 + 0.02 * float(torch.rand(1, generator=gen)),
                  request_s=torch.rand(B, generator=gen) * 0.01, draft_host_s=0.001,
                  decode_rows_floor=bool(prefill), spec_scale=0.9 + 0.2 * float(torch.rand(1, generator=gen)))
        cases.append((scores, table, B + bool(prefill), B + prefill, float(B), kw))
    bounded = [plan_verify_lengths(*c[:5], **c[5]) for c in cases]
    decided = sum(budget.drafting_cannot_pay(*_bound_inputs(c)) for c in cases if bool((c[0] > 0).any()))
    monkeypatch.setattr(budget, "drafting_cannot_pay", lambda *a, **k: False)
    searched = [plan_verify_lengths(*c[:5], **c[5]) for c in cases]
    assert all(torch.equal(a.lengths, b.lengths) and a.seconds == b.seconds for a, b in zip(bounded, searched))
    assert 30 < decided < 270  # both outcomes are exercised
    assert sum(bool(p.lengths.any()) for p in searched) > 30


def test_the_one_request_verify_choice_is_the_search_s():
    """c=1's verify choice in plain Python (budget._one_request) chooses and prices as the search does."""
    import workers.budget as budget
    gen = torch.Generator().manual_seed(1)
    cases = []
    for _ in range(300):
        # estimates >= 0.2: survival below ~1e-8 meets the search's tie-break (`_ranked`) in a padded batch
        scores = survival(0.2 + 0.8 * torch.rand(1, 7, generator=gen), torch.randint(0, 8, (1,), generator=gen))
        fixed = float(torch.rand(1, generator=gen)) * 0.05
        table = CostTable({(1, t): fixed + 0.003 * float(torch.rand(1, generator=gen)) * t for t in (1, 2, 4, 8)})
        scales = dict(plain_scale=0.9 + 0.2 * float(torch.rand(1, generator=gen)),
                      spec_scale=0.9 + 0.2 * float(torch.rand(1, generator=gen)))
        cases.append((scores, table, 1, 1, 1.0, 0.002 * float(torch.rand(1, generator=gen)), scales))
    fast = [plan_verify_lengths(*c[:6], **c[6]) for c in cases]
    real = budget.plan_verify_lengths  # the search, run with a second request that has no drafts

    def searched(scores, *args, **kw):
        padded = torch.cat([scores, torch.zeros(1, scores.shape[1])])  # a second request with no drafts
        plan = real(padded, *args, **kw)
        return plan.lengths[:1], plan.seconds

    slow = [searched(*c[:6], **c[6]) for c in cases]
    assert all(torch.equal(f.lengths, s[0]) and abs(f.seconds - s[1]) < 1e-12 for f, s in zip(fast, slow))
    assert 30 < sum(int(f.lengths[0]) > 0 for f in fast) < 270


def test_the_verify_choice_apart_plans_to_the_bit_as_the_search():
    """The trim's verify choice (no drafting prices) runs budget._verify_choice, the search without its masks:
    random batches, tables with ragged cells and a group cost, steps that prefill, time scales all plan the
    same lengths and seconds as the search itself (run with catch-ups of 0, which take no position's price)."""
    gen = torch.Generator().manual_seed(2)
    cases = []
    for _ in range(300):
        B = int(torch.randint(1, 9, (1,), generator=gen))
        scores = survival(torch.rand(B, 7, generator=gen) ** 0.5, torch.randint(0, 8, (B,), generator=gen))
        fixed = float(torch.rand(1, generator=gen)) * 0.05
        rand = lambda: float(torch.rand(1, generator=gen))  # noqa: E731
        table = CostTable({(r, t): fixed + 0.04 * rand() * t for r in (1, 4, 8) for t in (r, 2 * r, 4 * r, 8 * r)},
                          ragged={(r, e): 0.003 * rand() * e for r in (4, 8) for e in (1, 7)},
                          group_s=0.002 * rand() * (rand() < 0.5))
        prefill = int(torch.randint(0, 2, (1,), generator=gen)) * 64
        kw = dict(fixed_s=0.002 * rand(), prefill_tokens=prefill, mixed_ragged=rand() < 0.5,
                  plain_scale=0.9 + 0.2 * rand(), spec_scale=0.9 + 0.2 * rand())
        cases.append((scores, table, B + bool(prefill), B + prefill, float(B), kw))
    apart = [plan_verify_lengths(*c[:5], **c[5]) for c in cases]
    searched = [plan_verify_lengths(*c[:5], request_s=torch.zeros(c[0].shape[0]), **c[5]) for c in cases]
    assert all(torch.equal(a.lengths, s.lengths) and a.seconds == s.seconds for a, s in zip(apart, searched))
    assert 30 < sum(bool(p.lengths.any()) for p in searched) < 270  # both outcomes are exercised
    assert sum(bool(p.lengths.any()) and len(set(p.lengths.tolist())) > 1 for p in searched) > 10  # ragged plans


def _bound_inputs(case) -> tuple:
    """The bound's arguments for one case of the test above, as plan_verify_lengths builds them."""
    import workers.budget as budget
    scores, table, requests, base_tokens, emitted, kw = case
    B, K = scores.shape
    flat = scores.numpy().astype(np.float64).ravel()
    ranked = flat[_ranked(flat, K)]
    step_s = budget.step_seconds(table, requests, base_tokens, B, len(ranked), kw["fixed_s"],
                                 decode_rows_floor=kw["decode_rows_floor"])
    return (ranked, step_s, emitted, 1.0, kw["spec_scale"], kw["draft_step_s"] + kw["draft_host_s"],
            float(kw["request_s"].min()))


def test_fixed_step_overhead_makes_speculation_more_attractive():
    scores = survival(torch.tensor([PROFILE] * 16), torch.full((16,), 7))
    table = _table(1e-3, fixed_s=0.0)  # compute-bound: each position costs as much as a token
    lean = choose_verify_lengths(scores, table, 16, 16, 16.0)
    heavy = choose_verify_lengths(scores, table, 16, 16, 16.0, fixed_s=0.05)
    assert heavy.sum() > lean.sum()


def test_shared_capacity_goes_to_the_most_likely_positions_across_batches():
    confident = survival(torch.full((2, 4), 0.9), torch.full((2,), 4))
    doubtful = survival(torch.full((3, 4), 0.3), torch.full((3,), 4))
    caps = allocate_capacity([confident, doubtful], 10)
    assert caps[0].tolist() == [4, 4] and caps[1].tolist() == [1, 1, 0]  # 0.9^4=0.66 beats 0.3
    assert sum(int(c.sum()) for c in caps) == 10
    assert [c.tolist() for c in allocate_capacity([confident], 100)] == [[4, 4]]


def test_priced_capacity_prefers_the_batch_where_verifying_is_nearly_free():
    confident = survival(torch.full((2, 4), 0.9), torch.full((2,), 4))
    doubtful = survival(torch.full((2, 4), 0.5), torch.full((2,), 4))
    steep = _table(5e-3, fixed_s=0.0)  # compute-bound: each position costs as much as a token
    flat = _table(1e-6)  # memory-bound: positions are nearly free
    caps = allocate_capacity([confident, doubtful], 4, [(steep, 2, 2), (flat, 2, 2)])
    assert caps[1].sum() == 4 and caps[0].sum() == 0
    assert [c.tolist() for c in allocate_capacity([confident, doubtful], 4)] == [[2, 2], [0, 0]]  # unpriced


def test_query_lengths_count_the_distinct_lengths_after_each_ranked_position():
    from workers.budget import _query_lengths

    rng = np.random.default_rng(0)
    for _ in range(20):
        B, K = 5, 4
        scores = survival(torch.from_numpy(rng.uniform(0.1, 1.0, (B, K))).float(), torch.from_numpy(rng.integers(0, K + 1, B)))
        order = _ranked(scores.flatten().numpy(), K)
        take = order % K < rng.integers(0, K + 1, B)[order // K]  # a cap per request, as the policy's masks
        got = _query_lengths(order % K + 1, take, B)
        lengths = np.zeros(B, dtype=int)
        for i, pos in enumerate(order):
            lengths[pos // K] += int(take[i])
            assert got[i] == len(set((1 + lengths).tolist()))


def test_each_query_length_group_beyond_two_is_priced():
    """A third distinct verify length opens another padded attention group (CostTable.group_s): priced
    above what its position adds, the choice stops at two lengths."""
    table = CostTable({(4, t): 0.040 + 0.001 * t for t in (4, 8, 16)}, ragged={(4, 1): 0.001, (4, 7): 0.001})
    s = survival(torch.tensor([[0.95, 0.9, 0.85], [0.9, 0.0, 0.0], [0.0] * 3, [0.0] * 3]), torch.tensor([3, 1, 0, 0]))
    assert choose_verify_lengths(s, table, 4, 4, 4.0).tolist() == [3, 1, 0, 0]  # query lengths 4, 2, 1
    table.group_s = 0.050
    assert choose_verify_lengths(s, table, 4, 4, 4.0).tolist() == [1, 1, 0, 0]  # lengths 2 and 1
    assert choose_verify_lengths(s, table, 4, 4, 4.0, draft_step_s=1e-6).tolist() == [3, 1, 0, 0]  # depth plan: not read
