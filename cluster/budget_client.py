"""The replica's side of the global budget: a `CapacityPlanner` for the engine (workers/adaptive.py).

Each engine step calls it with the step's predicted survival scores. It sends them to the budget actor and
uses the answer to the PREVIOUS call (the plan for this step was requested while the last step ran, like
vLLM's use of the previous step's confidences), waiting at most `deadline_s`. Requests the answer does not
cover, a late answer and a missing actor all get the local plan: the same allocation over this replica's
own scores with its share of the drafter capacity. Every decision is counted (global / local).
"""
from __future__ import annotations

import logging
import time

import ray
import torch
from ray.exceptions import RayActorError, RayError

from cluster.budget_actor import budget_actor_handle
from workers.budget import allocate_capacity

log = logging.getLogger(__name__)


class GlobalCapacityPlanner:
    def __init__(self, replica_id: str, group: str = "default", local_capacity: int | None = None,
                 group_capacity: int | None = None, deadline_s: float = 0.002, retry_s: float = 1.0,
                 cost_table_json: str | None = None, stuck_s: float = 30.0) -> None:
        self.replica_id, self.group = replica_id, group
        self.local_capacity = local_capacity  # this replica's share when planning alone (None: no cap)
        self.group_capacity = group_capacity
        self.deadline_s, self.retry_s = deadline_s, retry_s
        self.cost_table_json = cost_table_json  # registered with the actor (a restarted actor gets it again)
        self.global_plans = self.local_plans = 0
        self._actor = None
        self._pending = None
        self._pending_since = 0.0
        self.stuck_s = stuck_s  # an answer this late: the actor is hung, reconnect
        self._next_try = 0.0

    def _connect(self):
        if self._actor is None and time.monotonic() >= self._next_try:
            try:
                self._actor = budget_actor_handle()
                self._actor.register.remote(self.replica_id, self.group, self.group_capacity, self.cost_table_json)
            except RayError as e:  # pragma: no cover - depends on the cluster's state
                log.warning("budget actor unavailable (%s): planning locally", e)
                self._actor, self._next_try = None, time.monotonic() + self.retry_s
        return self._actor

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Block until the actor answers (replica warm-up, never inside the step loop): a new actor
        process takes seconds to start, and until then every step plans locally."""
        self._next_try = 0.0
        actor = self._connect()
        if actor is None:
            return False
        try:
            ray.get(actor.state.remote(), timeout=timeout_s)
            return True
        except RayError as e:
            log.warning("budget actor not ready after %.0f s (%s)", timeout_s, type(e).__name__)
            return False

    def _local(self, scores: torch.Tensor) -> torch.Tensor:
        if self.local_capacity is None:
            return torch.full((scores.shape[0],), scores.shape[1], dtype=torch.long)
        return allocate_capacity([scores], self.local_capacity)[0]

    def __call__(self, req_ids: list[str], scores: torch.Tensor) -> torch.Tensor:
        answer = self._collect()
        actor = self._connect()
        if actor is not None and self._pending is None:  # one request in flight at a time
            self._pending, self._pending_since = actor.plan.remote(self.replica_id, req_ids, scores.numpy()), \
                time.monotonic()
        local = self._local(scores)
        if not answer:
            self.local_plans += 1
            return local
        covered = [r in answer for r in req_ids]
        if all(covered):
            self.global_plans += 1
        else:
            self.local_plans += 1
        return torch.tensor([answer[r] if c else int(v) for r, c, v in zip(req_ids, covered, local)])

    def _collect(self) -> dict[str, int] | None:
        """The answer to the previous request if it arrives within the deadline. A late answer is not
        dropped: it stays pending (used, or its error seen, at a later step) and no new request is sent
        meanwhile, so a slow actor is not sent more work than it can answer. An answer pending longer than
        `stuck_s` means a hung actor (no error will come): reconnect."""
        if self._pending is None:
            return None
        ready, _ = ray.wait([self._pending], timeout=self.deadline_s)
        if not ready:
            if time.monotonic() - self._pending_since > self.stuck_s:
                log.warning("budget actor silent for %.0f s: planning locally, reconnecting", self.stuck_s)
                self._pending, self._actor, self._next_try = None, None, time.monotonic() + self.retry_s
            return None
        ref, self._pending = self._pending, None
        try:
            return ray.get(ready[0])
        except (RayActorError, RayError) as e:
            log.warning("budget actor failed (%s): planning locally until it is back", type(e).__name__)
            self._actor, self._next_try = None, time.monotonic() + self.retry_s
            return None

    def stats(self) -> dict[str, int]:
        return {"global_plans": self.global_plans, "local_plans": self.local_plans}


def attach_global_budget(engine, replica_id: str, group: str = "default", local_capacity: int | None = None,
                         group_capacity: int | None = None, ready_timeout_s: float = 60.0,
                         **kw) -> GlobalCapacityPlanner | None:
    """Wire an engine with verify='adaptive-global' to the cluster's budget actor (a replica's warm-up).
    Engines in other modes are left alone (None)."""
    if engine.adaptive is None or engine.config.spec.verify != "adaptive-global":
        return None
    planner = GlobalCapacityPlanner(replica_id, group, local_capacity, group_capacity,
                                    cost_table_json=engine.adaptive.cost.to_json(), **kw)
    planner.wait_ready(ready_timeout_s)
    engine.adaptive.capacity_planner = planner
    return planner
