"""Choosing a target replica: least outstanding tokens (power of two choices) with prefix affinity.

Outstanding tokens of a replica = sum over its in-flight requests of (prompt tokens + max_tokens), tracked
by the router itself (no round trip). A request whose first `affinity_tokens` prompt tokens hash to a home
replica (rendezvous hashing: stable when replicas come and go) goes there while that replica's load stays
within `slack` of the least loaded one, so conversations sharing a prefix hit one prefix cache; otherwise
two random replicas are drawn and the less loaded one wins.
"""
from __future__ import annotations

import hashlib
import random


class ReplicaChooser:
    def __init__(self, replicas: list[str], affinity_tokens: int = 64, slack: float = 1.25, seed: int = 0) -> None:
        self.replicas = list(replicas)
        self.outstanding = {r: 0 for r in self.replicas}
        self.affinity_tokens, self.slack = affinity_tokens, slack
        self._rng = random.Random(seed)
        self.choices = {"affinity": 0, "two_choices": 0}

    def _home(self, prompt_ids: list[int]) -> str | None:
        if self.affinity_tokens <= 0 or len(prompt_ids) < self.affinity_tokens:
            return None
        key = ",".join(map(str, prompt_ids[: self.affinity_tokens])).encode()
        return max(self.replicas, key=lambda r: hashlib.blake2b(key + r.encode(), digest_size=8).digest())

    def choose(self, prompt_ids: list[int]) -> str:
        least = min(self.outstanding.values())
        home = self._home(prompt_ids)
        if home is not None and self.outstanding[home] <= self.slack * least + 256:
            self.choices["affinity"] += 1
            return home
        self.choices["two_choices"] += 1
        if len(self.replicas) == 1:
            return self.replicas[0]
        a, b = self._rng.sample(self.replicas, 2)
        return a if self.outstanding[a] <= self.outstanding[b] else b

    def started(self, replica: str, tokens: int) -> None:
        self.outstanding[replica] += tokens

    def finished(self, replica: str, tokens: int) -> None:
        self.outstanding[replica] -= tokens
