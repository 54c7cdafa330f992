"""Adaptive verification in the engine (the local policy): estimators -> survival -> budget policy -> trim.

Each step, after the proposer drafted: the estimator turns the drafts' features into per-position acceptance
probabilities, the budget policy picks how many positions of which requests to verify from the warm-up cost
table, and the drafts are trimmed to those prefixes. After verification the outcomes train the estimator.
Before drafting, a draft model's depth is planned (workers/depth_plan.py). Parts with state of their own:
probes (workers/probes.py), catch-ups (workers/catch_up.py), the target's online cost model
(workers/online_costs.py).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from workers.budget import choose_verify_lengths, survival
from workers.catch_up import CatchUpLedger
from workers.cost_table import CostTable
from workers.depth_plan import DepthPlan
from workers.estimators import LogisticEstimator, NgramEstimator, history_bucket
from workers.exploration import Exploration
from workers.first_position import FirstPositionLevel
from workers.online_costs import OnlineTargetCosts
from workers.plan_calibration import PlanCalibration
from workers.probes import ProbeSchedule
from workers.warmup_tables import warm_up_tables

if TYPE_CHECKING:
    from workers.engine import LLMEngine
    from workers.proposers.base import Proposal
    from workers.scheduler import ScheduledStep

# The running mean of the estimates moves by PRIOR_RATE per position drafted (~10 positions). Per step instead,
# one probe's estimate weighed as much as a step that drafted 23 requests: at ShareGPT c=32 (interleaved with
# no speculation; ad-hoc log, not committed) probes' position-1 estimates averaged ~0.31, the drafts of the
# whole batch ~0.17, and the mean stayed ~0.33, so steps that also prefill drafted ~20 requests at a time, of
# which the trim kept 1-2 (203 drafted, 37 verified, 20 accepted against 55.8 counted on).
# A mean balanced over the last 16 requests that drafted (each weighing its drafted positions up to 8, so probes
# of one request could not hold it) was tried on 2026-12-06 and taken out: at the trained draft, repetitive c=32,
# it drafted whole batches where this rule stays idle, 6 of 6 interleaved cycles below it (-0.8 to -7.0%; ShareGPT
# c=4 -1.0, +1.6, +1.4%, c=16 within noise; docs/performance.md, "2026-12-06, third session"). A dip in it holds
# while nothing drafts (at ShareGPT c=1 two requests in a row drafted in 1 of 28 and 1 of 65 plans): moving it toward
# a slower mean per request count was taken out too, +1.6% on that sample and nothing elsewhere ("fourth session").
PRIOR_RATE = 0.1
# The trim verifies every drafted position without searching when those rows cost no more than its search does
# (its host time, a running mean at this rate): the search cannot save more than the rows. It took ~0.2 ms (numpy
# ops paid cold after the draft); rows in a row block the step computes anyway (2 requests x 1 draft: the bf16
# table prices 2, 3 and 4 tokens at 2 requests alike) cost nothing.
TRIM_SEARCH_RATE = 0.1


class CapacityPlanner(Protocol):
    """Caps on each request's draft depth from outside the engine (the cluster's global budget actor
    sharing a drafter's capacity among replicas); must answer quickly and may fall back locally."""

    def __call__(self, req_ids: list[str], scores: torch.Tensor) -> torch.Tensor: ...  # [B, K] -> caps [B]


class AdaptiveVerifier(DepthPlan):
    mixed_ragged = True  # the trim prices the ragged cost in steps that also prefill (budget.py); False for an A/B

    def __init__(self, cost: CostTable, estimator: LogisticEstimator | NgramEstimator,
                 draft_cost: CostTable | None = None, calibrate: bool = False,
                 calibrate_survival: bool = False) -> None:
        self.cost, self.estimator, self.draft_cost = cost, estimator, draft_cost
        self.calibrate = calibrate  # measure `calibration` and scale the depth plan's step times by it
        self.calibrate_survival = calibrate_survival  # with `calibrate`: its survival too, per position
        self.capacity_planner: CapacityPlanner | None = None
        self.draft_margin = 0.0  # the depth plan drafts only where it predicts this fraction over not drafting
        self.overhead_s = 0.0  # EMA of the step's host time outside the target forward and the drafting
        # the same on pure decode steps, apart for steps that drafted and steps that did not (draft_host_s)
        self._host_s: dict[bool, float | None] = {True: None, False: None}
        self.verified_positions = 0
        self.offered_positions = 0
        self.drafted_positions = 0
        self.observed_s = 0.0  # every observed step's wall seconds (for `stats`)
        self.idle_plans_held = 0  # plans `_idle_plan_holds` decided without computing
        self.idle_plans_bounded = 0  # plans `_cannot_pay` decided without the search
        self.plain_probes = 0  # pure decode steps the plan kept plain to measure them (PLAIN_PROBE_EVERY)
        self._prior = torch.ones(estimator.k)  # the running mean of the estimates: what the depth plan reads
        self.first = FirstPositionLevel()  # position 1's level from its outcomes (workers/first_position.py)
        self.probe = ProbeSchedule()  # one request drafts now and then when none would (workers/probes.py)
        self.catch_ups = CatchUpLedger()  # what each request's draft first feeds, and its price
        self._idle_key: tuple | None = None  # the batch whose last depth plan drafted nothing
        self._idle_plans = 0  # plans since that one was computed
        # the last depth plan of a pure decode step, if it drafted: (its key, caps [B], `_planned`, the running
        # mean it read, plans it was reused for), caps and mean as lists; see PLAN_HOLD_DRIFT (workers/depth_plan.py)
        self._held: tuple | None = None
        self._search_s = 0.0  # the trim's search time (TRIM_SEARCH_RATE)
        self.exploration = Exploration()  # now and then the trim verifies more (workers/exploration.py)
        self._verified_last: dict[str, tuple[int, int]] = {}  # req_id -> its last (verified, accepted) drafts
        self.costs = OnlineTargetCosts(cost)  # the target's table refreshed from observed steps
        self.calibration = PlanCalibration()  # the depth plan's predictions against the steps it chose
        self._planned: tuple[int, float, torch.Tensor] | None = None  # a pure decode step that drafts:
        # (cost table row, its predicted seconds, the survival [B, K] the plan counted on), unscaled
        # steps that also prefill: the survival of all drafted ("Mixed steps", workers/depth_plan.py)
        self.mixed_calibration = PlanCalibration()
        # (row, survival [B, K] of what it drafted, drafted [B, K])
        self._planned_mixed: tuple[int, torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def build(cls, engine: "LLMEngine") -> "AdaptiveVerifier":
        """The verifier of `engine`'s spec config, its cost tables loaded or measured (workers/warmup_tables.py)."""
        cost, draft_cost = warm_up_tables(engine)
        est = NgramEstimator(engine.k) if engine.config.spec.method == "ngram" else LogisticEstimator(engine.k, 3)
        mode = engine.config.spec.calibrate_plan
        return cls(cost, est, draft_cost, calibrate=mode != "off", calibrate_survival=mode == "time+survival")

    @property
    def explored_positions(self) -> int:
        return self.exploration.positions

    @property
    def estimator_ready(self) -> bool:
        return getattr(self.estimator, "ready", True)

    def trim(self, proposal: "Proposal", plan: "ScheduledStep") -> None:
        if proposal.features is None or not plan.decodes:
            return
        n = proposal.num_drafts
        depths = n.tolist()
        if not any(depths):  # nothing drafted (the depth plan said no): nothing to trim or remember
            return
        if getattr(self.estimator, "uses_history", False):  # learn() reads the same features
            proposal.features = self._with_history(proposal.features, plan)
        probs = self.estimator.predict(proposal.features)  # [B, K]
        self._remember(plan, probs, depths)
        scores = survival(probs, n)
        prefill_tokens = sum(c for _, c in plan.prefills)
        base_tokens = len(plan.decodes) + prefill_tokens
        # drafts already made: next to a prefill chunk their rows are priced as decode rows (budget.py); the
        # depth plan does not do so, as a draft model's catch-up rows there are not free
        requests = len(plan.decodes) + len(plan.prefills)
        if self._rows_at_stake_s(requests, base_tokens, prefill_tokens, depths) <= self._search_s:
            lengths = n  # (TRIM_SEARCH_RATE)
        else:
            t = time.perf_counter()
            lengths = choose_verify_lengths(scores, self.cost, requests, base_tokens,
                                            self._base_emitted(plan, base_tokens), self.overhead_s,
                                            prefill_tokens=prefill_tokens, mixed_ragged=self.mixed_ragged)
            self._search_s += TRIM_SEARCH_RATE * (time.perf_counter() - t - self._search_s)
        if getattr(self.estimator, "explores", False):
            lengths = self.exploration.extend(lengths, n, plan, self.cost.row_block)
        kept = torch.minimum(n, lengths)
        offered, verified = sum(depths), int(kept.sum())
        self.offered_positions += offered
        if verified < offered:
            # the step that runs is not the one the depth plan priced: its time, short of the verify rows
            # planned, would teach the plan's calibration that drafting is cheap, so it drafted more for the
            # trim to cut again (fp32 on an AVX2 CPU, trained draft, ShareGPT c=1: drafting steps' time ratio
            # 0.75; 122 positions drafted, 4 verified; 0.95x of no speculation)
            self._planned = None
        proposal.num_drafts = kept
        self.verified_positions += verified

    def _with_history(self, features: torch.Tensor, plan: "ScheduledStep") -> torch.Tensor:  # [B, K, 2]
        """The drafts' match lengths `features` [B, K, 1+] with each request's history bucket beside them (numpy:
        the four torch ops this took cost ~10 us each after a forward)."""
        f = features.numpy()
        out = np.empty(f.shape[:2] + (2,), dtype=f.dtype)
        out[..., 0] = f[..., 0]
        out[..., 1] = np.array([history_bucket(self._verified_last.get(r.req_id)) for r, _ in plan.decodes])[:, None]
        return torch.from_numpy(out)

    def _rows_at_stake_s(self, requests: int, base_tokens: int, prefill_tokens: int, depths: list[int]) -> float:
        """The most the trim could save: the drafted rows' time, as decode rows next to a prefill (budget.py),
        with the ragged cost if the drafts are not all of one depth."""
        B, offered = len(depths), sum(depths)
        if prefill_tokens:
            rows_s = self.cost.lookup(B, B + offered) - self.cost.lookup(B, B)
            if not self.mixed_ragged:
                return rows_s
        else:
            rows_s = self.cost.lookup(requests, base_tokens + offered) - self.cost.lookup(requests, base_tokens)
        if self.cost.ragged and B > 1 and min(depths) != max(depths):
            rows_s += float(self.cost.ragged_array(B if prefill_tokens else requests, np.array([max(depths)]))[0])
        return rows_s

    def _remember(self, plan: "ScheduledStep", probs: torch.Tensor, depths: list[int]) -> None:
        """Move the running mean the next depth plan reads by this step's estimates (drafted positions only),
        and note where each request that drafted stands (its catch-up). `depths`: each request's drafts [B]."""
        self.drafted_positions += sum(depths)
        if self.draft_cost is None and self.capacity_planner is None:
            return  # free drafts (n-gram) on their own: no depth plan reads these (~0.1 ms per step at c=8)
        self._idle_key = None  # new estimates: the next depth plan is computed afresh
        # in Python lists: the dozen torch ops this took cost ~85 us a call after a forward (trained draft,
        # ShareGPT c=1, this CPU; ad-hoc timers, not committed), and B x K is at most a few hundred cells
        prior, rows = self._prior.tolist(), probs.tolist()
        for i in range(len(prior)):
            drafted = [row[i] for row, d in zip(rows, depths) if d > i]
            if drafted:
                # a running mean, not this step's batch mean (at c=1 that is the request itself), over drafted
                # positions rather than steps: a step's weight grows with what it drafted (PRIOR_RATE)
                weight = 1.0 - (1.0 - PRIOR_RATE) ** len(drafted)
                prior[i] += weight * (sum(drafted) / len(drafted) - prior[i])
        self._prior = torch.tensor(prior)
        self.catch_ups.drafted(plan.decodes, depths)

    def forget(self, req_id: str) -> None:
        self._verified_last.pop(req_id, None)
        self.catch_ups.forget(req_id)

    def observe_step(self, wall_s: float, forward_s: float, draft_s: float, requests: int, tokens: int,
                     pure_decode: bool, draft_requests: int = 0, draft_depth: int = 0,
                     ragged_extra: int = 0, extra_groups: int = 0) -> None:
        """Refresh the cost model from a finished step: the target's forward (pure decode steps only: prefill
        chunks lie far outside the grid, at other context lengths; `OnlineTargetCosts.learn`, with the longest
        request's `ragged_extra` rows beyond 1 and the step's `extra_groups` query-length groups beyond two),
        the drafter's time (it ran `draft_depth` batched iterations for `draft_requests` requests, the first
        with the catch-up rows planned for them), the probes' price, the host overhead, and (a draft model's
        pure decode steps) the depth plan's calibration."""
        # the table's row and uniform lookup for this step, read once and before this step refreshes them
        row, table_s = self.costs.read(requests, tokens) if pure_decode else (0, 0.0)
        if self.calibrate and self.draft_cost is not None and pure_decode:
            if draft_depth == 0:
                self.calibration.observe_plain(row, wall_s, table_s + self.overhead_s)
            else:  # every drafting step counts towards the next plain probe, priced or not (held, trimmed)
                self.calibration.note_drafting(row)
                if self._planned is not None:
                    self.calibration.observe_spec(self._planned[0], wall_s, self._planned[1])
        self._planned = None
        if pure_decode:
            self.costs.learn(row, table_s, forward_s, requests, tokens, ragged_extra, extra_groups)
        if self.draft_cost is not None and draft_depth > 0 and draft_requests > 0:
            self.catch_ups.observe(self.draft_cost, draft_s, draft_requests, draft_depth)
        host_s = max(0.0, wall_s - forward_s - draft_s)
        if self.probe.priced is not None and draft_depth > 0:  # a probe ran: its drafter and extra host time
            # a pure decode step's forward against the plain step's lookup (all requests 1 row), as run now
            over_s = forward_s - self.costs.now(row, self.cost.lookup(requests, requests)) if pure_decode else None
            self.probe.observe(draft_s, max(0.0, host_s - self.overhead_s), over_s)
        self.probe.priced = None
        self.overhead_s += 0.1 * (host_s - self.overhead_s)
        if pure_decode:
            drafted = draft_depth > 0 and draft_requests > 0
            last = self._host_s[drafted]
            self._host_s[drafted] = host_s if last is None else last + 0.1 * (host_s - last)
        self.probe.since_s += wall_s
        self.observed_s += wall_s

    def stats(self, steps: int) -> dict[str, float | int]:
        """The policy's counters over the engine's `steps`: positions verified per step, offered to the policy,
        drafted, verified beyond the plan to explore; the probes (workers/probes.py), their drafter seconds and
        their forwards' seconds over a plain step's, and that as a share of the observed time; the idle
        plans held without computing and those the bound decided without the search. The probes' share is
        what they cost where nothing else drafts. `position1_level`: position 1 as the depth plan reads it, with
        the faded count of labels behind it (workers/first_position.py)."""
        probe = self.probe
        probe_s = probe.draft_s + probe.forward_over_s
        return {"verified_per_step": self.verified_positions / steps if steps else 0.0,
                "offered_positions": self.offered_positions, "drafted_positions": self.drafted_positions,
                "explored_positions": self.exploration.positions, "probes": probe.probes,
                "probe_draft_s": round(probe.draft_s, 4), "probe_forward_over_s": round(probe.forward_over_s, 4),
                "probe_share": round(probe_s / self.observed_s, 5) if self.observed_s else 0.0,
                "idle_plans_held": self.idle_plans_held, "idle_plans_bounded": self.idle_plans_bounded,
                "plain_probes": self.plain_probes,
                "outlier_steps": self.costs.outliers.rejected,
                "position1_level": round(float(self._plan_prior()[0]), 4),  # what the depth plan counts on
                "position1_labels": round(self.first.labels, 1)}

    @property
    def draft_host_s(self) -> float:
        """Host seconds a drafting step adds over one that does not draft (pure decode steps; 0 until
        both kinds were seen): the estimates, the trim, learning, the sampler's verify path. The depth plan
        prices it; `overhead_s`, on every option alike, could not tell drafting from not."""
        drafted, plain = self._host_s[True], self._host_s[False]
        return 0.0 if drafted is None or plain is None else max(0.0, drafted - plain)

    def _base_emitted(self, plan: "ScheduledStep", base_tokens: int) -> float:
        """What the step's work without any draft is worth, in tokens. A pure decode step: one token per
        decoding request. A step that also prefills does work the closed loop pays whatever speculation does
        (the same prompts are prefilled either way), so verified positions there compete with decoding only:
        the step's seconds are valued at the rate decoding alone runs, B tokens per cost(B, B) (no
        speculation's decode rate, a floor under the rate speculation reaches). Counting only the decode
        tokens made any speculation look good next to a prefill (at c=32 ShareGPT most of the trained draft's
        verified positions were in such steps); valuing the step at the engine's recent rate, prefill time
        included and so lower, still passed positions that cost more per token than decoding does: n-gram,
        repetitive, c=32 verified deeper than k=2 (mean acceptance length 3.3 against 2.5), where only k=2
        pays (k=4 0.97x of no speculation), and ran at 0.975x of k=2 (docs/performance.md)."""
        B = len(plan.decodes)
        if not plan.prefills or B == 0:
            return float(B)
        decode_s = self.cost.lookup(B, B) + self.overhead_s
        base_s = self.cost.lookup(B + len(plan.prefills), base_tokens) + self.overhead_s
        return max(float(B), B * base_s / decode_s)

    def learn(self, proposal: "Proposal", verify: list[tuple[int, object, int, int]], accepted: list[int]) -> None:
        rows = [(b, n, a) for (b, _, n, _), a in zip(verify, accepted) if b >= 0]
        drafted = [a for _, n, a in rows if n > 0]
        self.first.observe(len(drafted), sum(1 for a in drafted if a > 0))
        if self._planned is not None and self.calibrate_survival:
            self._observe_gain(rows)
        if self._planned_mixed is not None:
            self._observe_mixed_gain(rows)
        if getattr(self.estimator, "uses_history", False):  # the next trim's history key (n-gram table)
            self._verified_last.update((req.req_id, (n, a)) for (b, req, n, _), a in zip(verify, accepted)
                                       if b >= 0 and n > 0)
        if not rows or proposal.features is None or not any(n for _, n, _ in rows):  # nothing verified
            return
        # the whole batch, rows that verified nothing with 0 (labelled nowhere): the very features tensor the
        # trim predicted from, whose cells the n-gram table kept (`NgramEstimator._cells`)
        verified, accepted = [0] * proposal.features.shape[0], [0] * proposal.features.shape[0]
        for b, n, a in rows:
            verified[b], accepted[b] = n, a
        self.estimator.observe(proposal.features, verified, accepted)

    def _observe_gain(self, rows: list[tuple[int, int, int]]) -> None:
        """The depth plan's survival against the outcome, per position, for the drafts verified this step
        (`rows`: (request's row in the plan, verified, accepted))."""
        row, _, scores = self._planned
        K = scores.shape[1]
        accepted, expected, verified = torch.zeros(K), torch.zeros(K), torch.zeros(K)
        for b, n, a in rows:
            m = min(n, K)
            verified[:m] += 1
            accepted[:min(a, m)] += 1
            expected[:m] += scores[b, :m]
        self.calibration.observe_gain(row, accepted, expected, verified)

    def _observe_mixed_gain(self, rows: list[tuple[int, int, int]]) -> None:
        """A step that also prefilled: per position, the drafts accepted against the survival the depth plan
        counted on for ALL it drafted, verified or cut by the trim (that loss is the point: "Mixed steps")."""
        row, scores, drafted = self._planned_mixed
        self._planned_mixed = None
        K = scores.shape[1]
        accepted = torch.zeros(K)
        for b, _, a in rows:
            accepted[:min(a, K)] += 1
        self.mixed_calibration.observe_gain(row, accepted, scores.sum(0), drafted.sum(0).float())
