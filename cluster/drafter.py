"""Drafters as their own Serve deployments (`drafter-<j>`), on GPUs apart from the target shards.

A drafter holds a draft model and its KV cache and serves every replica of its group through the proposer
contract (workers/proposers/base.py: token deltas in, drafts + sparse probabilities + features out). Several
drafters may share one GPU (fractional `num_gpus`, with NVIDIA MPS: cluster/mps.py). Serve restarts a dead
drafter; the replica's `RemoteProposer` then sees a new instance id and resends its requests' whole contexts.
While the drafter is unreachable the replica decodes without speculation (never fails a request) and tries
again after `retry_s`.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import replace

from workers.proposers.base import DraftInput, Proposal, TokenMirror

log = logging.getLogger(__name__)


class Drafter:
    """The deployment body: a workers proposer behind a lock (Serve may call it from several replicas)."""

    def __init__(self, engine_json: str, mps_json: str) -> None:
        import ray

        from cluster.mps import MPSConfig, mps_status
        from workers.config import EngineConfig
        from workers.model_runner import pick_device, pick_dtype
        from workers.proposers.factory import build_proposer

        cfg = EngineConfig.model_validate_json(engine_json)
        if cfg.num_threads:
            import torch

            torch.set_num_threads(cfg.num_threads)
        device = pick_device(cfg.device)
        self.proposer = build_proposer(cfg, device, pick_dtype(cfg.dtype, device))
        if self.proposer is None:
            raise ValueError("a drafter needs engine.spec.method 'draft' or 'ngram'")
        self.instance = uuid.uuid4().hex
        self._lock = threading.Lock()
        self.calls = 0
        self.info = {"instance": self.instance, "k": self.proposer.k,
                     "feature_names": list(self.proposer.feature_names),
                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                     "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                     "mps": mps_status(MPSConfig.model_validate_json(mps_json)), "pid": os.getpid()}

    def describe(self) -> dict[str, object]:
        return dict(self.info, calls=self.calls)

    def propose(self, instance: str | None, batch: list[DraftInput], releases: list[str]) -> tuple[str, Proposal | None]:
        """None when `instance` is not this process's: the caller's deltas assume state this drafter lacks."""
        with self._lock:
            for rid in releases:
                self.proposer.release(rid)
            if instance != self.instance:
                return self.instance, None
            self.calls += 1
            return self.instance, self.proposer.propose(batch)

    def profile_step(self, requests: int, tokens: int) -> None:
        """One draft iteration for the warm-up cost table (timed by the caller, transport included)."""
        from workers.warmup_tables import profile_step

        with self._lock:
            profile_step(self.proposer.runner, requests, tokens)


class _Link:
    """One drafter as seen by one replica: its process instance, pending releases, back-off after a failure."""

    def __init__(self, handle, timeout_s: float) -> None:
        self.handle = handle
        self.info = handle.describe.remote().result(timeout_s=max(timeout_s, 120))
        self.instance: str | None = self.info["instance"]
        self.releases: list[str] = []
        self.retry_at = 0.0
        self.failures = self.resyncs = 0

    def send(self, batch: list[DraftInput]):
        releases, self.releases = self.releases, []
        return self.handle.propose.remote(self.instance, batch, releases)


class RemoteProposer:
    """A replica's proposer drafting on drafter deployments: each request sticks to one drafter (the least busy
    when it arrives), request ids are prefixed by the replica, the drafters of one step work in parallel."""

    def __init__(self, handles: list, replica_id: str, timeout_s: float = 10.0, retry_s: float = 2.0) -> None:
        self.replica_id, self.timeout_s, self.retry_s = replica_id, timeout_s, retry_s
        self.links = [_Link(h, timeout_s) for h in handles]
        info = self.links[0].info
        self.k, self.feature_names = int(info["k"]), tuple(info["feature_names"])
        self._mirror = TokenMirror()  # full contexts, to resync a restarted drafter
        self._assigned: dict[str, int] = {}  # request -> its drafter
        self._active = [0] * len(self.links)
        self._turn = 0

    def _link_of(self, rid: str) -> int:
        """A request stays on one drafter (its KV cache is there); a new one goes to the least busy."""
        j = self._assigned.get(rid)
        if j is None:
            n = len(self.links)  # ties go round-robin
            j = min(range(n), key=lambda i: (self._active[i], (i - self._turn) % n))
            self._turn = j + 1
            self._assigned[rid] = j
            self._active[j] += 1
        return j

    def propose(self, batch: list[DraftInput]) -> Proposal:
        ours = [replace(d, req_id=f"{self.replica_id}/{d.req_id}") for d in batch]
        for d in ours:
            self._mirror.update(d)
        rows: dict[int, list[int]] = {}
        for b, d in enumerate(ours):
            rows.setdefault(self._link_of(d.req_id), []).append(b)
        now = time.monotonic()
        sent = {j: self.links[j].send([ours[b] for b in r]) for j, r in rows.items() if now >= self.links[j].retry_at}
        parts = []
        for j, resp in sent.items():
            prop = self._receive(self.links[j], resp, [ours[b] for b in rows[j]])
            if prop is not None:
                parts.append((rows[j], prop))
        return Proposal.merge(len(batch), self.k, parts)

    def _receive(self, link: _Link, resp, part: list[DraftInput]) -> Proposal | None:
        try:
            instance, proposal = resp.result(timeout_s=self.timeout_s)
            if proposal is None:  # a new drafter process: send whole contexts once
                link.instance = instance
                link.resyncs += 1
                full = [replace(d, start=0, new_tokens=list(self._mirror.tokens[d.req_id])) for d in part]
                instance, proposal = link.send(full).result(timeout_s=self.timeout_s)
            if proposal is None:
                raise RuntimeError("drafter restarted twice during one step")
            return proposal
        except Exception as exc:  # noqa: BLE001 - any transport or drafter error: this step goes without drafts
            link.failures += 1
            link.instance = None  # whatever answers next must get whole contexts
            link.retry_at = time.monotonic() + self.retry_s
            log.warning("drafter unavailable (%s): its requests decode without speculation for %.0f s",
                        exc, self.retry_s)
            return None

    def release(self, req_id: str) -> None:
        rid = f"{self.replica_id}/{req_id}"
        self._mirror.release(rid)
        j = self._assigned.pop(rid, None)
        if j is not None:
            self._active[j] -= 1
            self.links[j].releases.append(rid)  # sent with that drafter's next call

    def profile_step(self, requests: int, tokens: int) -> None:
        self.links[0].handle.profile_step.remote(requests, tokens).result(timeout_s=120)

    @property
    def drafter_info(self) -> list[dict[str, object]]:
        return [link.info for link in self.links]

    def stats(self) -> dict[str, object]:
        return {"failures": sum(lk.failures for lk in self.links), "resyncs": sum(lk.resyncs for lk in self.links),
                "drafters": len(self.links)}
