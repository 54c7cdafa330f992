"""benchmarks/engine_code_ab.py's parts that need no engine: the base commit's `workers` package imported under a
name of its own, and the per-cycle ratios (the benchmark itself serves real models, not in CI)."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from engine_code_ab import BASE_PACKAGE, base_workers, summary  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_the_base_package_is_its_own_modules_throughout():
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    base_workers(head)
    import importlib

    import workers.adaptive

    base_adaptive = importlib.import_module(f"{BASE_PACKAGE}.adaptive")
    assert base_adaptive.AdaptiveVerifier is not workers.adaptive.AdaptiveVerifier
    assert Path(base_adaptive.__file__).parent.name == BASE_PACKAGE
    # its own imports resolve to its own package, not this tree's
    assert base_adaptive.CostTable.__module__ == f"{BASE_PACKAGE}.cost_table"


def _run(tps: float, policy_ms: float) -> dict:
    return {"tokens_per_s": tps, "step_times": {"policy_ms": policy_ms}}


def test_ratios_are_medians_of_each_cycles_ratio_against_the_best_fixed_k_of_that_cycle():
    runs = {"fixed:1": [_run(50, 0), _run(40, 0), _run(60, 0)], "fixed:2": [_run(45, 0), _run(44, 0), _run(54, 0)],
            "adaptive": [_run(49, 0.4), _run(44, 0.5), _run(57, 0.45)],
            "base": [_run(48, 0.8), _run(43, 0.7), _run(60, 0.75)]}
    out = summary(runs)
    assert out["adaptive_over_base"] == round(sorted([49 / 48, 44 / 43, 57 / 60])[1], 4)
    assert out["adaptive_over_best_fixed"] == round(sorted([49 / 50, 44 / 44, 57 / 60])[1], 4)
    assert out["base_over_best_fixed"] == round(sorted([48 / 50, 43 / 44, 60 / 60])[1], 4)
    assert out["adaptive_policy_ms"] == 0.45 and out["base_policy_ms"] == 0.75


def test_no_speculation_is_a_peer_as_fixed_k_0():
    runs = {"fixed:0": [_run(60, 0), _run(50, 0)], "fixed:1": [_run(50, 0), _run(52, 0)],
            "adaptive": [_run(57, 0.4), _run(52, 0.5)], "base": [_run(54, 0.8), _run(52, 0.7)]}
    assert summary(runs)["adaptive_over_best_fixed"] == round((57 / 60 + 52 / 52) / 2, 4)  # the median of two
