"""Sweep the simulator (workers/simulator.py) over concurrency 1..512 for 8B and 70B dense targets on an
H200 roofline: no speculation, fixed k = 1..7, adaptive (k <= 7). Then 4 replicas sharing one drafter
(workers/simulator_cluster.py): global vs local allocation of its capacity. Writes JSON and two PNGs.
Usage: python benchmarks/simulate.py benchmarks/results/simulator_h200.json docs/simulator_h200.png"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plot_engine import concurrency_axis  # noqa: E402  (same folder: run as a script)
from workers.simulator import Roofline, summary, sweep  # noqa: E402
from workers.simulator_cluster import compare  # noqa: E402

TARGETS = {"8B (1 GPU)": Roofline(params=8e9, gpus=1),
           "70B (TP4)": Roofline(params=70e9, gpus=4, kv_bytes_per_token=327680)}
CONC = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
SHARED_SHIFTS = [1.5, 0.5, -0.5, -1.5]  # 4 replicas, from predictable (code, JSON) to unpredictable traffic
SHARED_CONC = [1, 2, 4, 8, 16, 32, 64, 128]
SHARED_CAPACITY = 1.0  # the shared drafter serves 1 draft position per request per step on average


def main(out_json: str, out_png: str) -> None:
    results = {}
    fig, axes = plt.subplots(1, len(TARGETS), figsize=(13, 4.5))
    for ax, (name, hw) in zip(axes, TARGETS.items()):
        rows = sweep(hw, CONC, [1, 2, 3, 4, 5, 6, 7])
        results[name] = {"rows": rows, "summary": summary(rows)}
        off = {r["concurrency"]: r["tokens_per_s"] for r in rows if r["mode"] == "off"}
        for mode, k, style in [("fixed", 1, ":"), ("fixed", 2, ":"), ("fixed", 4, ":"), ("fixed", 7, "--"),
                               ("adaptive", 7, "-")]:
            pts = [(r["concurrency"], r["tokens_per_s"] / off[r["concurrency"]]) for r in rows
                   if r["mode"] == mode and r["k"] == k]
            ax.plot([c for c, _ in pts], [v for _, v in pts], style + "o", label=f"{mode} k={k}" if mode == "fixed"
                    else "adaptive (k<=7)", linewidth=2.5 if mode == "adaptive" else 1.2)
        ax.axhline(1.0, color="gray", linewidth=1)
        concurrency_axis(ax, "concurrent requests", "throughput / no speculation",
                         f"{name}, H200 roofline, seed-notes acceptance profile")
        print(name, json.dumps(results[name]["summary"]))
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    shared = compare(Roofline(), SHARED_SHIFTS, SHARED_CONC, SHARED_CAPACITY)
    results["shared_drafter_8B"] = {"logit_shifts": SHARED_SHIFTS, "capacity_per_request": SHARED_CAPACITY,
                                    "rows": shared}
    print("shared drafter", json.dumps([(r["concurrency_per_replica"], r["global_vs_local"]) for r in shared]))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for key, style in [("unlimited", ":"), ("global", "-o"), ("local", "--s")]:
        ax.plot([r["concurrency_per_replica"] for r in shared], [r[key] / r["off"] for r in shared], style,
                label={"unlimited": "unshared drafters (no cap)", "global": "shared drafter, budget actor",
                       "local": "shared drafter, fixed 1/4 share each"}[key])
    ax.axhline(1.0, color="gray", linewidth=1)
    concurrency_axis(ax, "concurrent requests per replica", "throughput / no speculation",
                     "4 x 8B replicas sharing one drafter (H200 roofline)")
    fig.tight_layout()
    fig.savefig(Path(out_png).with_name("simulator_shared_drafter.png"), dpi=110)
    Path(out_json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
