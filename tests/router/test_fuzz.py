"""Schemathesis against the server's own OpenAPI schema (in-process ASGI, a real tiny engine): valid and
invalid generated requests (positive and negative modes), never a 5xx, errors in OpenAI's shape, nothing
leaked. (Driven through hypothesis directly: schemathesis 4.32's pytest plugin fails under pytest 9.)"""
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from router.api import build_api  # noqa: E402
from router.backend import LocalBackend  # noqa: E402
from workers.async_engine import AsyncLLMEngine  # noqa: E402
from workers.config import EngineConfig, SpecConfig  # noqa: E402
from workers.engine import LLMEngine  # noqa: E402

EXAMPLES = {"POST": 150, "GET": 10}  # per operation and mode: 2 POST x 2 modes x 150 = 600 bodies


@pytest.fixture(scope="module")
def served(tiny_full_vocab):
    # a short context bounds every generated request (max_tokens up to 1e6 is valid input)
    engine = LLMEngine(EngineConfig(model=str(tiny_full_vocab), max_model_len=96, kv_cache_memory_gb=0.05,
                                    spec=SpecConfig(method="ngram", k=4)))
    aengine = AsyncLLMEngine(engine)
    app = build_api(LocalBackend(aengine, "tiny"), max_body_bytes=64_000, max_inflight=8)
    yield engine, schemathesis.openapi.from_asgi("/openapi.json", app)
    aengine.shutdown()


def test_generated_requests_never_get_a_server_error(served):
    engine, schema = served
    statuses: dict[int, int] = {}
    ops = [r.ok() for r in schema.get_all_operations()]
    assert {op.label for op in ops} >= {"POST /v1/completions", "POST /v1/chat/completions", "GET /v1/models"}
    for op in ops:
        post = op.method.upper() == "POST"  # GETs take no input: nothing to make invalid
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if post else (GenerationMode.POSITIVE,):
            @given(op.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES[op.method.upper()], deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case):
                r = case.call()
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                assert r.status_code < 500, (op.label, case.body, r.status_code, r.text[:300])
                ctype = r.headers.get("content-type") or [""]  # schemathesis' Response: header -> list of values
                if r.status_code >= 400 and ctype[0].startswith("application/json"):
                    assert "message" in r.json()["error"]  # OpenAI-style error body

            check()
    print("fuzz statuses:", statuses)
    assert sum(statuses.values()) >= 500, statuses
    assert statuses.get(200, 0) > 0 and sum(n for s, n in statuses.items() if 400 <= s < 500) > 0, statuses
    assert engine.runner.pool.num_used == 0 and not engine.has_unfinished()  # nothing leaked or left running
