"""The global budget actor: one named Ray actor per cluster that shares drafter capacity among replicas.

What is global about it: replicas that draw their drafts from one shared drafter GPU (MPS) compete for its
capacity, C draft positions per step. Alone, a replica can only assume its share C/R; the actor holds the
latest survival scores of every replica in a drafter group and their cost tables, and gives the capacity to
the positions where they add the most tokens per second to the cluster (survival priced with each replica's cost table: a position on a compute-bound replica is worth less) (`workers.budget.allocate_capacity`). In the simulator this
gave +2% to +10% over the local split at 1..128 requests per replica (docs/performance.md). Each replica still
decides its verify lengths itself, within the caps, with its own cost table.

Replicas ask for the plan of step t+1 while step t runs (see `GlobalCapacityPlanner`), so the actor is off
the critical path; when an answer is late or the actor is gone they apply the same policy locally.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import ray
import torch

from workers.budget import allocate_capacity
from workers.cost_table import CostTable

ACTOR_NAME = "specfleet-budget"
NAMESPACE = "specfleet"


@dataclass
class _ReplicaBoard:
    group: str
    req_ids: list[str] = field(default_factory=list)
    scores: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    cost_table: CostTable | None = None  # the replica's warm-up cost table: prices its verify positions
    base_tokens: int = 0  # tokens its current step computes anyway
    estimator: dict | None = None
    updated: float = 0.0


class BudgetActor:
    """Plain class; `budget_actor_handle()` runs it as the cluster's named actor."""

    def __init__(self, group_capacity: dict[str, int] | None = None, stale_s: float = 5.0) -> None:
        self.group_capacity = dict(group_capacity or {})
        self.stale_s = stale_s  # a replica silent this long no longer takes capacity
        self.boards: dict[str, _ReplicaBoard] = {}
        self.plans = 0

    def register(self, replica_id: str, group: str, capacity: int | None = None, cost_table: str | None = None) -> None:
        table = CostTable.from_json(cost_table) if cost_table else None
        self.boards[replica_id] = _ReplicaBoard(group, cost_table=table, updated=time.monotonic())
        if capacity is not None:
            self.group_capacity[group] = int(capacity)

    def push_estimator(self, replica_id: str, state: dict) -> None:
        if replica_id in self.boards:
            self.boards[replica_id].estimator = state

    def plan(self, replica_id: str, req_ids: list[str], scores: np.ndarray, base_tokens: int | None = None
             ) -> dict[str, int]:
        """Record this replica's scores [B, K] (the positions it wants); return draft caps for its requests,
        allocated over the latest scores of every live replica in its drafter group, priced with their cost
        tables when every one registered one."""
        board = self.boards.get(replica_id) or self.boards.setdefault(replica_id, _ReplicaBoard("default"))
        board.req_ids, board.scores, board.updated = list(req_ids), np.asarray(scores, dtype=np.float32), time.monotonic()
        board.base_tokens = base_tokens if base_tokens is not None else len(req_ids)
        capacity = self.group_capacity.get(board.group)
        if capacity is None:  # an unshared drafter: no cap beyond each replica's own policy
            return {r: int(board.scores.shape[1]) for r in req_ids}
        now = time.monotonic()
        peers = [rid for rid, b in self.boards.items()
                 if b.group == board.group and now - b.updated <= self.stale_s and len(b.req_ids)]
        boards = [self.boards[rid] for rid in peers]
        costs = [(b.cost_table, len(b.req_ids), b.base_tokens) for b in boards] \
            if all(b.cost_table is not None for b in boards) else None
        caps = allocate_capacity([torch.from_numpy(b.scores) for b in boards], capacity, costs)
        self.plans += 1
        mine = caps[peers.index(replica_id)].tolist() if replica_id in peers else []
        return dict(zip(req_ids, mine))

    def state(self) -> dict:
        return {"plans": self.plans, "group_capacity": self.group_capacity,
                "replicas": {rid: {"group": b.group, "requests": len(b.req_ids), "has_cost_table": b.cost_table is not None}
                             for rid, b in self.boards.items()}}


def budget_actor_handle(group_capacity: dict[str, int] | None = None) -> "ray.actor.ActorHandle":
    """The cluster's one budget actor: created on first use, found by name afterwards (and re-created by
    whoever asks next if it died)."""
    cls = ray.remote(num_cpus=0, max_restarts=-1)(BudgetActor)
    return cls.options(name=ACTOR_NAME, namespace=NAMESPACE, get_if_exists=True, lifetime="detached").remote(
        group_capacity)
