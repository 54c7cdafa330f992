"""The target's cost table refreshed online (workers/online_costs.py)."""
import numpy as np

from workers.cost_table import CostTable
from workers.online_costs import (LEVEL_BOUNDS, OBSERVE_BATCH, GroupCostFit, OnlineTargetCosts, extra_groups,
                                  ragged_extra)


def _costs() -> OnlineTargetCosts:
    return OnlineTargetCosts(CostTable({(4, t): 0.040 + 0.001 * t for t in (4, 8, 16, 32)}))


def test_uniform_steps_move_the_level_at_once_and_the_table_every_batch_of_steps():
    costs = _costs()
    row, table_s = costs.read(4, 4)
    costs.learn(row, table_s, 1.2 * table_s, 4, 4, 0, 0)
    assert costs.level[row] > 1.0 and costs.cost.lookup(4, 4) == table_s
    for _ in range(OBSERVE_BATCH - 1):
        costs.learn(row, costs.read(4, 4)[1], 1.2 * table_s, 4, 4, 0, 0)
    assert costs.cost.lookup(4, 4) > table_s  # the table took up part of the gap, the level the rest
    assert abs(costs.now(row, costs.cost.lookup(4, 4)) / table_s - 1.2) < 0.05


def test_the_level_is_bounded():
    costs = _costs()
    for _ in range(30):
        costs.observe_level(4, 100.0, 0.04)
    assert abs(costs.level[4] - LEVEL_BOUNDS[1]) < 1e-3


def test_a_disturbed_step_teaches_nothing():
    costs = _costs()
    row, table_s = costs.read(4, 4)
    costs.learn(row, table_s, 10 * table_s, 4, 4, 0, 0)
    costs.learn(row, table_s, 10 * table_s, 4, 7, 3, 0)
    assert costs.level == {} and costs.cost.group_s == 0.0 and costs.outliers.rejected == 2


def test_group_cost_is_the_slope_of_the_residual_over_extra_groups():
    assert ragged_extra([1, 1, 1]) == 0 and ragged_extra([1, 4, 2]) == 3
    assert extra_groups([1, 1, 1]) == 0 and extra_groups([1, 5, 1]) == 0 and extra_groups([1, 2, 5, 3]) == 2
    fit, rng = GroupCostFit(), np.random.default_rng(1)
    assert fit.observe(0, 0.010) is None  # no step with extra groups yet
    for i in range(400):
        x = int(rng.integers(0, 3))
        got = fit.observe(x, 0.004 + 0.003 * x + rng.normal(0, 0.002))  # table bias 4 ms, 3 ms a group
    assert abs(got - 0.003) < 0.0006
    assert GroupCostFit(min_weight=1).observe(2, -0.001) is None  # one point: no slope
