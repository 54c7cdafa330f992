"""The Backend over Ray Serve replicas: the router picks a replica per request (router/policy.py) and
streams from it through a DeploymentHandle. Lives in the ingress deployment."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError

from router.backend import BackendUnavailableError, Delta
from router.policy import ReplicaChooser
from workers.engine import InvalidRequestError


# a replica's process died or Serve has no replica to route to (not an error of the request itself)
_REPLICA_FAILURES = (RayActorError, ReplicaUnavailableError, DeploymentUnavailableError, BackPressureError)


class RayBackend:
    def __init__(self, model_name: str, handles: dict, affinity_tokens: int = 64) -> None:
        self.model_name = model_name
        self.handles = handles  # replica name -> DeploymentHandle
        self.chooser = ReplicaChooser(list(handles), affinity_tokens)
        self.served = {name: 0 for name in handles}
        self._inflight = 0
        self.retried = 0  # requests re-sent to another replica after theirs died before the first token

    def num_inflight(self) -> int:
        return self._inflight

    async def generate(self, prompt, messages, params, req_id) -> AsyncIterator[Delta]:
        """Streams from one replica. If that replica dies before the request's first token, the request is
        sent once more to another replica (nothing was emitted, so nothing is repeated); after its first token
        it ends with BackendUnavailableError (the API's 503 or stream error event)."""
        ids = prompt if isinstance(prompt, list) else await self._tokenize(prompt, messages)
        cost = len(ids) + params.max_tokens
        tried: set[str] = set()
        self._inflight += 1
        try:
            while True:
                name = self.chooser.choose(ids, avoid=tried)
                tried.add(name)
                emitted = False
                try:
                    async for delta in self._stream(name, ids, params, req_id, cost):
                        emitted = True
                        yield delta
                    return
                except _REPLICA_FAILURES as exc:
                    self.chooser.failed(name)
                    if emitted or len(tried) >= min(2, len(self.handles)):
                        raise BackendUnavailableError(f"replica {name} failed ({type(exc).__name__}); "
                                                      "retry the request") from None
                    self.retried += 1
        finally:
            self._inflight -= 1

    async def _tokenize(self, prompt, messages) -> list[int]:
        for name in sorted(self.handles, key=lambda n: n in self.chooser.sick()):  # a live replica first
            try:
                return await self.handles[name].tokenize.remote(prompt, messages)
            except _REPLICA_FAILURES:
                self.chooser.failed(name)
        raise BackendUnavailableError("no target replica is available; retry the request")

    async def _stream(self, name: str, ids: list[int], params, req_id: str, cost: int) -> AsyncIterator[Delta]:
        self.chooser.started(name, cost)
        self.served[name] += 1
        stream = self.handles[name].options(stream=True).generate.remote(ids, params.model_dump_json(), req_id)
        try:
            async for item in stream:
                if "error" in item:
                    raise InvalidRequestError(item["error"])
                yield Delta(item["token_ids"], item["text"], item["finished"], item["finish_reason"],
                            item.get("prompt_tokens", 0), item.get("completion_tokens", 0), item.get("spec_decode"))
        finally:
            stream.cancel()  # a client that left: the replica's generator is cancelled and aborts the request
            self.chooser.finished(name, cost)

    async def stats(self, timeout_s: float = 5.0) -> dict:
        """The cluster's totals for the ingress's /metrics: every replica's engine stats summed (KV blocks,
        running, waiting, spec-decode counters). A replica that does not answer in time is counted, not waited
        for, so /metrics never hangs on a dead or restarting replica."""
        names = list(self.handles)
        answers = await asyncio.gather(*(asyncio.wait_for(self._replica_stats(n), timeout_s) for n in names),
                                       return_exceptions=True)
        ok = [a for a in answers if isinstance(a, dict)]
        out: dict = {"served": dict(self.served), "router": dict(self.chooser.choices), "retried": self.retried,
                     "replicas_answering": len(ok), "replicas_unreachable": len(names) - len(ok)}
        for key in ("running", "waiting", "kv_blocks_used", "kv_blocks_total", "heap_trims"):
            out[key] = sum(int(a.get(key, 0)) for a in ok)
        spec = [a["spec_decode"] for a in ok if a.get("spec_decode")]
        if spec:
            totals = {k: sum(s.get(k, 0) for s in spec) for k in ("num_drafts", "num_draft_tokens",
                                                                  "num_accepted_tokens")}
            if totals["num_drafts"]:
                totals["mean_acceptance_length"] = 1 + totals["num_accepted_tokens"] / totals["num_drafts"]
            out["spec_decode"] = totals
        return out

    async def ready(self, timeout_s: float = 2.0) -> bool:
        """At least one target replica answers (the ingress can be up while replicas still load)."""
        for name in self.handles:
            try:
                await asyncio.wait_for(self._replica_stats(name), timeout_s)
                return True
            except Exception:  # noqa: BLE001 - not started, restarting or dead: try the next one
                continue
        return False

    async def _replica_stats(self, name: str) -> dict:
        return await self.handles[name].stats.remote()
