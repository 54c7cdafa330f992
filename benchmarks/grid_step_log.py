"""A step log of one c point of the adaptive grid: the grid's nine engines (benchmarks/adaptive_engine.py, MODES) and
optional variants of the trained draft's adaptive engine (benchmarks/adaptive_variant_ab.py's `placebo`,
`plainprobeN`, `staleN` and the parts it takes out, e.g. `nolevel`), interleaved step by step as the grid runs them,
with every tick of every engine logged and, for each trained-draft adaptive engine, what its depth plan chose and
priced. Then `--summary` reads, per cycle, each such engine's pure decode steps (plain, drafting, drafting with a
catch-up of >= 20 rows) against no speculation's step of the same round (the same minute of this noisy machine) and
the plain-step price. It takes a round as pure decode where no speculation emitted 8 tokens: c=8 logs only.

    python benchmarks/grid_step_log.py --concurrency 8 --seed 10 --workloads sharegpt,repetitive \
        --variants plainprobe16,placebo --out /tmp/steps.json        # ~25 min on 2 cores
    python benchmarks/grid_step_log.py --summary /tmp/steps.json
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from adaptive_engine import MODES  # noqa: E402  (same folder: run as a script)
from adaptive_variant_ab import PARTS, _without, calibration_part  # noqa: E402
from workers.bench import _spec, _warmed, point_sample, run_ours, sustained_plan
from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig
from workers.engine import LLMEngine

ADAPTIVE = "draft:7:adaptive"


def _engine(mode: str, seed: int) -> LLMEngine:
    engine = LLMEngine(EngineConfig(dtype="auto", kv_cache_memory_gb=0.5, spec=_spec(mode, 7)))
    part = mode.partition("#")[2]
    if not calibration_part(engine, part):  # staleN, plainprobeN
        _without(engine, part)  # nolevel, noexplore, ... (placebo: nothing)
    return _warmed(engine, 48, seed)


def _instrument(av, step: dict) -> None:
    """Wrap the verifier's plan, estimates, trim and observation so each step's choices land in `step`."""
    plan_depths, predict, trim, observe_step = av.plan_depths, av.estimator.predict, av.trim, av.observe_step

    def planned(plan) -> None:
        plan_depths(plan)
        B = len(plan.decodes)
        step.update(depths=[d for _, d in plan.decodes], prefill_tokens=sum(c for _, c in plan.prefills),
                    catch_up=[av.catch_ups.planned.get(r.req_id, 0) for r, _ in plan.decodes],
                    prior=av._prior.tolist(), level=av._plan_prior()[0].item(),
                    planned_s=av._planned[1] if av._planned is not None else None)
        if B and not plan.prefills:
            step.update(scales=av.calibration.scales(av.cost.nearest_requests(B)),
                        plain_s=av.cost.lookup(B, B) + av.overhead_s)

    def predicted(features):
        probs = predict(features)
        step["estimates"] = probs.tolist()
        return probs

    def trimmed(proposal, plan) -> None:
        trim(proposal, plan)
        step["verified"] = proposal.num_drafts.tolist()

    def observed(wall_s, forward_s, draft_s, *args) -> None:
        step.update(wall_s=wall_s, forward_s=forward_s, draft_s=draft_s, catch_up_rows=av.catch_ups.step_rows)
        observe_step(wall_s, forward_s, draft_s, *args)

    av.plan_depths, av.estimator.predict, av.trim, av.observe_step = planned, predicted, trimmed, observed


def run(concurrency: int, seed: int, workloads: list[str], cycles: int, variants: list[str]) -> dict:
    modes = [f"{ADAPTIVE}#{v}" for v in variants] + MODES  # variants built and warmed first, as the A/B does
    engines = {m: _engine(m, seed) for m in modes}
    steps = {m: {} for m in engines if m.startswith(ADAPTIVE)}
    for m, step in steps.items():
        _instrument(engines[m].adaptive, step)
    log: dict = {"concurrency": concurrency, "seed": seed, "ticks": {m: [] for m in modes}, "cycles": []}
    warm, count = sustained_plan(concurrency, max(2 * concurrency, 16), 2)
    for w in workloads:
        for cycle in range(cycles):
            prompts, lengths = point_sample(engines[modes[0]], w, count, 48, seed + cycle, True)
            loops = {}
            for m, engine in engines.items():
                run_ours(engine, prompts[:2], 2, 4)
                loops[m] = loop = ClosedLoop(engine, prompts, concurrency, lengths, admit=count, untimed=warm)
                loop.tick = _logged(loop, loop.tick, steps.get(m), log["ticks"][m], w, cycle)
            rates = {m: r["output_tokens_per_s"] for m, r in zip(loops, run_interleaved(list(loops.values())))}
            log["cycles"].append({"workload": w, "cycle": cycle, "tokens_per_s": rates})
            print(w, cycle, {m: round(r, 2) for m, r in rates.items()}, flush=True)
    log["plain_probes"] = {m: engines[m].adaptive.plain_probes for m in steps}
    return log


def _logged(loop: ClosedLoop, tick, step: dict | None, out: list, workload: str, cycle: int):
    def logged_tick() -> None:
        if step is not None:
            step.clear()
        timed, before, t = loop.served > loop.untimed, loop.out_tokens, time.perf_counter()
        tick()
        out.append({"workload": workload, "cycle": cycle, "timed": timed, "s": time.perf_counter() - t,
                    "emitted": loop.out_tokens - before, **(step or {})})
    return logged_tick


def summary(log: dict) -> str:
    """Per trained-draft adaptive engine and cycle: its pure decode steps by kind against no speculation's step of
    the same round (rate ratio), and its plain-step price against that step (median)."""
    lines = ["| engine | workload | cycle | tok/s / no spec | plain steps | drafting | drafting, catch-up >= 20 rows "
             "| plain price / no spec's step | pure decode steps (D drafts, . plain, p prefills) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in log["cycles"]:
        w, cycle, rates = c["workload"], c["cycle"], c["tokens_per_s"]
        off = [t for t in log["ticks"]["off"] if t["workload"] == w and t["cycle"] == cycle]
        for m in (m for m in log["ticks"] if m.startswith(ADAPTIVE)):
            ticks = [t for t in log["ticks"][m] if t["workload"] == w and t["cycle"] == cycle]
            kinds: dict[str, list] = {"plain": [], "drafting": [], "catch-up": []}
            price = []
            for t, o in zip(ticks, off):
                if not t["timed"] or "depths" not in t or t["prefill_tokens"] or o["s"] > 0.15 or o["emitted"] != 8:
                    continue  # pure decode rounds only (no speculation's 150 ms+ steps prefill)
                kind = "plain" if not any(t["depths"]) else "catch-up" if t["catch_up_rows"] >= 20 else "drafting"
                kinds[kind].append((t["s"], t["emitted"], o["s"], o["emitted"]))
                price.append(t["plain_s"] * t["scales"]["plain_scale"] / o["s"])
            cells = [_rate(kinds[k]) for k in ("plain", "drafting", "catch-up")]
            seq = "".join("p" if t["prefill_tokens"] else "D" if any(t["depths"]) else "."
                          for t in ticks if t["timed"] and "depths" in t)
            lines.append(f"| {m.partition('#')[2] or 'adaptive'} | {w} | {cycle} | {rates[m] / rates['off']:.3f} | "
                         f"{' | '.join(cells)} | {statistics.median(price):.3f} | `{seq}` |" if price else "")
    return "\n".join(line for line in lines if line)


def _rate(pairs: list) -> str:
    """'n: ratio' of tokens per second over the steps against no speculation's steps of the same rounds."""
    if not pairs:
        return "-"
    ours = sum(p[1] for p in pairs) / sum(p[0] for p in pairs)
    theirs = sum(p[3] for p in pairs) / sum(p[2] for p in pairs)
    return f"{len(pairs)}: {ours / theirs:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seed", type=int, default=10, help="cycle i serves the prompt sample seed + i (--fresh-prompts)")
    ap.add_argument("--workloads", default="sharegpt,repetitive")
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--variants", default="", help="comma-separated: placebo, plainprobeN, staleN, nolevel, ...")
    ap.add_argument("--out", default="/tmp/grid_step_log.json")
    ap.add_argument("--summary", metavar="JSON", help="only print the summary table of an earlier log")
    args = ap.parse_args()
    if args.summary:
        print(summary(json.loads(Path(args.summary).read_text())))
        return
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        # the old cost tables' parts build their engines apart (adaptive_variant_ab._build)
        if (v not in PARTS or v in ("oldrowprice", "oldtable")) and not re.fullmatch(r"(plainprobe|stale)\d+", v):
            raise SystemExit(f"unknown variant {v!r}")
    log = run(args.concurrency, args.seed, args.workloads.split(","), args.cycles, variants)
    Path(args.out).write_text(json.dumps(log))
    print(summary(log))


if __name__ == "__main__":
    main()
