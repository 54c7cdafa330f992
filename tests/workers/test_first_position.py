import math

from workers.first_position import (LEVEL_MEMORY, LEVEL_MIN_LABELS, LEVEL_PRIOR, LEVEL_Z, FirstPositionLevel)


def test_without_outcomes_the_level_is_the_estimates_running_mean():
    level = FirstPositionLevel()
    assert level.level(0.17) == 0.17
    level.fade()  # nothing to fade
    assert level.level(0.17) == 0.17


def test_the_level_follows_the_outcomes_not_the_estimates():
    """Estimates of 0.2, drafts accepted at 0.35: the level reads ~0.35 plus its small bonus."""
    level = FirstPositionLevel()
    for step in range(400):
        level.observe(2, 1 if step % 10 == 0 else 0)  # an earlier load, accepted at 0.05: it fades
    for step in range(2000):
        level.observe(2, 2 if step % 20 < 7 else 0)  # 0.35
    n = level.labels + LEVEL_PRIOR
    mean = (level.accepted + LEVEL_PRIOR * 0.2) / n
    assert abs(level.level(0.2) - (mean + LEVEL_Z * math.sqrt(mean * (1 - mean) / n))) < 1e-12
    assert 0.33 < mean < 0.37 and level.level(0.2) - mean < 0.03
    assert abs(level.labels - LEVEL_MEMORY) < 2  # 4,800 labels seen, older ones faded


def test_idle_plans_widen_the_bonus_to_a_bound_and_keep_the_mean():
    level = FirstPositionLevel()
    level.observe(400, 100)
    busy = level.level(0.25)
    for _ in range(2000):
        level.fade()
    assert abs(level.labels - LEVEL_MIN_LABELS) < 1e-9 and abs(level.accepted / level.labels - 0.25) < 1e-9
    idle = level.level(0.25)
    n = LEVEL_MIN_LABELS + LEVEL_PRIOR
    assert busy < idle and abs(idle - (0.25 + LEVEL_Z * math.sqrt(0.25 * 0.75 / n))) < 1e-9  # ~0.1 above


def test_a_disabled_level_reads_the_estimates():
    level = FirstPositionLevel(enabled=False)
    level.observe(100, 90)
    assert level.level(0.2) == 0.2
