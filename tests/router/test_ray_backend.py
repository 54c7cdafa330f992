"""The cluster backend's failure handling, isolated from Ray with fake deployment handles: a replica that dies
before the first token gets the request re-sent to another replica; after it, the request ends with
BackendUnavailableError (503 / a stream error event). The real kill is in benchmarks/faults.py."""
import asyncio

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
from ray.exceptions import ActorDiedError  # noqa: E402

from router.backend import BackendUnavailableError  # noqa: E402
from router.ray_backend import RayBackend  # noqa: E402
from workers.config import SamplingParams  # noqa: E402


class _Stream:
    def __init__(self, items, die_after):
        self.items, self.die_after, self.cancelled = items, die_after, False

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for i, item in enumerate(self.items):
            if i == self.die_after:
                raise ActorDiedError()
            yield item

    def cancel(self):
        self.cancelled = True


class _Handle:
    def __init__(self, die_after=None):
        self.die_after, self.calls = die_after, 0
        self.generate = self
        self.tokenize = self

    def options(self, stream):
        return self

    def remote(self, *args):
        if len(args) == 2:  # tokenize(prompt, messages)
            async def ids():
                return [1, 2, 3]
            return ids()
        self.calls += 1
        items = [{"token_ids": [7], "text": "x", "finished": i == 2, "finish_reason": "length" if i == 2 else None}
                 for i in range(3)]
        return _Stream(items, self.die_after)


async def _run(backend):
    return [d async for d in backend.generate("hi", None, SamplingParams(max_tokens=3), "r1")]


def test_a_replica_dead_before_the_first_token_is_retried_elsewhere():
    dead, alive = _Handle(die_after=0), _Handle()
    backend = RayBackend("m", {"a": dead, "b": alive}, affinity_tokens=0)
    backend.chooser.choose = lambda ids, avoid=frozenset(): "b" if "a" in avoid else "a"
    out = asyncio.run(_run(backend))
    assert len(out) == 3 and (dead.calls, alive.calls) == (1, 1) and backend.retried == 1
    assert backend.chooser.sick() == {"a"} and backend.num_inflight() == 0
    assert all(v == 0 for v in backend.chooser.outstanding.values())


def test_a_replica_dead_mid_stream_ends_the_request_with_a_clean_error():
    backend = RayBackend("m", {"a": _Handle(die_after=1), "b": _Handle()}, affinity_tokens=0)
    backend.chooser.choose = lambda ids, avoid=frozenset(): "a"
    with pytest.raises(BackendUnavailableError, match="replica a failed"):
        asyncio.run(_run(backend))  # a token was already sent: not repeated elsewhere
    assert backend.retried == 0 and backend.num_inflight() == 0


class _FlakyBackend:
    """Dies mid-request on the first call (after a token), serves in full on the second."""
    model_name = "m"

    def __init__(self):
        self.calls = 0

    def num_inflight(self):
        return 0

    def stats(self):
        return {}

    async def generate(self, prompt, messages, params, req_id):
        from router.backend import Delta

        self.calls += 1
        yield Delta([5], "a", False, None, 3, 1)
        if self.calls == 1:
            raise BackendUnavailableError("replica a failed (ActorDiedError); retry the request")
        yield Delta([6], "b", True, "length", 3, 2)


def test_the_api_reruns_a_non_streamed_request_whose_replica_died_and_streams_get_an_error_event():
    import httpx

    from router.api import build_api

    async def go():
        backend = _FlakyBackend()
        transport = httpx.ASGITransport(app=build_api(backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = {"model": "m", "prompt": "x", "max_tokens": 2}
            ok = await client.post("/v1/completions", json=body)
            backend.calls = 0
            streamed = await client.post("/v1/completions", json=body | {"stream": True})
        return ok, streamed, backend

    ok, streamed, backend = asyncio.run(go())
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == "ab"  # not "a" + "ab"
    events = [ln for ln in streamed.text.splitlines() if ln.startswith("data: {")]
    assert '"service_unavailable"' in events[-1] and backend.calls == 1  # a sent token is never repeated
