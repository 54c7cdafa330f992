"""An asyncio front for the engine: a background thread runs the step loop; callers stream token deltas.

The engine itself is single-threaded; a lock serialises add with steps, and the event loop never waits on it
directly (adds go through a worker thread). Cancelling a stream aborts its request before the next step,
which frees its KV blocks: the abort is queued for the step thread without awaiting anything, because a
cancelled task may not be able to await in its cleanup (anyio cancel scopes, as Starlette uses for a client
that disconnects, cancel every await made inside them).
"""
from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator

from workers.config import SamplingParams
from workers.engine import LLMEngine, RequestOutput


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[RequestOutput | BaseException]]] = {}
        self._stopped = False
        self._aborts: collections.deque[str] = collections.deque()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped:
            aborted = False
            while self._aborts:
                self._abort(self._aborts.popleft())
                aborted = True
            if not self.engine.has_unfinished() and not aborted:  # (a step after aborts collects them)
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                with self._lock:
                    outs = self.engine.step()
            except BaseException as exc:  # a step failure ends every stream with the error, never hangs them
                self.error = exc
                self._fail_all(exc)
                with self._lock:
                    for rid in list(self.engine.requests):
                        self.engine.abort(rid)
                    self.engine.step()
                continue
            for o in outs:
                target = self._queues.get(o.req_id)
                if target is not None:
                    loop, q = target
                    loop.call_soon_threadsafe(q.put_nowait, o)

    def _fail_all(self, exc: BaseException) -> None:
        for loop, q in list(self._queues.values()):
            loop.call_soon_threadsafe(q.put_nowait, exc)

    def _add(self, prompt: str | list[int], params: SamplingParams, req_id: str | None, chat: bool) -> str:
        with self._lock:
            return self.engine.add_request(prompt, params, req_id, chat)

    def _abort(self, req_id: str) -> None:
        with self._lock:
            self.engine.abort(req_id)

    async def generate(self, prompt: str | list[int], params: SamplingParams, req_id: str | None = None,
                       chat: bool = False) -> AsyncIterator[RequestOutput]:
        """Stream outputs until the finished one; invalid input raises before anything is streamed."""
        q: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        rid = await asyncio.to_thread(self._add, prompt, params, req_id, chat)
        self._queues[rid] = (asyncio.get_running_loop(), q)
        self._wake.set()
        finished = False
        try:
            while not finished:
                item = await q.get()
                if isinstance(item, BaseException):
                    raise RuntimeError(f"engine step failed: {item!r}") from item
                finished = item.finished
                yield item
        finally:
            self._queues.pop(rid, None)
            if not finished:
                self._aborts.append(rid)  # no await here: see the module docstring
                self._wake.set()

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
