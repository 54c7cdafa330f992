"""The draft-depth plan of adaptive verification, before drafting: how deep each request drafts.

A draft model's positions cost drafter time whether or not the trim verifies them after (free n-gram drafts
keep k), so `plan_depths` caps each request's depth where the running mean of the estimates says deeper
positions will not be verified (position 1 at the level its outcomes give: workers/first_position.py). A
part of `AdaptiveVerifier` (workers/adaptive.py), which owns the state it reads: the cost tables, the
estimates' running mean, position 1's level, the calibrations, the probes and the catch-ups.
"""
from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING

import numpy as np
import torch

from workers.budget import drafting_cannot_pay, plan_verify_lengths, step_seconds, survival
from workers.catch_up import CATCH_UP_HORIZON
from workers.probes import PROBE_EVERY

if TYPE_CHECKING:
    from workers.scheduler import ScheduledStep

# The depth plan predicts every request's next draft from the running mean of the estimates (`_prior`): a
# request's own last estimates, about last step's token, say nothing about its next one. Measured with the
# trained draft drafting 2 every step (ad-hoc log, not committed; Brier score of position 1's outcome): ShareGPT
# c=1 a constant 0.199, the last estimate 0.247, shrunk halfway to the mean 0.214 (the rule before), this
# step's own estimate 0.170; repetitive c=1 0.195, 0.246, 0.210, 0.161; repetitive c=16 0.204, 0.240, 0.210,
# 0.158. Requests whose last estimate was under 0.1 were accepted at 0.32 (ShareGPT c=1) against 0.23 above
# 0.5. The trim, after drafting, still reads each draft's own estimates.

# Mixed steps: steps that also prefill calibrate the depth plan on their own (`mixed_calibration`, per
# request count), as their plans were wrong twice over and nothing corrected them (the plan's calibration
# reads pure decode steps only). Measured at the trained draft, repetitive c=32 (0.95x of no speculation;
# ad-hoc plan logs, not committed):
# - survival: the plan drafted on last step's estimates shrunk to the batch mean (the mean alone now); the trim
#   re-prices the drafts with fresh ones against rows priced as decode rows, and at c=32 that bar (~0.3) is near
#   the mean estimate, so the plan drafted most requests and the trim kept the upper half. Its plans there counted on
#   104.6 extra tokens and 54 were accepted (pure decode steps: 24.6 and 25). So each position's survival is
#   scaled by accepted over the survival counted on for ALL it drafted, those the trim cut included.
# - the drafter's time: its catch-ups, priced spread over the steps a request has left (CATCH_UP_HORIZON),
#   were paid whole again and again, as requests drafted now and then: 77 ms of drafting per drafting step
#   against a ~25 ms iteration (3.45x the plan's price).
# With both, the point read 0.987 of no speculation (0.977-0.997, 2 cycles; the code before: 0.950 and 0.959).
# The second part, the plan's drafting prices multiplied by the drafter's observed / priced seconds in such
# steps, was taken out on 2026-12-06 (variant `nomixedscale` of benchmarks/adaptive_variant_ab.py, interleaved,
# against adaptive with it): the ratio also counts a request's first catch-up, its whole prompt, paid once
# whenever it drafts first, and a new request's first draft is often in a step that also prefills. At
# ShareGPT c=16 it read 1.63, priced an iteration at 11-14 ms against ~7 in pure decode steps, and the plan
# drafted in about half of those steps where fixed k=1 (1.02-1.06x of no speculation at c=8-16) drafts in all.
# Without it, per cycle: ShareGPT c=8 +4.0, +2.3, -1.1 and +0.5, +1.8, -0.2, +1.2%; c=16 +2.8, +0.7, +1.2%;
# repetitive c=32, the point the ratio was made for, +2.0, +1.7, +1.0 and +1.0, +0.2, +0.1% (docs/performance.md).
# A placebo later read the variant's slot alone up to ~2% ahead (median 0.65%; "fourth session"), so these gains
# are mostly within it: the removal stands for its simplicity more than for its speed.

# A depth plan that drafts, in a pure decode step, is applied again to the same batch for up to PROBE_EVERY - 1
# more plans while the running mean of the estimates stays within this of what it read (each drafting step
# moves it: ~0.01-0.015 a position at c=1). At c=1, where the batch changes only between requests, the plan was
# computed every step a request drafted: ~0.5 ms of a ~40 ms step (perf_counter in the engine, ad-hoc), where
# fixed k pays nothing; adaptive's steps drafting depth 1 there ran ~3% under fixed k=1's at the same depth.
# With the hold and budget._one_request: 0.993 of fixed k=1 against 0.960 (trained draft, repetitive c=1, A/B in
# one process, 4 interleaved cycles; docs/performance.md, "After the grid").
PLAN_HOLD_DRIFT = 0.05


class DepthPlan:
    """`AdaptiveVerifier.plan_depths` and its helpers (a mixin: the verifier holds the state)."""

    def plan_depths(self, plan: "ScheduledStep") -> None:
        """Before drafting: cap each request's draft depth where the running mean of the estimates says deeper
        positions will not be verified (drafting them would be pure cost). Free drafts (n-gram) keep k."""
        self._planned = self._planned_mixed = self.probe.priced = None
        if not plan.decodes or (self.draft_cost is None and self.capacity_planner is None):
            return
        reqs = [r for r, _ in plan.decodes]
        if self._idle_plan_holds(reqs, plan):  # before any tensor is built: ~0.4 ms of a 41 ms step at c=1
            plan.decodes = [(r, 0) for r in reqs]
            return
        if self._plain_probe(reqs, plan):
            return
        if self._drafting_plan_holds(reqs, plan):
            return
        depths = [d for _, d in plan.decodes]
        # `calibration`: pure decode steps; steps that also prefill: `mixed_calibration` ("Mixed steps" above)
        calibrated, row = self.calibrate and not plan.prefills, self.cost.nearest_requests(len(reqs))
        self.catch_ups.clear()
        planning = self.draft_cost is not None and self.estimator_ready
        if planning:
            B = len(reqs)
            rows = self.catch_ups.note(reqs)
            # a plan that drafted nothing changes no estimate, and the catch-ups only grow: until the batch
            # changes, the same plan holds (re-checked every PROBE_EVERY plans as the cost tables refresh).
            # The plan was ~0.4 ms of a 43 ms step at c=1, where the trained draft pays nowhere.
            key = (tuple(r.req_id for r in reqs), bool(plan.prefills))
            prefill_tokens = sum(c for _, c in plan.prefills)
            step = (B + len(plan.prefills), B + prefill_tokens)
            idle = key == self._idle_key and self._idle_plans < PROBE_EVERY  # only a probe gets here
            if self.capacity_planner is None and (idle or self._cannot_pay(reqs, depths, rows, plan, row, calibrated)):
                if idle:
                    self._idle_plans += 1
                else:
                    self._idle_key, self._idle_plans, self._held = key, 0, None
                    self.idle_plans_bounded += 1
                self._plan_idle(plan, reqs, depths, rows, step, row, calibrated)
                return
        n = torch.tensor(depths)
        scores = survival(self._plan_prior().expand(len(reqs), -1), n)  # the running mean for all (see `_prior`)
        caps, gauged = n, False
        if planning:
            extra = torch.tensor(rows)  # [B] rows beyond the usual 1
            if idle:
                caps, self._idle_plans = torch.zeros_like(n), self._idle_plans + 1
            else:
                # survival scaled per position by what drafts delivered (non-increasing still: a prefix)
                rated = self._rated(scores, row, mixed=bool(plan.prefills), calibrated=calibrated)
                catch_up_s = self.catch_ups.row_s(self.draft_cost, B) * extra  # [B]
                amortised = catch_up_s / self.catch_ups.horizon(reqs, scores)
                iteration_s = self.draft_cost.lookup(B, B)
                chosen = plan_verify_lengths(rated, self.cost, *step, self._base_emitted(plan, step[1]),
                                             self.overhead_s, iteration_s, amortised, draft_host_s=self.draft_host_s,
                                             decode_rows_floor=bool(plan.prefills),
                                             **self._scales(row, calibrated))
                caps = chosen.lengths
                drafts = bool(caps.any())
                if not drafts:
                    self.first.fade()
                if calibrated and drafts:  # the step pays its catch-ups whole: so does the prediction
                    unpaid = float(((catch_up_s - amortised) * (caps > 0)).sum())
                    self._planned = (row, chosen.seconds + unpaid, scores)
                gauged = self.calibrate and bool(plan.prefills) and drafts  # "Mixed steps" above
                self._idle_key, self._idle_plans = (None if drafts else key), 0
                held = drafts and not plan.prefills
                self._held = (key, caps.tolist(), self._planned, self._prior.tolist(), 0) if held else None
            # a probe's estimates reset the idle plan (`_remember`)
            probe = self._choose_probe(bool(caps.any()), depths, rows, step)
            if probe is not None:
                if calibrated:
                    self._planned = self._probe_planned(row, B, scores)
                caps = caps.clone()
                caps[probe] = 1
        if self.capacity_planner is not None:  # shared drafter: offer only the positions this replica wants
            wanted = scores * (torch.arange(scores.shape[1])[None, :] < caps[:, None])
            caps = torch.minimum(caps, self.capacity_planner([r.req_id for r in reqs], wanted))
        depths = torch.minimum(n, caps)
        plan.decodes = list(zip(reqs, depths.tolist()))
        if gauged:
            drafted = torch.arange(scores.shape[1])[None, :] < depths[:, None]  # [B, K]
            self._planned_mixed = (row, scores * drafted, drafted)

    def _cannot_pay(self, reqs: list, depths: list[int], extra: list[int], plan: "ScheduledStep", row: int,
                    calibrated: bool) -> bool:
        """The search's bound (`budget.drafting_cannot_pay`) says no draft pays, read from the running mean
        alone: every request's survival is the same curve cut at its depth, so the ranked scores are that curve
        (rated as `_rated` does) with each value repeated as often as requests may draft that deep, and the least
        catch-up is a loop over the requests. The search would plan nothing too, but pays for [B, K] tensors
        first: at c=32 half the plans were such idle ones, ~0.5 ms each after a forward (trained draft,
        ShareGPT, this CPU; ad-hoc timers), which on an H200's ~25 ms step is ~2%. Python floats here, the
        search's float32 tensors there: the same plans up to rounding."""
        curve = list(itertools.accumulate((min(max(p, 0.0), 1.0) for p in self._plan_prior_list()), operator.mul))
        K, rated = len(curve), curve
        gain = self._gain(row, K, mixed=bool(plan.prefills), calibrated=calibrated)
        if gain is not None:
            rated = list(itertools.accumulate((c * g for c, g in zip(curve, gain)), min))
        by_depth = [0] * (K + 1)
        for d in depths:
            by_depth[min(d, K)] += 1
        deeper = list(itertools.accumulate(reversed(by_depth)))[::-1][1:]  # [K] requests that may draft there
        live = sum(1 for r in rated if r > 0)  # rated never increases: its positive values lead
        ranked = np.repeat(np.array(rated[:live]), deeper[:live])
        if not len(ranked):
            return True
        B, prefill_tokens = len(reqs), sum(c for _, c in plan.prefills)
        sums = [0.0, *itertools.accumulate(curve)]  # unrated, as the horizon reads them
        least = min(e / min(max(max(r.max_tokens - r.num_output, 1) / (1.0 + sums[min(d, K)]), 1.0), CATCH_UP_HORIZON)
                    for r, d, e in zip(reqs, depths, extra) if d > 0) * self.catch_ups.row_s(self.draft_cost, B)
        step_s = step_seconds(self.cost, B + len(plan.prefills), B + prefill_tokens, B, len(ranked),
                              self.overhead_s, decode_rows_floor=bool(plan.prefills))
        scales = self._scales(row, calibrated)
        return drafting_cannot_pay(ranked, step_s, self._base_emitted(plan, B + prefill_tokens),
                                   scales["plain_scale"], scales["spec_scale"],
                                   self.draft_cost.lookup(B, B) + self.draft_host_s, least)

    def _scales(self, row: int, calibrated: bool) -> dict[str, float]:
        """The plan's time scales (workers/plan_calibration.py; 1.0 where not calibrated), the plain step's rate
        raised by `draft_margin`: drafting must beat not drafting by that fraction (0: as calibrated)."""
        scales = self.calibration.scales(row) if calibrated else {"plain_scale": 1.0, "spec_scale": 1.0}
        return {**scales, "plain_scale": scales["plain_scale"] / (1.0 + self.draft_margin)}

    def _plan_idle(self, plan: "ScheduledStep", reqs: list, depths: list[int], extra: list[int],
                   step: tuple[int, int], row: int, calibrated: bool) -> None:
        """No request drafts, unless a probe is due (`ProbeSchedule.choose`): in lists, as each torch op here costs
        15-20 us after a forward has evicted the host's caches (a computed idle plan was ~0.5 ms at c=32 on this
        CPU, ~0.1 ms of it these ops)."""
        self.first.fade()
        probe = self._choose_probe(False, depths, extra, step)
        plan.decodes = [(r, int(i == probe)) for i, r in enumerate(reqs)]
        if probe is not None and calibrated:
            self._planned = self._probe_planned(row, len(reqs), survival(self._plan_prior().expand(len(reqs), -1),
                                                                         torch.tensor(depths)))

    def _plan_prior_list(self) -> list[float]:
        """What the plan counts on per position: the running mean of the estimates, position 1 at its level
        from the outcomes (workers/first_position.py)."""
        prior = self._prior.tolist()
        prior[0] = self.first.level(prior[0])
        return prior

    def _plan_prior(self) -> torch.Tensor:  # [K]
        return torch.tensor(self._plan_prior_list())

    def _probe_planned(self, row: int, B: int, scores: torch.Tensor) -> tuple[int, float, torch.Tensor]:
        """A probe step as the calibration predicts it: the plain step, one draft iteration, its catch-up, one
        more row (`ProbeSchedule.cost_s`), and the host time of a drafting step."""
        plain_s = self.cost.lookup(B, B) + self.overhead_s
        return row, plain_s + self.probe.cost_s + self.draft_host_s, scores

    def _rated(self, scores: torch.Tensor, row: int, mixed: bool, calibrated: bool) -> torch.Tensor:  # [B, K]
        """The survival the depth plan counts on, scaled per position by what such drafts delivered
        (non-increasing still: a prefix): in steps that also prefill unless calibrate_plan is "off" ("Mixed
        steps" above), in pure decode steps with "time+survival"."""
        gain = self._gain(row, scores.shape[1], mixed, calibrated)
        return scores if gain is None else (scores * torch.tensor(gain)).cummin(dim=1).values

    def _gain(self, row: int, K: int, mixed: bool, calibrated: bool) -> list[float] | None:
        """`_rated`'s scale per position, None where it does not scale."""
        if mixed and self.calibrate:
            return self.mixed_calibration.gain_values(row, K)
        if calibrated and self.calibrate_survival:
            return self.calibration.gain_values(row, K)
        return None

    def _idle_plan_holds(self, reqs: list, plan: "ScheduledStep") -> bool:
        """The idle plan (no drafts) holds for this batch, no probe is due and no one else caps the depth:
        count the plan (as `ProbeSchedule.choose` would) and say so."""
        if (self.capacity_planner is not None or self._idle_key is None or self._idle_plans >= PROBE_EVERY
                or self.probe.due(self.probe.since + 1)):
            return False
        if self._idle_key != (tuple(r.req_id for r in reqs), bool(plan.prefills)):
            return False
        self._idle_plans += 1
        self.probe.since += 1
        self.catch_ups.clear()
        self.idle_plans_held += 1
        self.first.fade()
        return True

    def _plain_probe(self, reqs: list, plan: "ScheduledStep") -> bool:
        """A pure decode step while the plan drafts, due for a plain probe (plan_calibration.PLAIN_PROBE_EVERY):
        no request drafts, so the step measures the plain-step ratio at the machine's speed of the moment."""
        if (not self.calibrate or plan.prefills or self.capacity_planner is not None or self.draft_cost is None
                or not self.calibration.plain_probe_due(self.cost.nearest_requests(len(reqs)))):
            return False
        plan.decodes = [(r, 0) for r in reqs]
        self.catch_ups.clear()
        self.plain_probes += 1
        return True

    def _drafting_plan_holds(self, reqs: list, plan: "ScheduledStep") -> bool:
        """A pure decode step of the batch whose last depth plan drafted, fewer than PROBE_EVERY plans ago, with
        the running mean within PLAN_HOLD_DRIFT of what that plan read: apply that plan again (each request's
        depth capped by what it may draft now) instead of computing it."""
        held = self._held
        if (held is None or plan.prefills or self.capacity_planner is not None or held[4] >= PROBE_EVERY - 1
                or held[0][0] != tuple(r.req_id for r in reqs)
                or max(abs(a - b) for a, b in zip(self._prior.tolist(), held[3])) > PLAN_HOLD_DRIFT):
            return False
        key, caps, planned, prior, count = held
        self._held = (key, caps, planned, prior, count + 1)
        self.catch_ups.note(reqs)
        self._planned = planned
        self.probe.reset()  # as a plan that drafts does
        plan.decodes = [(r, min(d, c)) for (r, d), c in zip(plan.decodes, caps)]
        return True

    def _choose_probe(self, drafts: bool, n: list[int], extra: list[int], step: tuple[int, int]) -> int | None:
        """The request to probe this step, if one is due (`ProbeSchedule.choose`)."""
        return self.probe.choose(drafts, n, extra, step, self.cost, self.draft_cost, self.catch_ups)
