"""The simulator reproduces the seed-notes phenomenon and runs the engine's own policy code."""
from workers.simulator import Roofline, simulate


def test_fixed_k7_loses_to_no_speculation_at_high_load_and_adaptive_does_not():
    hw = Roofline()
    off = simulate("off", 0, 256, hw, steps=300)
    k7 = simulate("fixed", 7, 256, hw, steps=300)
    ada = simulate("adaptive", 7, 256, hw, steps=300)
    assert k7.tokens_per_s < 0.8 * off.tokens_per_s  # seed notes: -33% at 256 requests
    assert ada.tokens_per_s >= 0.98 * off.tokens_per_s
    assert ada.verified_per_step < 0.5 * k7.verified_per_step


def test_low_load_adaptive_verifies_nearly_everything():
    hw = Roofline()
    k7 = simulate("fixed", 7, 2, hw, steps=1500)
    ada = simulate("adaptive", 7, 2, hw, steps=1500)
    assert ada.tokens_per_s >= 0.95 * k7.tokens_per_s
    assert ada.verified_per_step > 0.7 * k7.verified_per_step


def test_shared_drafter_global_allocation_beats_the_fixed_local_split():
    from workers.simulator_cluster import simulate_shared

    hw, shifts = Roofline(), [1.5, -1.5]
    kw = dict(steps=400, warmup_steps=150)
    local = simulate_shared("local", shifts, 8, 16, hw, **kw)
    glob = simulate_shared("global", shifts, 8, 16, hw, **kw)
    off = simulate_shared("off", shifts, 8, 16, hw, **kw)
    assert glob > 1.02 * local and local > off
