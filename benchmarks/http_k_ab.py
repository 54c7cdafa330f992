"""Adaptive n-gram draft depths side by side through HTTP: one Ray Serve application redeployed with each k in
turn (round after round, the order reversed every other round, so the machine's slow and fast spells fall on
every k alike), the official async `openai` client streaming greedy chat completions in a closed loop
(benchmarks/http_load.py) of ShareGPT and repetitive prompts. What `specfleet serve` drafts by default is chosen
on the engine's A/Bs; this checks that the choice holds behind the proxy, the ingress and the per-token streaming,
which take CPU the engine needs.

    python benchmarks/http_k_ab.py --k 4,15 --concurrency 1,4 --rounds 4 --per-slot 6 \
        --out benchmarks/results/http_k_ab_cpu.json          # ~8 min on 2 cores
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
from pathlib import Path

from http_load import closed_loop  # benchmarks/, this script's folder
from workers.workloads import repetitive_prompts, sharegpt_prompts

WORKLOADS = {"sharegpt": sharegpt_prompts, "repetitive": repetitive_prompts}


def _app_args(k: int) -> dict:
    """One replica placed as `specfleet serve` places it (router/cli.py): the machine's cores but half a CPU."""
    cpus = max(0.25, (os.cpu_count() or 1) - 0.5)
    return {"replicas": 1, "placement": {"replica_cpus": cpus},
            "engine": {"kv_cache_memory_gb": 0.5, "spec": {"method": "ngram", "k": k, "verify": "adaptive"}}}


def run(ks: list[int], concurrency: list[int], rounds: int, per_slot: int) -> list[dict]:
    import ray
    from ray import serve

    from cluster.app import build_app

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback only
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=4)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    url = f"http://127.0.0.1:{port}/v1"
    rows = []
    try:
        for r in range(rounds):
            for k in ks if r % 2 == 0 else ks[::-1]:  # each k first in every other round
                serve.run(build_app(_app_args(k)), name="specfleet", route_prefix="/")
                asyncio.run(closed_loop(url, sharegpt_prompts(8, seed=99), 4))  # warm-up (estimator, caches)
                for workload, prompts in WORKLOADS.items():
                    for c in concurrency:
                        row = asyncio.run(closed_loop(url, prompts(max(8, per_slot * c), seed=100 * r + c), c))
                        row.update(round=r, k=k, workload=workload)
                        print(json.dumps(row), flush=True)
                        rows.append(row)
                serve.delete("specfleet")
    finally:
        serve.shutdown()
        ray.shutdown()
    return rows


def ratios(rows: list[dict], ks: list[int]) -> dict[str, dict[str, list[float]]]:
    """Per workload and concurrency, each k's tokens/s over the first k's, round by round."""
    out: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row["k"] == ks[0]:
            continue
        base = next(b for b in rows if b["k"] == ks[0] and b["round"] == row["round"]
                    and b["workload"] == row["workload"] and b["concurrency"] == row["concurrency"])
        key = f"{row['workload']} c={row['concurrency']}"
        out.setdefault(key, {}).setdefault(f"k={row['k']} / k={ks[0]}", []).append(
            round(row["output_tokens_per_s"] / base["output_tokens_per_s"], 4))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", default="7,15", help="draft depths, the first the reference")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-slot", type=int, default=4, help="requests per slot of the closed loop (at least 8)")
    ap.add_argument("--out", default="benchmarks/results/http_k_ab_cpu.json")
    a = ap.parse_args()
    ks = [int(k) for k in a.k.split(",")]
    rows = run(ks, [int(c) for c in a.concurrency.split(",")], a.rounds, a.per_slot)
    table = ratios(rows, ks)
    medians = {point: {name: statistics.median(v) for name, v in by.items()} for point, by in table.items()}
    Path(a.out).write_text(json.dumps({"ks": ks, "rounds": a.rounds, "rows": rows, "ratios": table,
                                       "medians": medians}, indent=1))
    print(json.dumps(medians, indent=1))


if __name__ == "__main__":
    main()
