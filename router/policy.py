"""Choosing a target replica: least outstanding tokens (power of two choices) with prefix affinity.

Outstanding tokens of a replica = sum over its in-flight requests of (prompt tokens + max_tokens), tracked
by the router itself (no round trip). A request whose first `affinity_tokens` prompt tokens hash to a home
replica (rendezvous hashing: stable when replicas come and go) goes there while that replica's load stays
within `slack` of the least loaded one, so conversations sharing a prefix hit one prefix cache; otherwise
two random replicas are drawn and the less loaded one wins. A replica whose call failed (its process died)
is avoided for `sick_s` seconds while others remain, so new requests do not queue on it while Serve
replaces it.
"""
from __future__ import annotations

import hashlib
import random
import time


class ReplicaChooser:
    def __init__(self, replicas: list[str], affinity_tokens: int = 64, slack: float = 1.25, seed: int = 0,
                 sick_s: float = 30.0) -> None:
        self.replicas = list(replicas)
        self.outstanding = {r: 0 for r in self.replicas}
        self.affinity_tokens, self.slack = affinity_tokens, slack
        self._rng = random.Random(seed)
        self.choices = {"affinity": 0, "two_choices": 0, "avoided": 0}
        self.sick_s = sick_s
        self._sick_until: dict[str, float] = {}

    def _home(self, prompt_ids: list[int]) -> str | None:
        if self.affinity_tokens <= 0 or len(prompt_ids) < self.affinity_tokens:
            return None
        key = ",".join(map(str, prompt_ids[: self.affinity_tokens])).encode()
        return max(self.replicas, key=lambda r: hashlib.blake2b(key + r.encode(), digest_size=8).digest())

    def choose(self, prompt_ids: list[int], avoid: frozenset[str] | set[str] = frozenset()) -> str:
        excluded = set(avoid) | self.sick()
        healthy = [r for r in self.replicas if r not in excluded] or self.replicas  # all sick: try anyway
        if len(healthy) < len(self.replicas):
            self.choices["avoided"] += 1
        least = min(self.outstanding[r] for r in healthy)
        home = self._home(prompt_ids)
        if home in healthy and self.outstanding[home] <= self.slack * least + 256:
            self.choices["affinity"] += 1
            return home
        self.choices["two_choices"] += 1
        if len(healthy) == 1:
            return healthy[0]
        a, b = self._rng.sample(healthy, 2)
        return a if self.outstanding[a] <= self.outstanding[b] else b

    def sick(self) -> set[str]:
        now = time.monotonic()
        return {r for r, until in self._sick_until.items() if until > now}

    def failed(self, replica: str) -> None:
        """The replica's call failed with a dead or unavailable actor: route around it for a while."""
        self._sick_until[replica] = time.monotonic() + self.sick_s

    def started(self, replica: str, tokens: int) -> None:
        self.outstanding[replica] += tokens

    def finished(self, replica: str, tokens: int) -> None:
        self.outstanding[replica] -= tokens
