"""A/B of one part of adaptive verification (an experiment, not a setting): one point of the adaptive grid, with
a second adaptive engine that lacks that part, beside no speculation, fixed k and adaptive as is, in
interleaved cycles (`point_variance.py` reads the second engine as a variant). The parts:

- `noexplore`: the n-gram verifier's exploration (nothing verified beyond the trim every EXPLORE_EVERY cutting
  trims; workers/adaptive.py).
- `wholeexplore`: exploration's bound to the open row block (`explore_in_open_block`): the variant explores
  whole drafts, as before that bound, whether or not they open a block.
- `alwaysreserve`: the scheduler's draft cap (`Scheduler.cap_only_cut`): while prompts wait, the variant caps
  every request's drafts at one more than it verified last step, not only the requests the trim cut.
- `verifynone`: not a part but a probe of where adaptive's time goes: the variant drafts, estimates and trims as
  adaptive does, then verifies nothing. Against no speculation it reads what the policy's host work costs;
  adaptive against it reads what the positions it verifies bring.
- `mixedverifynone`: the same in steps that also prefill only (pure decode steps verify as adaptive does).
- `mixedreserve`: verifies as adaptive does everywhere, but the scheduler's next step reserves drafts for the
  requests of a step that also prefilled as `mixedverifynone`'s does (as if the trim had cut all: one row each
  while prompts wait). Against adaptive it reads the reserve's share of what `mixedverifynone` gains.
- `oldrowprice`: the price of a verified row as before 2026-12-05: steps that also prefill price no ragged cost
  (`AdaptiveVerifier.mixed_ragged`), and the target's cost table is the one on disk whose row block was timed
  on a ragged step (`OLD_TABLE_KEY`; the variant refuses to run where that table was never measured).
- `oldtable`: that old table alone, with the price as it is: against adaptive it reads what the table's
  re-measurement changed, apart from the price.

    python benchmarks/adaptive_variant_ab.py --variant noexplore --method ngram --workload sharegpt \
        --concurrency 32 --cycles 5

(`nocontext`, the cost table's context term priced by the policy, was a part here until it was taken out of the
policy: its results in docs/performance.md, "The split by context", were run at a1c14bb and earlier.)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from point_variance import run_point  # benchmarks/, this script's folder
import workers.warmup_tables as warmup_tables
from workers import bench
from workers.bench import _spec, _warmed
from workers.config import EngineConfig
from workers.engine import LLMEngine


OLD_TABLE_KEY = "|blocks|ragged-by-count|keys"


def _build(mode: str, part: str) -> LLMEngine:
    """The variant's engine; `oldrowprice` and `oldtable` load the old cost table (see the module's docstring)."""
    config = EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(mode, 7))
    if part not in ("oldrowprice", "oldtable"):
        return LLMEngine(config)
    saved = warmup_tables.TABLE_KEY, warmup_tables.load_or_measure
    loaded: list[Path] = []

    def only_if_saved(path: Path, step, **kw):  # the target's table first; measuring it now would be the new way
        if not loaded and not path.exists():
            raise SystemExit(f"{part}: no target cost table measured the old way on this machine")
        loaded.append(path)
        return saved[1](path, step, **kw)

    warmup_tables.TABLE_KEY, warmup_tables.load_or_measure = OLD_TABLE_KEY, only_if_saved
    try:
        return LLMEngine(config)
    finally:
        warmup_tables.TABLE_KEY, warmup_tables.load_or_measure = saved


def _without(engine: LLMEngine, part: str) -> None:
    """Take `part` out of the engine's adaptive verifier (before its warm-up requests, which refresh it)."""
    if part == "noexplore":
        engine.adaptive.estimator.explores = False
    elif part == "wholeexplore":
        engine.adaptive.explore_in_open_block = False
    elif part == "oldrowprice":
        engine.adaptive.mixed_ragged = False
    elif part == "alwaysreserve":
        engine.scheduler.cap_only_cut = False
    elif part in ("verifynone", "mixedverifynone"):
        trim = engine.adaptive.trim

        def trim_then_drop(proposal, plan) -> None:
            trim(proposal, plan)
            if part == "verifynone" or plan.prefills:
                proposal.num_drafts = torch.zeros_like(proposal.num_drafts)

        engine.adaptive.trim = trim_then_drop
    elif part == "mixedreserve":
        trim, schedule = engine.adaptive.trim, engine.scheduler.schedule
        in_mixed: set[str] = set()

        def trim_noting_mixed(proposal, plan) -> None:
            trim(proposal, plan)
            if plan.prefills:
                in_mixed.update(r.req_id for r, _ in plan.decodes)

        def schedule_as_if_cut(*args, **kwargs):
            for req in engine.scheduler.running:
                if req.req_id in in_mixed:
                    req.last_verified, req.last_cut = 0, True
            in_mixed.clear()
            return schedule(*args, **kwargs)

        engine.adaptive.trim, engine.scheduler.schedule = trim_noting_mixed, schedule_as_if_cut


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", required=True, choices=("noexplore", "wholeexplore", "alwaysreserve", "verifynone",
                                                         "mixedverifynone", "mixedreserve", "oldrowprice",
                                                         "oldtable"))
    ap.add_argument("--method", choices=("draft", "ngram"), default="ngram")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--tag", default="", help="put into the default JSON name")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    mode = f"{args.method}:7:adaptive#{args.variant}"
    engine = _build(mode, args.variant)
    _without(engine, args.variant)
    bench._ENGINES[(mode, 7, "auto")] = _warmed(engine, 48, 0)  # run_bench takes this engine for the variant
    point = f"{args.method}_{args.workload}_c{args.concurrency}"
    tag = f"_{args.tag}" if args.tag else ""
    out = Path(args.out or f"benchmarks/results/variant_ab_{args.variant}_{point}{tag}_cpu.json")
    run_point(args.method, args.workload, args.concurrency, args.cycles, [2, 4, 7], 48, 2, out,
              interleave=1, variants=(mode,))


if __name__ == "__main__":
    main()
