"""Host code A/B in one process: the drafter's `propose` and the target's decode forward, with the attention
metadata (workers/attention.py) and the draft proposer (workers/proposers/draft_model.py) of this tree against
those of an earlier commit (`--base`). Calls alternate old/new, each after a 32 MB write that evicts the host's
caches as a forward does; medians per call. The attention metadata is also timed alone (what the target's
decode step builds), as its saving is within the noise of a whole forward here. The models, kernels and
everything else are this tree's, so only the host code differs. Run it on an otherwise idle machine (~4 min
on 2 cores).

    python benchmarks/host_code_ab.py --base 8383747 --out benchmarks/results/host_code_ab_epyc_cpu.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

import workers.model_runner as model_runner
from workers import attention
from workers.draft_store import load_draft
from workers.llama import LlamaForward
from workers.model_runner import ModelRunner, StepChunk, pick_dtype
from workers.model_store import resolve_model
from workers.proposers import draft_model
from workers.proposers.base import DraftInput

REPO = Path(__file__).resolve().parents[1]
DRAFT_POINTS = ((1, 1), (1, 3), (8, 1), (8, 2), (32, 1))  # (requests, depth)
TARGET_REQUESTS = (1, 8, 32)
CONTEXT = 200  # tokens of each request's context


def module_at(rev: str, path: str) -> ModuleType:
    """The module `path` (relative to the repository) as it was at commit `rev`, loaded under a name of its own
    (its imports resolve to this tree's modules)."""
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout
    file = Path(tempfile.mkdtemp()) / Path(path).name
    file.write_text(text)
    name = f"_at_{rev[:12]}_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


class _Evict:
    def __init__(self) -> None:
        self.buffer = torch.randn(8_000_000)

    def timed(self, call: Callable[[], object], build_metadata) -> float:
        self.buffer.mul_(1.0001)
        model_runner.build_metadata = build_metadata  # ModelRunner.run reads the name from its module
        t = time.perf_counter()
        call()
        return time.perf_counter() - t


def _alternate(evict: _Evict, rounds: int, calls: dict[str, Callable[[int], Callable[[], object]]],
               metas: dict[str, object], skip: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(rounds):
        for name in (list(calls) if i % 2 else list(calls)[::-1]):
            times[name].append(evict.timed(calls[name](i), metas[name]))
    return {name: statistics.median(t[skip:]) for name, t in times.items()}


def _row(part: str, requests: int, depth: int, med: dict[str, float]) -> dict:
    row = {"part": part, "requests": requests, "depth": depth, "base_ms": 1000 * med["base"],
           "this_ms": 1000 * med["this"], "ratio": med["this"] / med["base"]}
    print(row, flush=True)
    return row


def run(base: str, rounds: int) -> dict:
    torch.set_num_threads(2)
    old_attention = module_at(base, "workers/attention.py")
    old_proposer = module_at(base, "workers/proposers/draft_model.py")
    metas = {"base": old_attention.build_metadata, "this": attention.build_metadata}
    classes = {"base": old_proposer.DraftModelProposer, "this": draft_model.DraftModelProposer}
    dev = torch.device("cpu")
    dtype = pick_dtype("auto", dev)
    target_dir = resolve_model(None)
    draft = load_draft(None, target_dir, dev, dtype, True)
    evict, rng, rows = _Evict(), random.Random(0), []
    for B, depth in DRAFT_POINTS:
        props = {name: cls(ModelRunner(draft, 2**27, 16, False), 7, 32) for name, cls in classes.items()}
        ctx = [[rng.randrange(1000, 20000) for _ in range(CONTEXT)] for _ in range(B)]
        for name, p in props.items():  # each proposer's first call feeds the whole contexts
            evict.timed(lambda p=p: p.propose([DraftInput(f"r{b}", 0, c, 1, 0.0, 1, 0) for b, c in enumerate(ctx)]),
                        metas[name])
        batches: list[list[DraftInput]] = []

        def call(name: str):
            def at(i: int):
                if len(batches) <= i:  # one new committed token per request per round, the same for both
                    for c in ctx:
                        c.append(rng.randrange(1000, 20000))
                    batches.append([DraftInput(f"r{b}", len(c) - 1, c[-1:], depth, 0.0, 1, i)
                                    for b, c in enumerate(ctx)])
                return lambda: props[name].propose(batches[i])
            return at

        med = _alternate(evict, rounds, {name: call(name) for name in props}, metas, 5)
        rows.append(_row("draft propose", B, depth, med))
    for B in TARGET_REQUESTS:  # the metadata alone, as the target's decode step builds it (q_tile 10, 3 heads a group)
        spans = [attention.SeqSpan(b, 1, CONTEXT + rng.randrange(0, 50), rng.sample(range(4096), 16)) for b in range(B)]
        med = _alternate(evict, rounds * 4, {name: (lambda i, m=m: lambda: m(spans, 16, dev, 10, 3, False))
                                             for name, m in metas.items()}, metas, 10)
        rows.append(_row("attention metadata", B, 0, med))
    target, _ = LlamaForward.load(target_dir, dev, dtype, True)
    runner = ModelRunner(target, 2**29, 16, False)
    for B in TARGET_REQUESTS:
        chunks = [StepChunk([rng.randrange(1000, 20000)], CONTEXT + rng.randrange(0, 50), runner.pool.allocate(16), 1)
                  for _ in range(B)]
        med = _alternate(evict, rounds, {name: (lambda i: lambda: runner.run(chunks)) for name in metas}, metas, 3)
        rows.append(_row("target decode forward", B, 0, med))
    model_runner.build_metadata = attention.build_metadata  # as it was before the A/B
    this = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    return {"base": base, "this": this, "dtype": str(dtype), "rounds": rounds, "context": CONTEXT, "rows": rows}


def table(result: dict) -> str:
    lines = [f"| part | requests | depth | {result['base']} ms | {result['this']} ms | ratio |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['part']} | {r['requests']} | {r['depth'] or '-'} | {r['base_ms']:.2f} | "
                     f"{r['this_ms']:.2f} | {r['ratio']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="8383747", help="the commit whose host code is the baseline")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", metavar="JSON", help="only print the table of an earlier result")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    result = run(args.base, args.rounds)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(table(result))


if __name__ == "__main__":
    main()
