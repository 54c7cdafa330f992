"""A/B of one part of adaptive verification (an experiment, not a setting): one point of the adaptive grid, with
a second adaptive engine that lacks that part, beside no speculation, fixed k and adaptive as is, in
interleaved cycles (`point_variance.py` reads the second engine as a variant). The parts:

- `noexplore`: the n-gram verifier's exploration (nothing verified beyond the trim every EXPLORE_EVERY cutting
  trims; workers/exploration.py).
- `wholeexplore`: exploration's bound to the open row block (`Exploration.in_open_block`): the variant explores
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
- `noguard`: the outlier guard (workers/step_outliers.py) off: every pure decode step refreshes the cost model.
- `placebo`: nothing taken out: the variant engine is adaptive as is, built and warmed before the others (as
  every variant is). Against adaptive it reads what being the variant engine is worth by itself: up to ~2%,
  median 0.65%, 11 of 14 cycles ahead (trained draft, ShareGPT c=1 and repetitive c=32; docs/performance.md,
  "2026-12-06, fourth session"), while every round stepped the engines in one cyclic order, adaptive right
  after fixed k; each round has its own order since beada96. Read a variant against it, or run it beside the
  variant.
- `nolevel`: the depth plan reads position 1 from the running mean of the estimates, as before 2026-12-07's
  fourteenth session, not from its outcomes with a bounded optimism (workers/first_position.py).
- `oldtable`: that old table alone, with the price as it is: against adaptive it reads what the table's
  re-measurement changed, apart from the price.
- `cap2`, `cap4` (any `capD`): verifies what adaptive's trim chose, but at most D drafts per request. At n-gram
  repetitive c=32, where adaptive verified whole drafts of a few requests and none of most, this reads what the
  depth of those whole drafts cost in closed loop (docs/performance.md, "Why adaptive trails k=2 at n-gram
  repetitive c=32").
- `cap3mixed`, `cap3pure` (any `capDmixed`, `capDpure`): the cap in steps that also prefill only, or in pure
  decode steps only.
- `rowsx2` (any `rowsxF`): the trim prices every verified row at F times the table's seconds: what the policy
  would choose if rows cost that much more than the warm-up measured.
- `perrequest`: a probe of the sustained-load rule: each request verifies the depth d that minimises its own
  cost per token, (b + d r) / (1 + its survival summed to d), b a plain step's seconds per request and r a
  verified row's (the table's step with one more row per request, over the plain one), whatever the others do
  (row blocks and the ragged cost are not priced).
- `stale8` (any `staleN`): the depth plan's plain-step time ratio goes stale after N drafting steps without a
  plain step (workers/plan_calibration.py, PLAIN_STALE_STEPS, 32) and then borrows the drafting steps' ratio.
- `verifylevel0` (any `verifylevelF`): the target's cost table refreshed from a step that verified drafts moves
  the row's level by F of the EMA step instead of LEVEL_SHARE (0.9; workers/cost_table.py); plain steps' refreshes
  as they are. A verify step's error is the level's and the row's shape's together: at 0.9 a shape the warm-up
  priced low (verified rows dearer in serving than at its uniform context) raises the plain cell with it while
  adaptive drafts, and not drafting then looks dearer than it is.
- `plainprobe16` (any `plainprobeN`; `plainprobe0`: none, as before 2026-12-07): while the depth plan drafts, one
  pure decode step in N at a request count drafts nothing, and its time refreshes the plain-step ratio with weight
  PLAIN_PROBE_RATE (workers/plan_calibration.py, PLAIN_PROBE_EVERY, 16 since 2026-12-07): the plain price measured
  beside the drafting steps rather than carried from before they began.
- `uniformcap`: verifies what adaptive's trim chose, but at most the depth that every request verifying the same
  count (at most its drafts) would pick for this step's tokens per second (at least 1): the depth a fixed-k
  schedule would choose for this batch, as a cap on the trim's deeper choices.
- `depth15` (any `depthK`): not a part taken out but a deeper draft: the variant engine drafts up to K tokens
  (adaptive drafts up to 7). With n-gram drafts, k=15 read +1-2% at c=2-4 and -4% at repetitive c=32 (median of
  3 cycles; docs/performance.md, "sixteenth session"). `depth15mixed7` (any `depthKmixedD`): up to K, but at most
  D while prompts wait (`Scheduler.k_under_load`): deep drafts in pure decode steps only. `mixed0` (any
  `mixedD`, k=7): no draft beyond D while prompts wait; 0: the trained draft drafts in pure decode steps only.
  `depth15mixed7rows32` (any `depthKmixedDrowsR`): beyond D also only while every decoding request's rows fit R
  (`Scheduler.deep_rows`): the engine's rule for k > SpecConfig.k_under_load since the seventeenth session.
  `depth15mixed7rows32wait4` (any `...waitW`): besides, while prompts wait, deeper than W only where the rows fit
  R (`Scheduler.k_waiting`): at n-gram repetitive c=32, k_under_load 4 (`depth15mixed4rows32`) read +4-7% over 7
  and at c=8 -1-3%, where its cap of 4 also binds pure decode steps (2026-12-08). The wait4 A/Bs at c=2-4 ran
  before the row bound (at most W there too); from c=8 on the two are one rule. Each of these variants sets all
  its bounds (absent: none), whatever the engine's defaults.

- `margin3` (any `marginP`): the depth plan drafts only where it predicts P% more tokens per second than not
  drafting (`AdaptiveVerifier.draft_margin`; 0 in the engine). At trained repetitive c=8 the plan counted on ~3%
  from drafting where its drafting steps ran at the plain steps' rate (docs/performance.md, "fifteenth session").
  A margin on every plan was tried once before (b2a3c8d, 2026-12-04: 3% lost 2% at ShareGPT c=1, where the plan's
  predicted gains were real; "Drafting next to a prefill at c=32") and taken out; the engine's plan has changed
  since (position 1's level, the calibrations, the catch-ups).
- `notrimsearch`: the trim never searches (its shortcut, `TRIM_SEARCH_RATE` in workers/adaptive.py, always
  taken): every position the depth plan drafted is verified. At the trained draft, ShareGPT c=16 and repetitive
  c=8, the plan drafted depth 1 for nearly every request and the trim cut 5-11% of those drafts, at ~0.2-0.3 ms
  of host time a drafting step (ad-hoc timers, 2026-12-08).
- `survivalcal`: the depth plan's calibration as `SpecConfig.calibrate_plan` "time+survival": in pure decode steps
  it also scales each position's survival by drafts accepted over the survival it counted on. At trained
  repetitive c=8 that ratio read 0.82 at position 1 (one ad-hoc run, 37 drafting steps; docs/performance.md,
  "nineteenth session"): the plan counted on more than its drafts delivered.

    python benchmarks/adaptive_variant_ab.py --variant noexplore --method ngram --workload sharegpt \
        --concurrency 32 --cycles 5
    python benchmarks/adaptive_variant_ab.py --variant cap2,cap4,perrequest --fixed 2 --method ngram \
        --workload repetitive --concurrency 32 --cycles 4   # several variants in one run

(`nocontext`, the cost table's context term priced by the policy, was a part here until it was taken out of the
policy: its results in docs/performance.md, "The split by context", were run at a1c14bb and earlier. So were
`nomixedscale`, the depth plan's drafter ratio in steps that also prefill not applied, and `firstwhole`, that
ratio with a request's first catch-up predicted whole: run at 6d09a97 and before, that ratio was then taken
out; docs/performance.md, "2026-12-06, second session". `positionprior`, the running mean over drafted positions
against a mean balanced over recent requests, ran at 2d6b45b-667fd82; the balanced mean was then taken out:
"2026-12-06, third session". `norelax`, the running mean left as it is while nothing drafts, against one that
relaxes toward a slow mean per request count, ran at 7ed764f-73c77ea; the relaxation was then taken out:
"2026-12-06, fourth session". `nogain`, steps that also prefill valued at no speculation's decode rate against
that rate times the decode gain of pure decode steps, ran at 301b188-6681649; the gain was then taken out:
"2026-12-06, eighth session". `noswitch`, the depth plan's bar back to drafting after a plan that drafted nothing
(SWITCH_MARGIN, 2%) at 0, ran at 078b7f8; the margin was then taken out. `reservek`, the draft reservation beside
waiting prompts kept at k after a depth plan that drafted less than reserved, ran at dc384d9; the smaller
reservation was then taken out: both "2026-12-06, ninth session".)
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import torch

from point_variance import run_point  # benchmarks/, this script's folder
import workers.cost_table as cost_table
import workers.warmup_tables as warmup_tables
from workers import budget, bench
from workers.bench import _spec, _warmed
from workers.budget import step_seconds, survival
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
        engine.adaptive.exploration.in_open_block = False
    elif part == "oldrowprice":
        engine.adaptive.mixed_ragged = False
    elif part == "noguard":
        engine.adaptive.costs.outliers.ratio = float("inf")
    elif part == "placebo":
        pass
    elif part == "notrimsearch":  # the trim's shortcut always taken: every drafted position verified
        engine.adaptive._search_s = float("inf")
    elif part == "nolevel":
        engine.adaptive.first.enabled = False
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


def per_request_depths(scores: np.ndarray, base_s: float, row_s: float) -> np.ndarray:  # [B]
    """Each request's depth d minimising (base_s + d row_s) / (1 + survival summed to d) over its drafts
    (`scores` [B, K] survival, 0 beyond a request's drafts): its cost per token if it verified d every step."""
    cum = np.concatenate([np.zeros((scores.shape[0], 1)), scores.cumsum(1)], axis=1)  # [B, K + 1]
    depth = np.arange(scores.shape[1] + 1)
    drafted = np.concatenate([np.ones((scores.shape[0], 1), bool), scores > 0], axis=1)
    per_token = np.where(drafted, (base_s + depth * row_s) / (1.0 + cum), np.inf)
    return per_token.argmin(1)


def uniform_depth(scores: np.ndarray, drafted: np.ndarray, step_s: np.ndarray, base_emitted: float) -> int:
    """The depth d every request would verify (at most its drafts) for the most tokens per second in this step:
    `scores` [B, K] survival, `drafted` [B], `step_s` [>= sum(drafted) + 1] the step's seconds by rows taken."""
    cum = np.concatenate([np.zeros((scores.shape[0], 1)), scores.cumsum(1)], axis=1)  # [B, K + 1]
    depths = np.arange(scores.shape[1] + 1)
    taken = np.minimum(depths[None, :], drafted[:, None])  # [B, K + 1]
    tokens = base_emitted + np.take_along_axis(cum, taken, 1).sum(0)  # [K + 1]
    return int((tokens / step_s[taken.sum(0)]).argmax())


def _rows_priced(engine: LLMEngine, factor: float) -> None:
    """`rowsxF`: the trim prices its verified rows at `factor` times the table's seconds (the ragged and group
    costs as they are)."""
    trim, plain = engine.adaptive.trim, budget.step_seconds

    def scaled(*args, **kwargs) -> np.ndarray:
        s = plain(*args, **kwargs)
        return s[0] + factor * (s - s[0])

    def trim_with_dearer_rows(proposal, plan) -> None:
        budget.step_seconds = scaled
        try:
            trim(proposal, plan)
        finally:
            budget.step_seconds = plain

    engine.adaptive.trim = trim_with_dearer_rows


def calibration_part(engine: LLMEngine, part: str) -> bool:
    """`staleN` and `plainprobeN`: set the depth plan's calibration accordingly; False for any other part."""
    m = re.fullmatch(r"(stale|plainprobe)(\d+)", part)
    if m is None:
        return False
    setattr(engine.adaptive.calibration, "plain_stale_steps" if m[1] == "stale" else "plain_probe_every", int(m[2]))
    return True


def _verify_level(engine: LLMEngine, share: float) -> None:
    """`verifylevelF`: refreshes of the target's table from steps that verified drafts move the level by `share`."""
    cost = engine.adaptive.cost
    observe = cost.observe

    def observe_with_share(requests: int, tokens: int, seconds: float, count: int = 1) -> None:
        if tokens <= requests:  # a plain step: as it is
            return observe(requests, tokens, seconds, count)
        saved, cost_table.LEVEL_SHARE = cost_table.LEVEL_SHARE, share  # read inside observe (one thread)
        try:
            return observe(requests, tokens, seconds, count)
        finally:
            cost_table.LEVEL_SHARE = saved

    cost.observe = observe_with_share


def _after_trim(engine: LLMEngine, part: str) -> None:
    """`capD`, `perrequest` and `uniformcap` (see the module's docstring): the trim runs as is, then its lengths
    are replaced."""
    ada = engine.adaptive
    trim = ada.trim

    def trim_then_replace(proposal, plan) -> None:
        drafted = proposal.num_drafts.clone()
        trim(proposal, plan)  # also appends the n-gram history feature the estimate reads
        if part.startswith("cap"):
            depth, where = re.fullmatch(r"cap(\d+)(mixed|pure)?", part).groups()
            if where is None or (where == "mixed") == bool(plan.prefills):
                proposal.num_drafts = proposal.num_drafts.clamp(max=int(depth))
        elif part == "uniformcap" and proposal.features is not None and plan.decodes and bool(drafted.any()):
            scores = survival(ada.estimator.predict(proposal.features), drafted).double().numpy()
            B, prefill = len(plan.decodes), sum(c for _, c in plan.prefills)
            requests, base_tokens = B + len(plan.prefills), B + prefill
            step_s = step_seconds(ada.cost, requests, base_tokens, B, int(drafted.sum()), ada.overhead_s, prefill)
            d = uniform_depth(scores, drafted.numpy(), step_s, ada._base_emitted(plan, base_tokens))
            proposal.num_drafts = proposal.num_drafts.clamp(max=max(d, 1))
        elif proposal.features is not None and plan.decodes and bool(drafted.any()):
            scores = survival(ada.estimator.predict(proposal.features), drafted).double().numpy()
            B = len(plan.decodes)
            base_s = (ada.cost.lookup(B, B) + ada.overhead_s) / B
            row_s = max((ada.cost.lookup(B, 2 * B) - ada.cost.lookup(B, B)) / B, 1e-9)
            proposal.num_drafts = torch.minimum(torch.from_numpy(per_request_depths(scores, base_s, row_s)), drafted)

    ada.trim = trim_then_replace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", required=True, type=_variants,
                    help="one or more of (comma-separated): " + ", ".join(PARTS)
                    + ", capD (D drafts; capDmixed, capDpure), perrequest, uniformcap, rowsxF (F x row price), staleN"
                    + ", verifylevelF, plainprobeN, depthK (drafts up to K), mixedD (at most D while prompts wait)"
                    + ", marginP, survivalcal")
    ap.add_argument("--fixed", default="2,4,7", help="the fixed k run beside them")
    ap.add_argument("--method", choices=("draft", "ngram"), default="ngram")
    ap.add_argument("--workload", choices=("sharegpt", "repetitive"), default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--per-slot", type=int, default=2,
                    help="requests per slot in the timed window (the grid's 2; more: closer to a steady state)")
    ap.add_argument("--fresh-prompts", action="store_true",
                    help="each cycle its own prompt sample (benchmarks/point_variance.py)")
    ap.add_argument("--seed", type=int, default=0, help="the prompt sample (with --fresh-prompts, cycle i serves "
                    "seed + i) and the warm-up's (seed + 1000), as benchmarks/adaptive_engine.py --seed")
    ap.add_argument("--min-requests", type=int, default=8, help="timed requests per point at least (the grid's 16)")
    ap.add_argument("--tag", default="", help="put into the default JSON name")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    modes = []
    for part in args.variant:
        depth = re.fullmatch(DEPTH, part)
        mode = f"{args.method}:{depth[1] or 7 if depth else 7}:adaptive#{part}"
        engine = _build(mode, part)
        if depth:  # the engine's defaults (SpecConfig.k_under_load, deep_draft_rows) replaced by the variant's
            engine.scheduler.k_under_load = int(depth[2]) if depth[2] else None
            engine.scheduler.deep_rows = int(depth[3]) if depth[3] else None
            engine.scheduler.k_waiting = int(depth[4]) if depth[4] else None
        if part.startswith("cap") or part in ("perrequest", "uniformcap"):
            _after_trim(engine, part)
        elif part.startswith("rowsx"):
            _rows_priced(engine, float(part[5:]))
        elif part.startswith("verifylevel"):
            _verify_level(engine, float(part[11:]))
        elif re.fullmatch(MARGIN, part):
            engine.adaptive.draft_margin = float(part[6:]) / 100
        elif part == "survivalcal":
            engine.adaptive.calibrate_survival = True
        elif depth is None and not calibration_part(engine, part):  # staleN, plainprobeN
            _without(engine, part)
        bench._ENGINES[(mode, 7, "auto")] = _warmed(engine, 48, args.seed)  # run_bench takes it for the variant
        modes.append(mode)
    point = f"{args.method}_{args.workload}_c{args.concurrency}"
    tag = f"_{args.tag}" if args.tag else ""
    out = Path(args.out or f"benchmarks/results/variant_ab_{'_'.join(args.variant)}_{point}{tag}_cpu.json")
    run_point(args.method, args.workload, args.concurrency, args.cycles, [int(k) for k in args.fixed.split(",")], 48,
              args.per_slot, out, interleave=1, variants=tuple(modes), fresh_prompts=args.fresh_prompts, seed=args.seed,
              min_requests=args.min_requests)


# depthK, mixedD, depthKmixedD, depthKmixedDrowsR, and any of these with waitW
DEPTH = r"(?=.)(?:depth(\d+))?(?:mixed(\d+))?(?:rows(\d+))?(?:wait(\d+))?"
MARGIN = r"margin\d+(\.\d+)?"  # marginP: the depth plan's AdaptiveVerifier.draft_margin at P percent
PARTS = ("noexplore", "wholeexplore", "alwaysreserve", "verifynone", "mixedverifynone", "mixedreserve",
         "oldrowprice", "oldtable", "noguard", "placebo", "nolevel", "notrimsearch")


def _variants(text: str) -> list[str]:
    parts = text.split(",")
    for p in parts:
        if p not in PARTS + ("perrequest", "uniformcap", "survivalcal") and not re.fullmatch(r"cap\d+(mixed|pure)?", p) \
                and not (p.startswith("rowsx") and p[5:].replace(".", "", 1).isdigit()) \
                and not re.fullmatch(r"(stale|plainprobe)\d+", p) and not re.fullmatch(DEPTH, p) \
                and not re.fullmatch(MARGIN, p) \
                and not (p.startswith("verifylevel") and p[11:].replace(".", "", 1).isdigit()):
            raise argparse.ArgumentTypeError(f"unknown variant {p!r}")
    return parts


if __name__ == "__main__":
    main()
