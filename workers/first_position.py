"""The depth plan's level of position 1: acceptance measured on the drafts verified, with a bounded optimism
that grows while nothing drafts.

The depth plan read position 1 from the running mean of the estimates, which only drafts move, and the
estimates can sit far from the outcomes: warmed on the grid's 16 ShareGPT warm-up requests (where 0.229 of
position-1 drafts were accepted), the trained draft's estimator rated other ShareGPT prompts' position-1
drafts at 0.208 where 0.349 were accepted (seed 14, fixed k=2 at c=2; the warm-up prompts themselves: 0.194
against 0.239; ad hoc, 2026-12-07). The features do not tell one prompt sample's acceptance from another's,
and the plan, rating drafting below not drafting, stayed idle where fixed k=2 ran 1.03-1.09x of no
speculation: no drafts, no labels, nothing to correct it (docs/performance.md, "thirteenth session").

So position 1's level is what its verified drafts did (a fading count of labels and acceptances, LEVEL_MEMORY
labels), plus an upper-confidence bonus, LEVEL_Z standard errors of that mean. While plans draft nothing, the
count fades (by e every LEVEL_FADE_PLANS idle plans, down to LEVEL_MIN_LABELS), so the bonus grows: a level
within about LEVEL_Z * sqrt(m (1 - m) / LEVEL_MIN_LABELS) (~0.1 at m = 0.25) of the point where drafting pays
is tried again, and its labels settle it; a level further off never is. While plans draft, labels keep the
count near LEVEL_MEMORY and the bonus near 0.02-0.03. The constants were chosen, not tuned.

Measured (trained draft, A/B against variant `nolevel` of benchmarks/adaptive_variant_ab.py, paired against
max(no speculation, k=2), median of 3-4 interleaved cycles): ShareGPT c=2 1.005 against 0.949, ShareGPT c=4
1.022 against 0.954; repetitive c=1, c=2 and c=8, ShareGPT c=8 and c=16, repetitive c=32 within the A/B's
noise of each other (docs/performance.md, "fourteenth session").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL_MEMORY = 512  # labels: each new label fades the older ones by 1 - 1/LEVEL_MEMORY
LEVEL_FADE_PLANS = 64  # an idle plan fades the count by exp(-1/LEVEL_FADE_PLANS)
LEVEL_MIN_LABELS = 16.0  # the count fades no lower: the bonus's bound
LEVEL_PRIOR = 4.0  # the estimates' running mean weighs as this many labels
LEVEL_Z = 1.0
_FADE = math.exp(-1.0 / LEVEL_FADE_PLANS)


@dataclass(slots=True)
class FirstPositionLevel:
    labels: float = 0.0  # faded count of position-1 drafts verified
    accepted: float = 0.0  # of them accepted, faded alike
    enabled: bool = True  # False: the plan reads the estimates' running mean alone (an A/B's variant)

    def observe(self, labels: int, accepted: int) -> None:
        """A step verified `labels` position-1 drafts, `accepted` of them accepted."""
        if labels:
            keep = (1.0 - 1.0 / LEVEL_MEMORY) ** labels
            self.labels, self.accepted = self.labels * keep + labels, self.accepted * keep + accepted

    def fade(self) -> None:
        """A plan drafted nothing: the evidence ages (the mean it gives stays)."""
        if self.labels > LEVEL_MIN_LABELS:
            keep = max(_FADE, LEVEL_MIN_LABELS / self.labels)
            self.labels, self.accepted = self.labels * keep, self.accepted * keep

    def level(self, estimate: float) -> float:
        """Position 1's level for the plan: the outcomes' mean (the estimates' running mean `estimate` as a weak
        prior) plus LEVEL_Z standard errors; `estimate` alone until a draft was verified."""
        if not self.enabled or self.labels <= 0.0:
            return estimate
        n = self.labels + LEVEL_PRIOR
        mean = (self.accepted + LEVEL_PRIOR * min(max(estimate, 0.0), 1.0)) / n
        return min(mean + LEVEL_Z * math.sqrt(mean * (1.0 - mean) / n), 1.0)
