"""Probes: when the depth plan drafts nothing, one request still drafts one position now and then.

Estimates come from the draft's own features, so a request planned at depth 0 never gets new ones and stayed
undrafted for good (measured: the trained draft on repetitive prompts at c=1 drafted 0 of 188 steps, 18.9 tok/s
vs 21-22 for fixed k=2). The probe takes the request whose draft has the least to catch up on: probing every
request made each draft feed every token generated since its last one, the draft's whole share of a full
speculation run (c=8 ShareGPT: 170-330 ms of drafting per ~100 steps for 2-6 verified positions), while one
request's fresh estimates already move the running mean that plans the others.

A probe is due after at least PROBE_EVERY plans and once its predicted cost (one draft iteration, the request's
catch-up rows, one more verified row) is at most `share` of the time since the last one. The share halves after
each probe that changes nothing, from PROBE_SHARE to PROBE_SHARE_MIN; any plan that drafts on its own resets
it. A wait counted in plans (8 doubling to 64) let probes cost 1-1.6% of the time where no draft pays (trained
draft, ShareGPT, c=1: a probe first feeds the whole prompt, ~27 ms of a 41 ms step, 0.4-0.67 ms per step in
all); a probe now costs at most ~0.4% of the time there.

A probe's drafting is priced from its tables and then scaled by what probes cost: their drafter seconds and the
host seconds their step took over the running overhead, against that price (PROBE_SCALE_RATE, a running mean).
Priced from the tables alone (one iteration of one request, its catch-up rows at the batch's row slope), probes
at trained draft, repetitive c=32 were priced ~4.2 ms and took 4.5-7.8 ms of drafting and ~1 ms of host time
(ad-hoc probe log, not committed): 22 probes in 208 steps cost ~0.8% of the time, where PROBE_SHARE_MIN meant
0.4%.
"""
from __future__ import annotations

from dataclasses import dataclass

from workers.catch_up import CatchUpLedger
from workers.cost_table import CostTable

PROBE_EVERY = 8
PROBE_SHARE = 1 / 8
PROBE_SHARE_MIN = 1 / 512
PROBE_SCALE_RATE = 0.25
PROBE_SCALE_BOUNDS = (0.5, 8.0)


@dataclass(slots=True)
class ProbeSchedule:
    since: int = 0  # depth plans since the last probe or the last plan that drafted
    since_s: float = 0.0  # the engine's seconds since then (observed step times)
    share: float = PROBE_SHARE  # of that time, what the next probe may cost
    cost_s: float = 0.0  # the next probe's predicted cost, as last computed
    scale: float = 1.0  # what probes' drafting and host time took over its price (PROBE_SCALE_RATE)
    priced: float | None = None  # the drafting price of a probe in this step, until observed
    # what the idle path costs, for `stats` (counted only; nothing here steers the policy)
    probes: int = 0
    draft_s: float = 0.0  # the drafter's seconds in steps that probed
    forward_over_s: float = 0.0  # their forward over a plain step's (pure decode probe steps)

    def reset(self) -> None:
        """A plan drafts: the next probe waits PROBE_EVERY plans again, at the first share."""
        self.since, self.since_s, self.share = 0, 0.0, PROBE_SHARE

    def due(self, plans: int) -> bool:
        """`plans` plans and the observed time since the last probe allow the next (as last priced)."""
        return plans >= PROBE_EVERY and self.since_s * self.share >= self.cost_s

    def choose(self, drafts: bool, n: list[int], extra: list[int], step: tuple[int, int], cost: CostTable,
               draft_cost: CostTable, catch_ups: CatchUpLedger) -> int | None:
        """When a probe is due and no request drafts (`drafts` False): the undrafted request to draft one
        position, the one whose draft has the least to catch up on (`extra`: its catch-up rows beyond 1;
        `step`: the step's sequences and tokens without drafts). The share halves after each probe; a plan
        that drafts resets it. Lists, not tensors: this runs on every idle plan (~0.09 ms a call with tensors
        at c=32)."""
        if drafts:
            self.reset()
            return None
        self.since += 1
        idle = [i for i, d in enumerate(n) if d > 0]
        if not idle:
            return None
        b = min(idle, key=extra.__getitem__)
        verify_row_s = max(cost.lookup(step[0], step[1] + 1) - cost.lookup(*step), 0.0)
        drafting_s = draft_cost.lookup(1, 1) + catch_ups.row_s(draft_cost, len(n)) * extra[b]
        self.cost_s = self.scale * drafting_s + verify_row_s
        if not self.due(self.since):
            return None
        self.priced = drafting_s
        self.probes += 1
        self.since, self.since_s = 0, 0.0
        self.share = max(self.share / 2, PROBE_SHARE_MIN)
        return b

    def observe(self, draft_s: float, extra_host_s: float, forward_over_s: float | None) -> None:
        """A step that probed ran: its drafter's seconds and the host seconds over the running overhead
        (`extra_host_s`) rescale the price; `forward_over_s`: its forward over a plain step's, if a pure decode
        step. Call only while `priced` is set (the step drafted)."""
        self.draft_s += draft_s
        if forward_over_s is not None:
            self.forward_over_s += forward_over_s
        ratio = (draft_s + extra_host_s) / max(self.priced, 1e-12)
        ratio = min(max(ratio, PROBE_SCALE_BOUNDS[0]), PROBE_SCALE_BOUNDS[1])
        self.scale += PROBE_SCALE_RATE * (ratio - self.scale)
