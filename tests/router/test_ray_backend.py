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
