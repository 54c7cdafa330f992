"""benchmarks/http_k_ab.py's ratios (the benchmark itself serves the real model through Ray Serve, not in CI)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from http_k_ab import _app_args, ratios  # noqa: E402

from cluster.config import ClusterConfig  # noqa: E402


def _row(r: int, k: int, workload: str, c: int, tps: float) -> dict:
    return {"round": r, "k": k, "workload": workload, "concurrency": c, "output_tokens_per_s": tps}


def test_each_k_is_read_against_the_first_in_its_own_round_and_point():
    rows = [_row(0, 7, "sharegpt", 1, 10.0), _row(0, 15, "sharegpt", 1, 11.0), _row(0, 7, "sharegpt", 4, 20.0),
            _row(0, 15, "sharegpt", 4, 19.0), _row(1, 7, "sharegpt", 1, 20.0), _row(1, 15, "sharegpt", 1, 21.0)]
    assert ratios(rows, [7, 15]) == {"sharegpt c=1": {"k=15 / k=7": [1.1, 1.05]},
                                     "sharegpt c=4": {"k=15 / k=7": [0.95]}}


def test_the_app_is_a_cluster_config_of_adaptive_ngram_at_that_k():
    spec = ClusterConfig.model_validate(_app_args(15)).engine.spec
    assert (spec.method, spec.k, spec.verify) == ("ngram", 15, "adaptive")
