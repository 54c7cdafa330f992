"""Plot output tokens/s vs concurrency from a `specfleet bench` JSON: one panel per workload."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def concurrency_axis(ax, xlabel: str, ylabel: str, title: str) -> None:
    """Shared look of the concurrency sweeps (log2 x axis, grid, legend)."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def main(src: str, dst: str) -> None:
    rows = json.loads(Path(src).read_text())["rows"]
    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.2), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        series = defaultdict(list)
        for r in rows:
            if r["workload"] == w:
                label = f"{r['engine']} {r['mode']}" + (f" k={r['k']}" if r["k"] else "")
                series[label].append((r["concurrency"], r["output_tokens_per_s"]))
        for label, pts in sorted(series.items()):
            pts.sort()
            style = "-o" if label.startswith("specfleet") else "--s"
            ax.plot([c for c, _ in pts], [v for _, v in pts], style, label=label)
        concurrency_axis(ax, "concurrency (closed loop)", "output tokens/s", f"{w} (SmolLM2-135M, bf16, 2 CPU cores)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
