"""Adaptive verification on the real engine: SmolLM2-135M with the trained draft and with n-gram, ShareGPT and
repetitive prompts, concurrency 1..32: no speculation, fixed k in {2, 4, 7}, adaptive (the trained draft k <= 7;
n-gram k <= 15 since 2026-12-07's seventeenth session, k <= 7 before; `ADAPTIVE_K`). One run,
configurations interleaved per concurrency, `--repeat` times (medians). Writes JSON and (the whole grid or a
merge, not a part) two PNGs.
Sustained rates (every slot refilled, no drain; see workers/bench.py) unless `--drained`, over max(`--per-slot` x
c, `--min-requests`) requests per point, timed after untimed waves. Every configuration of a point admits the same
prompts. At c=32 a window of 32 requests after the first wave put adaptive at 0.93-1.04x of no speculation
depending on which 32 (the ratio per consecutive window, two runs); windows of 64 at 0.95-1.01x; 256 at 0.97-1.00x
(docs/performance.md, "The window"). The requests are timed after a second untimed wave (`--untimed-waves`, 2 by
default since 2026-12-06's ninth session; 1 before): the first wave's leftovers are its slowest requests, which
charges the policy whose speeds spread most (workers/bench.py sustained_plan); with two, the c=1-32 grid read 22 of
24 points >= 0.98 on the medians, one wave's grids 17-21 (docs/performance.md, "ninth session").
At c <= 2 the 8 requests of the grids before 2026-12-04 ranked configurations by the tails of the requests the
window cuts (n-gram ShareGPT c=2: k=2 first in the window, k=7 8% faster over the whole run); 16 is the default
since (docs/performance.md, "The grid at 688ddf1").
Usage: python benchmarks/adaptive_engine.py [--repeat 3] [--max-tokens 48] [--per-slot 2] [--min-requests 16]
In parts (each point is complete on its own, so a part that is cut short loses only itself):
    python benchmarks/adaptive_engine.py --concurrency 1,2,4,8 --out /tmp/low.json
    python benchmarks/adaptive_engine.py --concurrency 16,32 --out /tmp/high.json
    python benchmarks/adaptive_engine.py --merge /tmp/low.json /tmp/high.json
A grid of another machine than the record's keeps its own plots: `--merge ... --plot-suffix _fp32`.
Whole grids of one machine, pooled per point (their cycles together): `--pool A.json B.json`. A run with
`--fresh-prompts --seed 2` serves other prompt samples than the grid of record's (seeds 0 and 1), so pooling it
adds samples rather than repeats of the same ones.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plot_engine import concurrency_axis  # noqa: E402  (same folder: run as a script)
from workers.bench import run_bench  # noqa: E402
from workers.config import ADAPTIVE_DEFAULT_K  # noqa: E402

METHODS = ("draft", "ngram")
FIXED = (2, 4, 7)
# adaptive's deepest draft: n-gram drafts cost nothing and adaptive verifies them deeper than 7 only in pure decode
# steps at 1-3 requests (SpecConfig.k_under_load, deep_draft_rows; since the seventeenth session, 2026-12-07)
ADAPTIVE_K = ADAPTIVE_DEFAULT_K  # also what `specfleet serve` drafts when given no --k
MODES = ["off"] + [f"{m}:{k}" for m in METHODS for k in FIXED] + [f"{m}:{ADAPTIVE_K[m]}:adaptive" for m in METHODS]


def rate(row: dict) -> float:
    """A row's median tokens/s over its samples (files before 2026-12-01 gave the higher of 2 samples)."""
    return statistics.median(row.get("samples_tokens_per_s") or [row["output_tokens_per_s"]])


def summarise(rows: list[dict]) -> list[dict]:
    """Per proposer, workload and concurrency: adaptive / max(off, best fixed k) and fixed k=7 / off."""
    tps = {(r["mode"], r["k"], r["workload"], r["concurrency"]): rate(r) for r in rows}
    samples = {(r["mode"], r["k"], r["workload"], r["concurrency"]): r.get("samples_tokens_per_s") or
               [r["output_tokens_per_s"]] for r in rows}
    out = []
    for (mode, k, w, c), v in sorted(tps.items()):
        if not mode.endswith("-adaptive"):
            continue
        m = mode.split("-")[0]
        off = tps[("off", 0, w, c)]
        fixed = {kk: tps[(m, kk, w, c)] for kk in FIXED}
        best_k = max(fixed, key=fixed.get)
        out.append({"method": m, "workload": w, "concurrency": c, "off": round(off, 2),
                    "best_fixed_k": best_k, "best_fixed": round(fixed[best_k], 2), "adaptive": round(v, 2),
                    "adaptive_vs_best": round(v / max(off, fixed[best_k]), 4),
                    # each repeat cycles through every configuration back to back: the ratio within one cycle
                    # (adaptive / the best of off and fixed k in that same cycle), median over cycles
                    "adaptive_vs_best_paired": round(statistics.median(
                        a / max([samples[("off", 0, w, c)][i]] + [samples[(m, kk, w, c)][i] for kk in FIXED])
                        for i, a in enumerate(samples[(mode, k, w, c)])), 4),
                    "adaptive_vs_best_held_out": held_out_ratio(
                        samples[(mode, k, w, c)],
                        [samples[("off", 0, w, c)]] + [samples[(m, kk, w, c)] for kk in FIXED]),
                    "adaptive_vs_off": round(v / off, 4), "fixed7_vs_off": round(fixed[7] / off, 4)})
    return out


def held_out_ratio(adaptive: list[float], peers: list[list[float]]) -> float | None:
    """Adaptive over the best peer chosen without the cycle it is scored on: for each cycle, the peer (no
    speculation or a fixed k) with the highest mean tokens/s over the OTHER cycles, and adaptive / that peer in
    this cycle; the mean over cycles. The paired ratio divides by whichever peer was fastest in the same cycle,
    so the noise of four peers lifts its denominator (the most of four noisy samples sits above the best
    peer's own rate): this one estimates adaptive against the fixed setting an operator would have tuned on
    other runs. None with a single cycle (nothing to choose on)."""
    n = len(adaptive)
    if n < 2 or any(len(p) != n for p in peers):
        return None
    ratios = []
    for i in range(n):
        rest = [j for j in range(n) if j != i]
        chosen = max(peers, key=lambda p: statistics.fmean(p[j] for j in rest))
        ratios.append(adaptive[i] / chosen[i])
    return round(statistics.fmean(ratios), 4)


def acceptance_row(rows: list[dict], method: str, workload: str) -> dict | None:
    """The fixed k=7 row whose acceptance per position is plotted: at the grid's lowest concurrency (1 in a
    whole grid; a merge of c=2..32 still has one)."""
    low = min(r["concurrency"] for r in rows)
    return next((r for r in rows if r["mode"] == method and r["k"] == 7 and r["workload"] == workload
                 and r["concurrency"] == low), None)


def plot(rows: list[dict], throughput_png: Path, acceptance_png: Path, dtype: str = "bf16") -> None:
    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(len(METHODS), len(workloads), figsize=(12, 8), squeeze=False)
    for i, m in enumerate(METHODS):
        for j, w in enumerate(workloads):
            ax = axes[i][j]
            off = {r["concurrency"]: rate(r) for r in rows if r["mode"] == "off" and r["workload"] == w}
            series = defaultdict(list)
            for r in rows:
                if r["workload"] == w and r["mode"].split("-")[0] == m:
                    label = f"adaptive (k<={r['k']})" if r["mode"].endswith("adaptive") else f"fixed k={r['k']}"
                    series[label].append((r["concurrency"], rate(r) / off[r["concurrency"]]))
            for label, pts in sorted(series.items()):
                pts.sort()
                ax.plot([c for c, _ in pts], [v for _, v in pts], "-o" if "adaptive" in label else ":s", label=label,
                        linewidth=2.5 if "adaptive" in label else 1.2)
            ax.axhline(1.0, color="gray", linewidth=1)
            concurrency_axis(ax, "concurrency (closed loop, sustained)", "tokens/s / no speculation",
                             f"{'trained draft' if m == 'draft' else 'n-gram'}, {w}")
    fig.suptitle(f"SmolLM2-135M target, {dtype}, 2 CPU cores")
    fig.tight_layout()
    fig.savefig(throughput_png, dpi=110)
    fig, ax = plt.subplots(figsize=(7, 4))
    low = min(r["concurrency"] for r in rows)  # 1 in a whole grid
    for m, w, style in [("draft", "sharegpt", "-o"), ("draft", "repetitive", "--o"), ("ngram", "sharegpt", "-s"),
                        ("ngram", "repetitive", "--s")]:
        r = acceptance_row(rows, m, w)
        if r and r["acceptance_per_position"]:
            acc = r["acceptance_per_position"]
            ax.plot(range(1, len(acc) + 1), acc, style, label=f"{'trained draft' if m == 'draft' else 'n-gram'}, {w}")
    ax.set_xlabel("draft position")
    ax.set_ylabel("fraction of steps accepted up to here")
    ax.set_title(f"Acceptance per position (fixed k=7, concurrency {low})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(acceptance_png, dpi=110)


def markdown_tables(data: dict) -> str:
    """The docs' tables (tokens/s medians, both ratios) from a results JSON."""
    rows = data["rows"]
    summary = summarise(rows)  # recomputed: older files lack the paired ratio
    tps = {(r["mode"], r["k"], r["workload"], r["concurrency"]): rate(r) for r in rows}
    out = []
    for m, title in (("draft", "trained draft"), ("ngram", "n-gram")):
        unit = "sustained tokens/s" if data.get("sustained") else "tokens/s, drained"
        out += [f"**{title}** ({unit}, median of {data['repeat']}):", "",
                "| workload | c | no spec | k=2 | k=4 | k=7 | adaptive | adaptive / max(no spec, best k) | same, "
                "paired per cycle | same, best chosen on the other cycles | k=7 / no spec |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in (s for s in summary if s["method"] == m):
            w, c = s["workload"], s["concurrency"]
            ks = " | ".join(f"{tps[(m, k, w, c)]:.1f}" for k in FIXED)
            out.append(f"| {w} | {c} | {s['off']:.1f} | {ks} | {s['adaptive']:.1f} | {s['adaptive_vs_best']:.2f} "
                       f"| {s['adaptive_vs_best_paired']:.2f} | {_ratio(s['adaptive_vs_best_held_out'])} "
                       f"| {s['fixed7_vs_off']:.2f} |")
        out.append("")
    return "\n".join(out + [_hits(summary)])


def _ratio(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _hits(summary: list[dict]) -> str:
    """How many points reach 0.98, by the paired ratio and by the held-out one."""
    paired = sum(s["adaptive_vs_best_paired"] >= 0.98 for s in summary)
    held = [s["adaptive_vs_best_held_out"] for s in summary if s["adaptive_vs_best_held_out"] is not None]
    line = f"{paired} of {len(summary)} points >= 0.98 paired"
    return line + (f"; {sum(v >= 0.98 for v in held)} of {len(held)} with the best chosen on the other cycles"
                   if held else "")


SETTINGS = ("modes", "repeat", "max_tokens", "sustained", "min_requests", "per_slot", "interleave", "fresh_prompts",
            "seed", "machine", "untimed_waves")
SETTING_DEFAULTS = {"untimed_waves": 1}  # runs from before a setting existed ran as the default then did


def machine() -> dict:
    """What the grid's figures depend on besides the code: the CPU's vector ISA as torch dispatches it, the
    dtype `auto` picks there (bf16 with AMX/AVX512-BF16, else fp32) and the cores. Two such machines differ
    ~2x in step time and in what a verified row costs, so runs on different ones are not merged."""
    import os

    import torch

    from workers.model_runner import pick_dtype

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "dtype": str(pick_dtype("auto", torch.device("cpu"))).removeprefix("torch."), "cores": os.cpu_count()}


def merge_runs(runs: list[dict]) -> tuple[dict, list[dict]]:
    """The settings and rows of several results JSONs that ran with the same settings and no common point."""
    def setting(run: dict, key: str) -> object:  # runs before `interleave` ran one at a time
        return run.get(key, SETTING_DEFAULTS.get(key, False))

    settings = {key: setting(runs[0], key) for key in SETTINGS}
    rows, seen = [], set()
    for run in runs:
        differ = [key for key in SETTINGS if setting(run, key) != settings[key]]
        if differ:
            raise SystemExit(f"cannot merge runs whose {', '.join(differ)} differ")
        for r in run["rows"]:
            key = (r["mode"], r["k"], r["workload"], r["concurrency"])
            if key in seen:
                raise SystemExit(f"cannot merge: {key} was run twice")
            seen.add(key)
            rows.append(r)
    return settings, rows


def pool_runs(runs: list[dict]) -> list[dict]:
    """Several whole runs of one machine as one: each configuration's samples (one per cycle) together, so the
    paired ratio is the median over all their cycles. Each summary row also carries every run's own ratio."""
    machines = {json.dumps(run.get("machine"), sort_keys=True) for run in runs}
    if len(machines) > 1:
        raise SystemExit("cannot pool runs of different machines")
    # cycles pair by position across the pooled samples: a configuration that one run lacks (an adaptive engine
    # of another k) would pair its cycles with another run's peers
    configs = {frozenset((r["mode"], r["k"]) for r in run["rows"]) for run in runs}
    if len(configs) > 1:
        raise SystemExit("cannot pool runs of different configurations: "
                         + " vs ".join(str(sorted(c)) for c in sorted(configs, key=sorted)))
    pooled: dict[tuple, dict] = {}
    for run in runs:
        for r in run["rows"]:
            key = (r["mode"], r["k"], r["workload"], r["concurrency"])
            row = pooled.setdefault(key, {**r, "samples_tokens_per_s": []})
            row["samples_tokens_per_s"] = row["samples_tokens_per_s"] + list(r.get("samples_tokens_per_s") or
                                                                             [r["output_tokens_per_s"]])
    each = [{(s["method"], s["workload"], s["concurrency"]): s["adaptive_vs_best_paired"]
             for s in summarise(run["rows"])} for run in runs]
    return [{**s, "each_run_paired": [e.get((s["method"], s["workload"], s["concurrency"])) for e in each]}
            for s in summarise(list(pooled.values()))]


def pooled_table(summary: list[dict]) -> str:
    """The docs' pooled table (each run's paired ratio, the pooled paired and held-out ones) and how many points
    reach 0.98."""
    out = ["| proposer | workload | c | each run, paired | pooled, paired | pooled, best chosen on the other cycles "
           "| adaptive / no spec, pooled |", "|---|---|---|---|---|---|---|"]
    for s in summary:
        each = " / ".join(_ratio(v, 3) for v in s["each_run_paired"])
        out.append(f"| {s['method']} | {s['workload']} | {s['concurrency']} | {each} | "
                   f"{s['adaptive_vs_best_paired']:.3f} | {_ratio(s['adaptive_vs_best_held_out'], 3)} "
                   f"| {s['adaptive_vs_off']:.3f} |")
    return "\n".join(out + ["", f"pooled: {_hits(summary)}"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--concurrency", default="1,2,4,8,16,32")
    ap.add_argument("--drained", action="store_true", help="run every prompt to its end (times the drain)")
    ap.add_argument("--per-slot", type=int, default=2, help="timed requests per point: this many per slot ...")
    ap.add_argument("--min-requests", type=int, default=16, help="... and at least this many")
    ap.add_argument("--interleave", type=int, nargs="?", const=1, default=0, metavar="STEPS",
                    help="run a repeat's configurations together, step by step in turn (workers/closed_loop.py)")
    ap.add_argument("--fresh-prompts", action="store_true",
                    help="each repeat of a point its own prompt sample (seed + repeat; workers/bench.py run_bench)")
    ap.add_argument("--seed", type=int, default=0,
                    help="the prompt sample (with --fresh-prompts, repeat r serves seed + r): another seed gives a run "
                         "whose samples are not the grid of record's, for --pool")
    ap.add_argument("--untimed-waves", type=int, default=2, metavar="N",
                    help="sustained: time the requests after N waves of c prompts (workers/bench.py sustained_plan); "
                         "the grids before 2026-12-06's ninth session ran with 1")
    ap.add_argument("--out", default="benchmarks/results/adaptive_engine_cpu.json")
    ap.add_argument("--tables", metavar="JSON", help="only print the markdown tables of an earlier run")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="combine runs of other concurrencies, run with the same settings, into --out (and plot)")
    ap.add_argument("--pool", nargs="+", metavar="JSON",
                    help="only print the per-point ratios of whole runs of one machine, their cycles pooled")
    ap.add_argument("--plot-suffix", default="", metavar="S",
                    help="write the PNGs as docs/adaptive_engine_throughput{S}.png and docs/acceptance_per_position{S}"
                         ".png (the grid of record has none; another machine's grid, e.g. _fp32, keeps its own)")
    args = ap.parse_args()
    if args.tables:
        print(markdown_tables(json.loads(Path(args.tables).read_text())))
        return
    if args.pool:
        print(pooled_table(pool_runs([json.loads(Path(f).read_text()) for f in args.pool])))
        return
    if args.merge:
        settings, data = merge_runs([json.loads(Path(f).read_text()) for f in args.merge])
    else:
        rows = run_bench(["sharegpt", "repetitive"], [int(c) for c in args.concurrency.split(",")], MODES, 7,
                         args.max_tokens, [], args.per_slot, args.seed, "auto", None, repeat=args.repeat,
                         kv_cache_memory_gb=0.5,
                         sustained=not args.drained, min_requests=args.min_requests, interleave=args.interleave,
                         fresh_prompts=args.fresh_prompts, untimed_waves=args.untimed_waves)
        settings = {"modes": MODES, "repeat": args.repeat, "max_tokens": args.max_tokens,
                    "sustained": not args.drained, "min_requests": args.min_requests, "per_slot": args.per_slot,
                    "interleave": args.interleave, "fresh_prompts": args.fresh_prompts, "seed": args.seed,
                    "machine": machine(), "untimed_waves": args.untimed_waves}
        data = [r.__dict__ for r in rows]
    summary = summarise(data)
    Path(args.out).write_text(json.dumps({**settings, "summary": summary, "rows": data}, indent=1))
    if args.merge or args.concurrency == ap.get_default("concurrency"):  # a part would overwrite the docs' plots
        dtype = {"bfloat16": "bf16", "float32": "fp32"}.get((settings.get("machine") or {}).get("dtype"), "bf16")
        plot(data, Path(f"docs/adaptive_engine_throughput{args.plot_suffix}.png"),
             Path(f"docs/acceptance_per_position{args.plot_suffix}.png"), dtype)
    for s in summary:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
