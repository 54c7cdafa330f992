"""Sweep the simulator (workers/simulator.py) over concurrency 1..512 for 8B and 70B dense targets on an
H200 roofline: no speculation, fixed k = 1..7, adaptive (k <= 7). Writes JSON and a PNG.
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

TARGETS = {"8B (1 GPU)": Roofline(params=8e9, gpus=1),
           "70B (TP4)": Roofline(params=70e9, gpus=4, kv_bytes_per_token=327680)}
CONC = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def main(out_json: str, out_png: str) -> None:
    results = {}
    fig, axes = plt.subplots(1, len(TARGETS), figsize=(13, 4.5))
    for ax, (name, hw) in zip(axes, TARGETS.items()):
        rows = sweep(hw, CONC, [1, 2, 4, 7])
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
    Path(out_json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
