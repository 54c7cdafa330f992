"""Spec-decode and latency metrics, with vLLM's definitions (see seed-notes section 2)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class SpecStats:
    """Counts over verification steps; per request and aggregated the same way."""

    num_drafts: int = 0  # verification steps that verified >= 1 draft token
    num_draft_tokens: int = 0  # draft tokens verified
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # [i]: steps whose drafts 1..i+1 all passed
    verified_per_pos: list[int] = field(default_factory=list)  # [i]: steps that verified draft i+1
    num_emitted_tokens: int = 0  # tokens emitted by decode steps (accepted + recovered/bonus)
    num_computed_positions: int = 0  # positions the target computed in decode steps (1 + verified drafts)

    def observe(self, num_draft: int, num_accepted: int, num_emitted: int) -> None:
        self.num_computed_positions += 1 + num_draft
        self.num_emitted_tokens += num_emitted
        if num_draft == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        if len(self.verified_per_pos) < num_draft:
            grow = num_draft - len(self.verified_per_pos)
            self.verified_per_pos.extend([0] * grow)
            self.accepted_per_pos.extend([0] * grow)
        for i in range(num_draft):
            self.verified_per_pos[i] += 1
        for i in range(num_accepted):
            self.accepted_per_pos[i] += 1

    def merge(self, other: "SpecStats") -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.num_emitted_tokens += other.num_emitted_tokens
        self.num_computed_positions += other.num_computed_positions
        self.accepted_per_pos = _add_lists(self.accepted_per_pos, other.accepted_per_pos)
        self.verified_per_pos = _add_lists(self.verified_per_pos, other.verified_per_pos)

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def acceptance_per_position(self) -> list[float]:
        """[i]: among steps that verified draft i+1, the fraction where drafts 1..i+1 were all accepted
        (vLLM's definition when every step verifies k drafts; exact when verify lengths vary)."""
        return [a / v for a, v in zip(self.accepted_per_pos, self.verified_per_pos)]

    @property
    def tokens_per_computed_position(self) -> float:
        return self.num_emitted_tokens / self.num_computed_positions if self.num_computed_positions else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "acceptance_per_position": [round(x, 4) for x in self.acceptance_per_position],
            "tokens_per_computed_position": round(self.tokens_per_computed_position, 4),
        }


@dataclass(slots=True)
class StepTimes:
    """Where the engine's steps went, summed over steps: the target's forward, the drafter, the adaptive
    verifier's own calls (depth plan, trim, learning, cost refresh) and the rest of the host's work
    (scheduling, the sampler, appending tokens). Per step, the host's share is what a faster accelerator
    cannot shrink: on an H200 a step of the default model took 30-70 ms at 8-128 requests (two machines,
    2026-12-04), so 0.5 ms of policy is 0.7-1.7% there against ~0.3% of a CPU step."""
    steps: int = 0
    wall_s: float = 0.0
    forward_s: float = 0.0
    draft_s: float = 0.0
    policy_s: float = 0.0
    # policy_s by the verifier's call (plan_depths, trim, learn, observe_step): which one to make cheaper
    policy_calls: dict[str, float] = field(default_factory=dict)

    def observe_policy(self, call: str, seconds: float) -> None:
        self.policy_calls[call] = self.policy_calls.get(call, 0.0) + seconds

    def observe(self, wall_s: float, forward_s: float, draft_s: float, policy_s: float) -> None:
        self.steps += 1
        self.wall_s += wall_s
        self.forward_s += forward_s
        self.draft_s += draft_s
        self.policy_s += policy_s

    def to_dict(self) -> dict[str, float | int]:
        """Milliseconds per step; `other_ms`: the host's work outside the forward, drafter and policy."""
        per = lambda s: round(1000 * s / self.steps, 3) if self.steps else 0.0  # noqa: E731
        other = self.wall_s - self.forward_s - self.draft_s - self.policy_s
        return {"steps": self.steps, "wall_ms": per(self.wall_s), "forward_ms": per(self.forward_s),
                "draft_ms": per(self.draft_s), "policy_ms": per(self.policy_s), "other_ms": per(other),
                "policy_ms_by_call": {call: per(s) for call, s in sorted(self.policy_calls.items())}}


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


LATENCY_WINDOW = 10_000  # samples kept per latency metric


@dataclass(slots=True)
class LatencyStats:
    """The latest samples only (a server runs for weeks: unbounded lists grew its memory and made every
    /metrics call sort all of them)."""
    ttft: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))  # seconds, one per request
    itl: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))  # seconds between emitted tokens

    def to_dict(self) -> dict[str, float | None]:
        ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
        return {
            "ttft_p50_ms": ms(percentile(self.ttft, 50)),
            "ttft_p99_ms": ms(percentile(self.ttft, 99)),
            "itl_p50_ms": ms(percentile(self.itl, 50)),
            "itl_p99_ms": ms(percentile(self.itl, 99)),
        }
