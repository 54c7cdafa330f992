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
        from workers.adaptive import _profile_step

        with self._lock:
            _profile_step(self.proposer.runner, requests, tokens)


class RemoteProposer:
    """A replica's proposer that drafts on a drafter deployment; request ids are prefixed by the replica."""

    def __init__(self, handle, replica_id: str, timeout_s: float = 10.0, retry_s: float = 2.0) -> None:
        self.handle, self.replica_id = handle, replica_id
        self.timeout_s, self.retry_s = timeout_s, retry_s
        info = handle.describe.remote().result(timeout_s=120)
        self.k, self.feature_names = int(info["k"]), tuple(info["feature_names"])
        self.drafter_info = info
        self._instance: str | None = info["instance"]
        self._mirror = TokenMirror()  # full contexts, to resync a restarted drafter
        self._releases: list[str] = []
        self._retry_at = 0.0
        self.failures = self.resyncs = 0

    def _call(self, batch: list[DraftInput]) -> tuple[str, Proposal | None]:
        releases, self._releases = self._releases, []
        resp = self.handle.propose.remote(self._instance, batch, releases)
        return resp.result(timeout_s=self.timeout_s)

    def propose(self, batch: list[DraftInput]) -> Proposal:
        ours = [replace(d, req_id=f"{self.replica_id}/{d.req_id}") for d in batch]
        for d in ours:
            self._mirror.update(d)
        if time.monotonic() < self._retry_at:
            return Proposal.empty(len(batch), self.k)
        try:
            instance, proposal = self._call(ours)
            if proposal is None:  # a new drafter process: send whole contexts once
                self._instance = instance
                self.resyncs += 1
                full = [replace(d, start=0, new_tokens=list(self._mirror.tokens[d.req_id])) for d in ours]
                instance, proposal = self._call(full)
            if proposal is None:
                raise RuntimeError("drafter restarted twice during one step")
            return proposal
        except Exception as exc:  # noqa: BLE001 - any transport or drafter error: this step goes without drafts
            self.failures += 1
            self._instance = None  # whatever answers next must get whole contexts
            self._retry_at = time.monotonic() + self.retry_s
            log.warning("drafter unavailable (%s): decoding without speculation for %.0f s", exc, self.retry_s)
            return Proposal.empty(len(batch), self.k)

    def release(self, req_id: str) -> None:
        rid = f"{self.replica_id}/{req_id}"
        self._mirror.release(rid)
        self._releases.append(rid)  # sent with the next propose call

    def profile_step(self, requests: int, tokens: int) -> None:
        self.handle.profile_step.remote(requests, tokens).result(timeout_s=120)

    def stats(self) -> dict[str, object]:
        return {"failures": self.failures, "resyncs": self.resyncs, "drafter": self.drafter_info}
