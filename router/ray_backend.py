"""The Backend over Ray Serve replicas: the router picks a replica per request (router/policy.py) and
streams from it through a DeploymentHandle. Lives in the ingress deployment."""
from __future__ import annotations

from collections.abc import AsyncIterator

from router.backend import Delta
from router.policy import ReplicaChooser
from workers.engine import InvalidRequestError


class RayBackend:
    def __init__(self, model_name: str, handles: dict, affinity_tokens: int = 64) -> None:
        self.model_name = model_name
        self.handles = handles  # replica name -> DeploymentHandle
        self.chooser = ReplicaChooser(list(handles), affinity_tokens)
        self.served = {name: 0 for name in handles}
        self._inflight = 0

    def num_inflight(self) -> int:
        return self._inflight

    async def generate(self, prompt, messages, params, req_id) -> AsyncIterator[Delta]:
        any_handle = next(iter(self.handles.values()))
        ids = prompt if isinstance(prompt, list) else await any_handle.tokenize.remote(prompt, messages)
        name = self.chooser.choose(ids)
        cost = len(ids) + params.max_tokens
        self.chooser.started(name, cost)
        self.served[name] += 1
        self._inflight += 1
        stream = self.handles[name].options(stream=True).generate.remote(ids, params.model_dump_json(), req_id)
        try:
            async for item in stream:
                if "error" in item:
                    raise InvalidRequestError(item["error"])
                yield Delta(item["token_ids"], item["text"], item["finished"], item["finish_reason"],
                            item.get("prompt_tokens", 0), item.get("completion_tokens", 0), item.get("spec_decode"))
        finally:
            stream.cancel()  # a client that left: the replica's generator is cancelled and aborts the request
            self._inflight -= 1
            self.chooser.finished(name, cost)

    def stats(self) -> dict:
        return {"replicas": {n: 0 for n in self.handles}, "served": dict(self.served),
                "router": dict(self.chooser.choices)}
