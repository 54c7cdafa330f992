"""How far the depth plan's cost model is from the steps it chose, measured online.

The depth plan (a draft model's: drafting costs real time) compares drafting some positions with drafting
none, from the warm-up tables, the host-time averages and the estimates (a running mean since 2026-12-03;
these measurements read each request's previous ones). Each of those is
refreshed on its own, yet their sum missed in both directions, by more than the margin the choice turns on
(trained draft, c=2-4, one run each, not committed):
- repetitive c=4: steps that drafted took 85.1 ms against 75.5 predicted, and emitted 1.00 extra token
  against 1.26; steps that did not took 65.4 ms against 65.0. Drafting steps ran at 58.8 tok/s, plain steps
  at 61.2, while the plan rated drafting 69.7 against 63.7.
- ShareGPT c=2: drafting steps took 66.9 ms against 67.3 predicted, but plain steps 48.1 against 57.2
  (why the table's plain cell read high there was not found) and extra tokens were 0.57
  against 0.64: drafting ran at 38.4 tok/s, plain steps at 41.6.
So the plan keeps, per request count, the ratio of observed to predicted time for the two kinds of step
(a probe counts as drafting), and per draft position the ratio of drafts accepted to the survival it counted
on (then each request's previous estimates, which regress to the mean once the plan picks the requests whose
estimates were high; deeper positions compound the error). It scales its next choices by them. Predictions are kept
unscaled, so a ratio measures the model alone and the correction never feeds on itself. Until a kind of step
has been seen CALIBRATION_MIN_STEPS times at a request count, it borrows the other kind's ratio (see
`scales`); so does a plain-step ratio no plain step refreshed for PLAIN_STALE_STEPS drafting steps.

One ratio for all positions was tried first: at ShareGPT c=1 the deep positions' shortfall set it to its
floor, 0.5, and the plan stopped drafting where fixed k=2 beats no speculation by 7% (0.908 of k=2 against
0.964 uncalibrated, one process, 3 interleaved cycles); nor could it recover, as only the steps the plan
chose to draft in taught it.

`SpecConfig.calibrate_plan` picks what is applied: "time" (the default) scales the two kinds of step time
only; "time+survival" also each position's survival; "off" neither (nothing is measured). Time and
survival together lost at repetitive c=1 (0.961 against 0.983 of max(no speculation, k=2), the second
position's ratio at its floor) and the c=1-8 grid run with them read the trained draft lower at c=1-2. Time
alone, in one process against no calibration (3 interleaved cycles a point): repetitive c=1 0.991 against
0.967, ShareGPT c=1 1.014 against 0.982, repetitive c=2 0.995 against 1.002, repetitive c=8 0.998 against
0.989 (docs/performance.md). Drafting steps there ran 4-10% under their prediction, so it drafts more.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

CALIBRATION_RATE = 0.05  # weight of one step in the running means (~20 steps)
CALIBRATION_MIN_STEPS = 8  # steps of a kind (or verifying a position) before its ratio is used
TIME_BOUNDS = (0.5, 2.0)  # a time ratio outside these says something else is wrong: do not follow it
GAIN_BOUNDS = (0.2, 1.5)  # per position
# Plain steps' ratio goes stale after this many drafting steps at its request count without a plain step: it
# then borrows the drafting steps' ratio, and the next plain steps measure it afresh. Nothing else refreshes
# it (drafting steps have probes; plain steps only come when the plan chooses them), so a ratio read high
# once stayed: 1.71 from 15 plain steps of ShareGPT c=32 still priced plain steps at repetitive c=32 later in
# the same process, where a fresh engine measured them at 0.955. Not shown to matter alone: A/B in one
# process at that point, both engines drafted in ~96% of pure decode plans, with / without 0.988 paired (2
# cycles), and 0.997 at ShareGPT c=2 where drafting pays (6 cycles; docs/architecture.md). 32 steps: ~1.6x
# the running means' memory.
PLAIN_STALE_STEPS = 32
# A plain probe: while the plan drafts, one pure decode step in PLAIN_PROBE_EVERY at a request count drafts nothing,
# so the plain-step ratio is measured beside the drafting steps, at the machine's speed of the moment, rather than
# carried from before the drafting began (or borrowed from the drafting steps once stale). A plain step after
# PLAIN_PROBE_EVERY drafting steps (a probe's, or one the plan chose) weighs PLAIN_PROBE_RATE in the running means
# (other plain steps CALIBRATION_RATE), as it is one in many. In logged losing
# states (trained draft, repetitive c=8, the grid's nine engines interleaved; benchmarks/grid_step_log.py,
# docs/performance.md, "twelfth session") the plain ratio carried 1.06-1.40 from before the drafting: the plan
# priced a plain step at ~1.1-1.5x what no speculation's steps of the same rounds took and drafted in steps that ran
# at 0.92-0.98 of no speculation's rate. With probes every 16 against without (2026-12-07; the variant slot
# against a placebo, and the other way round): ten c=8 cycles, median +0.75% (-1.7 to +2.6%: within a cycle's
# noise here); trained ShareGPT c=2, where drafting pays, -0.2% against the placebo (4 cycles). A probe costs at
# most 1/17 of what drafting gains.
PLAIN_PROBE_EVERY = 16
PLAIN_PROBE_RATE = 0.25


@dataclass(slots=True)
class _Ratio:
    """Running means of observed and predicted values; their ratio once enough steps were seen."""

    observed: float = 0.0
    predicted: float = 0.0
    steps: int = 0

    def add(self, observed: float, predicted: float, rate: float = CALIBRATION_RATE) -> None:
        if self.steps == 0:
            self.observed, self.predicted = observed, predicted
        else:
            self.observed += rate * (observed - self.observed)
            self.predicted += rate * (predicted - self.predicted)
        self.steps += 1

    @property
    def ready(self) -> bool:
        return self.steps >= CALIBRATION_MIN_STEPS and self.predicted > 0

    def value(self, bounds: tuple[float, float]) -> float:
        if not self.ready:
            return 1.0
        return min(max(self.observed / self.predicted, bounds[0]), bounds[1])


@dataclass(slots=True)
class _Kinds:
    plain: _Ratio = field(default_factory=_Ratio)  # steps that drafted nothing: seconds
    spec: _Ratio = field(default_factory=_Ratio)  # steps that drafted: seconds
    gain: list[_Ratio] = field(default_factory=list)  # per position: accepted / expected survival
    spec_since_plain: int = 0  # drafting steps seen since the last plain step (PLAIN_STALE_STEPS)
    drafting_since_plain: int = 0  # pure decode steps that drafted, priced or not, since then (PLAIN_PROBE_EVERY)


class PlanCalibration:
    """Per request count (the cost table's nearest row): observed / predicted for plain steps' time,
    drafting steps' time and, per position, accepted drafts. The depth plan keeps one for pure decode steps
    (step times, and survival with "time+survival") and one for steps that also prefill (survival only: the
    step's time there is mostly the chunk's, which the table extrapolates, ~1.5x too high at c=32 for steps
    that drafted and steps that did not alike; workers/depth_plan.py, "Mixed steps")."""

    def __init__(self, plain_stale_steps: int = PLAIN_STALE_STEPS, plain_probe_every: int = PLAIN_PROBE_EVERY) -> None:
        self._rows: dict[int, _Kinds] = {}
        self.plain_stale_steps = plain_stale_steps
        self.plain_probe_every = plain_probe_every

    def scales(self, row: int) -> dict[str, float]:
        """Keyword arguments for `plan_verify_lengths`."""
        k = self._rows.get(row)
        if k is None:
            return {"plain_scale": 1.0, "spec_scale": 1.0}
        plain, spec = k.plain.value(TIME_BOUNDS), k.spec.value(TIME_BOUNDS)
        # a kind not measured yet borrows the other's ratio: what moves one (a stale table row, the machine's
        # speed) moves both, as a drafting step contains the plain step's forward. Scaling plain steps alone
        # priced them 1.25x at c=32 before any drafting step was seen there, so drafting looked 5-22% better
        # than not; it drafted in 46 steps, accepted none (trained draft, repetitive, one run).
        # A stale plain ratio borrows too (PLAIN_STALE_STEPS).
        if not k.spec.ready:
            spec = plain
        elif not k.plain.ready or self._plain_stale(k):
            plain = spec
        return {"plain_scale": plain, "spec_scale": spec}

    def gain(self, row: int, K: int) -> torch.Tensor:  # [K] scale of each position's survival
        return torch.tensor(self.gain_values(row, K))

    def gain_values(self, row: int, K: int) -> list[float]:
        """`gain` as a list (1 where not measured)."""
        k = self._rows.get(row)
        got = [r.value(GAIN_BOUNDS) for r in (k.gain[:K] if k is not None else [])]
        return got + [1.0] * (K - len(got))

    def _plain_stale(self, k: _Kinds) -> bool:
        return k.spec_since_plain > self.plain_stale_steps

    def plain_probe_due(self, row: int) -> bool:
        """The next pure decode step at `row` should draft nothing (PLAIN_PROBE_EVERY)."""
        k = self._rows.get(row)
        return bool(self.plain_probe_every) and k is not None and k.drafting_since_plain >= self.plain_probe_every

    def note_drafting(self, row: int) -> None:
        """A pure decode step at `row` drafted (whether or not its prediction is observed: `observe_spec` sees only
        the steps whose drafts the trim kept as planned, so counting those alone spaced the probes ~2x wider)."""
        self._rows.setdefault(row, _Kinds()).drafting_since_plain += 1

    def observe_plain(self, row: int, seconds: float, predicted_s: float) -> None:
        k = self._rows.setdefault(row, _Kinds())
        probe = self.plain_probe_due(row)
        if self._plain_stale(k):  # measured afresh, borrowing the drafting steps' ratio until it is ready
            k.plain = _Ratio()
        k.spec_since_plain = k.drafting_since_plain = 0
        k.plain.add(seconds, predicted_s, PLAIN_PROBE_RATE if probe else CALIBRATION_RATE)

    def observe_spec(self, row: int, seconds: float, predicted_s: float) -> None:
        k = self._rows.setdefault(row, _Kinds())
        k.spec.add(seconds, predicted_s)
        k.spec_since_plain += 1

    def observe_gain(self, row: int, accepted: torch.Tensor, expected: torch.Tensor, verified: torch.Tensor) -> None:
        """One step's verified drafts, summed per position [K]: how many were accepted, the survival the plan
        counted on for them, and how many were verified (in steps that also prefill: drafted, the trim's cuts
        included; positions none verified teach nothing)."""
        k = self._rows.setdefault(row, _Kinds())
        while len(k.gain) < len(accepted):
            k.gain.append(_Ratio())
        for i in torch.nonzero(verified > 0).flatten().tolist():
            k.gain[i].add(float(accepted[i]), float(expected[i]))
