"""Engine code A/B in one process: one point of the adaptive grid served by this tree's adaptive engine and by
the adaptive engine of an earlier commit (`--base`), beside this tree's fixed k (0: no speculation), in
interleaved cycles (each configuration stepped in turn, each timed by its own steps: workers/closed_loop.py),
every cycle its own prompt sample (seed + cycle). For changes that no setting can switch off, such as the
policy's host code: the base's whole `workers` package is extracted from git and imported under the name
`workers_base` (its own modules throughout; the model, the draft's weights and the warm-up tables on disk are
the same files). Prints each cycle's tokens/s, this tree's adaptive over the base's, and both over the best
fixed k; writes a JSON. Run it on an otherwise idle machine.

    python benchmarks/engine_code_ab.py --base 176d94f --method draft --workload sharegpt --concurrency 1 \
        --fixed 1,2 --cycles 3 --out benchmarks/results/engine_code_ab_....json
"""
from __future__ import annotations

import argparse
import importlib
import io
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

from workers.bench import ADAPTIVE_WARMUP_REQUESTS, point_sample, run_ours, sustained_plan
from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig, SpecConfig
from workers.engine import LLMEngine
from workers.metrics import StepTimes
from workers.workloads import sharegpt_prompts

REPO = Path(__file__).resolve().parents[1]
BASE_PACKAGE = "workers_base"
MAX_TOKENS = 48  # the grid's (benchmarks/adaptive_engine.py)


def base_workers(rev: str) -> ModuleType:
    """The `workers` package as it was at commit `rev`, importable as `workers_base` (its imports of `workers`
    rewritten to it)."""
    blob = subprocess.run(["git", "-C", str(REPO), "archive", rev, "workers"], check=True, capture_output=True).stdout
    root = Path(tempfile.mkdtemp())
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(root, filter="data")
    (root / "workers").rename(root / BASE_PACKAGE)
    pattern = re.compile(r"\b(from|import) workers\b")
    for py in (root / BASE_PACKAGE).rglob("*.py"):
        py.write_text(pattern.sub(rf"\1 {BASE_PACKAGE}", py.read_text()))
    sys.path.insert(0, str(root))
    return importlib.import_module(BASE_PACKAGE)


def _spec(spec_cls: type, method: str, k: int, adaptive: bool) -> object:
    return spec_cls(method=method, k=k, verify="adaptive" if adaptive else "fixed")


def build_engines(method: str, fixed: list[int], k: int, seed: int) -> dict[str, object]:
    """{name: engine}: `fixed:K` (this tree; `fixed:0` no speculation), `adaptive` (this tree), `base` (the base's
    adaptive engine, after `base_workers`), the adaptive ones warmed as the grid's are (workers/bench.py
    `_warmed`)."""
    base_engine = importlib.import_module(f"{BASE_PACKAGE}.engine")
    base_config = importlib.import_module(f"{BASE_PACKAGE}.config")
    engines: dict[str, object] = {f"fixed:{f}": LLMEngine(EngineConfig(
        dtype="auto", kv_cache_memory_gb=0.5, spec=SpecConfig(method=method, k=f) if f else SpecConfig()))
        for f in fixed}  # k=0: no speculation, as the grid's tables name it
    engines["adaptive"] = LLMEngine(EngineConfig(dtype="auto", kv_cache_memory_gb=0.5,
                                                 spec=_spec(SpecConfig, method, k, True)))
    engines["base"] = base_engine.LLMEngine(base_config.EngineConfig(
        dtype="auto", kv_cache_memory_gb=0.5, spec=_spec(base_config.SpecConfig, method, k, True)))
    warm = [engines["adaptive"].encode_prompt(p, chat=True) for p in sharegpt_prompts(ADAPTIVE_WARMUP_REQUESTS,
                                                                                      seed=seed + 1000)]
    for name in ("adaptive", "base"):
        run_ours(engines[name], warm, 8, MAX_TOKENS)
    return engines


def run_cycles(engines: dict[str, object], workload: str, c: int, cycles: int, seed: int,
               min_requests: int) -> dict[str, list[dict]]:
    """Every engine on each cycle's prompt sample, interleaved step by step; per engine and cycle: tokens/s and
    its step times (workers/metrics.py `StepTimes`)."""
    any_engine = engines["adaptive"]
    warm, count = sustained_plan(c, max(2 * c, min_requests), 2)
    out: dict[str, list[dict]] = {name: [] for name in engines}
    for cycle in range(cycles):
        prompts, lengths = point_sample(any_engine, workload, count, MAX_TOKENS, seed + cycle, True)
        loops = {}
        for name, engine in engines.items():
            run_ours(engine, prompts[:2], 2, 4)
            engine.step_times = StepTimes()
            loops[name] = ClosedLoop(engine, prompts, c, lengths, admit=count, untimed=warm)
        for name, result in zip(loops, run_interleaved(list(loops.values()), 1)):
            out[name].append({"tokens_per_s": round(result["output_tokens_per_s"], 3),
                              "step_times": engines[name].stats()["step_times"]})
        tps = {name: out[name][-1]["tokens_per_s"] for name in engines}
        best = max(v for n, v in tps.items() if n.startswith("fixed:"))
        print(f"cycle {cycle}: {tps}  adaptive/base {tps['adaptive'] / tps['base']:.3f}  adaptive/best fixed "
              f"{tps['adaptive'] / best:.3f}  base/best fixed {tps['base'] / best:.3f}", flush=True)
    return out


def summary(runs: dict[str, list[dict]]) -> dict[str, float]:
    """Medians over cycles of the per-cycle ratios, and of each engine's policy milliseconds a step."""
    tps = {n: [r["tokens_per_s"] for r in rs] for n, rs in runs.items()}
    best = [max(v[i] for n, v in tps.items() if n.startswith("fixed:")) for i in range(len(tps["base"]))]
    ratio = lambda a, b: round(statistics.median(x / y for x, y in zip(a, b)), 4)  # noqa: E731
    return {"adaptive_over_base": ratio(tps["adaptive"], tps["base"]),
            "adaptive_over_best_fixed": ratio(tps["adaptive"], best), "base_over_best_fixed": ratio(tps["base"], best),
            **{f"{n}_policy_ms": statistics.median(r["step_times"]["policy_ms"] for r in rs)
               for n, rs in runs.items() if n in ("adaptive", "base")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the commit whose adaptive engine is the B side")
    ap.add_argument("--method", choices=("draft", "ngram"), default="draft")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--fixed", default="1,2", help="this tree's fixed k run beside them (0: no speculation, the "
                    "best peer where drafting breaks even)")
    ap.add_argument("--k", type=int, default=7, help="both adaptive engines' k")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--seed", type=int, default=22, help="cycle i serves prompt sample seed + i")
    ap.add_argument("--min-requests", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    base_workers(args.base)
    engines = build_engines(args.method, [int(f) for f in args.fixed.split(",")], args.k, args.seed)
    runs = run_cycles(engines, args.workload, args.concurrency, args.cycles, args.seed, args.min_requests)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    result = {"base": args.base, "head": head, **{k: v for k, v in vars(args).items() if k not in ("base", "out")},
              "summary": summary(runs), "cycles": runs}
    print(json.dumps(result["summary"]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
