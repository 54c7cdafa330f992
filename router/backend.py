"""What the HTTP layer needs from an engine, and the in-process implementation over AsyncLLMEngine.

The cluster provides another implementation that routes to Ray Serve replicas; the API code is the same.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Protocol

from workers.config import SamplingParams


@dataclass(slots=True)
class Delta:
    """One streamed piece of a request's output."""

    token_ids: list[int]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 0  # set on the final delta
    completion_tokens: int = 0
    spec_decode: dict | None = None
    extra: dict = field(default_factory=dict)


class BackendUnavailableError(RuntimeError):
    """The request's replica failed (its process died, or Serve has none to give): the API answers 503 with
    Retry-After, or ends a stream with an error event, never a bare 500 or a hang."""


class Backend(Protocol):
    model_name: str

    def generate(self, prompt: str | list[int] | None, messages: list[dict[str, str]] | None,
                 params: SamplingParams, req_id: str) -> AsyncIterator[Delta]: ...

    def stats(self) -> dict | Awaitable[dict]: ...  # engine stats (a cluster's backend sums its replicas')

    def num_inflight(self) -> int: ...


class LocalBackend:
    """One engine in this process (no Ray): `specfleet serve --local` and the API tests."""

    def __init__(self, aengine, model_name: str) -> None:
        self.aengine, self.model_name = aengine, model_name
        self._inflight = 0

    def num_inflight(self) -> int:
        return self._inflight

    def _encode(self, prompt: str | list[int] | None, messages: list[dict[str, str]] | None) -> list[int]:
        eng = self.aengine.engine
        return eng.encode_chat(messages) if messages is not None else eng.encode_prompt(prompt)

    async def generate(self, prompt, messages, params, req_id) -> AsyncIterator[Delta]:
        ids = await asyncio.to_thread(self._encode, prompt, messages)
        self._inflight += 1
        try:
            async for out in self.aengine.generate(ids, params, req_id):
                d = Delta(out.new_token_ids, out.delta_text, out.finished, out.finish_reason)
                if out.finished and out.request is not None:
                    r = out.request
                    d.prompt_tokens, d.completion_tokens = r.num_prompt, r.num_output
                    d.spec_decode = r.spec.to_dict() if self.aengine.engine.proposer is not None else None
                yield d
        finally:
            self._inflight -= 1

    def stats(self) -> dict:
        return self.aengine.engine.stats()
