"""The OpenAI-compatible API over a real HTTP server (uvicorn, loopback) and the official `openai` client."""
import asyncio
import threading
import time

import httpx
import openai
import pytest
import uvicorn

from router.api import build_api
from router.backend import LocalBackend
from workers.async_engine import AsyncLLMEngine
from workers.config import EngineConfig, SpecConfig
from workers.engine import LLMEngine

KEY = "test-key-123"



@pytest.fixture(scope="module")
def server(tiny_full_vocab, free_port):
    engine = LLMEngine(EngineConfig(model=str(tiny_full_vocab), spec=SpecConfig(method="ngram", k=4)))
    aengine = AsyncLLMEngine(engine)
    app = build_api(LocalBackend(aengine, "tiny"), api_key=KEY, max_body_bytes=64_000, max_inflight=8)
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    while not srv.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", engine
    srv.should_exit = True
    t.join(5)
    aengine.shutdown()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key=KEY, max_retries=0)


def test_completion_chat_and_models_with_the_openai_client(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    c = client.completions.create(model="tiny", prompt=[1, 5, 6, 7, 5, 6, 7], max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert c.choices[0].finish_reason == "length" and c.usage.completion_tokens == 8 and c.usage.prompt_tokens == 7
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 5


def test_streaming_chat_ends_with_usage_and_matches_non_streaming(client):
    kw = dict(model="tiny", messages=[{"role": "user", "content": "count"}], max_tokens=12, temperature=0,
              extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[-1].usage.completion_tokens == 12 and not chunks[-1].choices
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == whole
    assert chunks[-2].choices[0].finish_reason == "length"


def test_spec_decode_stats_on_request(server):
    r = httpx.post(server[0] + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": "tiny", "prompt": [9, 10, 11, 12] * 6, "max_tokens": 16, "temperature": 0,
                         "ignore_eos": True, "include_spec_stats": True})
    sd = r.json()["metrics"]["speculative_decoding"]
    assert sd["num_drafts"] > 0 and len(sd["acceptance_per_position"]) >= 1


@pytest.mark.parametrize("body, param", [
    ({"model": "tiny", "prompt": "x", "temperature": -1}, "temperature"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "n": 2}, "n"),
    ({"model": "tiny", "prompt": [999999]}, "prompt"),
    ({"model": "tiny", "prompt": "x", "stop": [""]}, "stop"),
    ({"model": "tiny"}, "prompt"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 10**9}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "stop": ["a"] * 5000}, "stop"),
    ({"model": "tiny", "prompt": [5] * 5000}, "prompt"),  # beyond the 4096-token context
    ({"model": "tiny", "prompt": "x", "top_p": -0.5}, "top_p"),
])
def test_bad_input_is_a_400_with_an_openai_error(server, body, param):
    r = httpx.post(server[0] + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and param in (err["param"] or "") + err["message"]


def test_auth_unknown_model_oversize_and_garbage(server):
    url = server[0]
    assert httpx.get(url + "/v1/models").status_code == 401
    assert httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}).json()["error"]["code"] == \
        "invalid_api_key"
    assert httpx.get(url + "/health").status_code == 200  # health stays open
    h = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(url + "/v1/completions", headers=h, json={"model": "gpt-9", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    r = httpx.post(url + "/v1/completions", headers=h, json={"model": "tiny", "prompt": "x" * 100_000})
    assert r.status_code == 413 and "error" in r.json()
    r = httpx.post(url + "/v1/completions", headers={**h, "content-type": "application/json"}, content=b"{not json")
    assert r.status_code == 400 and "error" in r.json()
    for raw in (b'{"model": "tiny", "prompt": "x", "temperature": NaN}',  # NaN: not JSON, Python parsers allow it
                b'{"model": "tiny", "prompt": "\\xff"}',  # an escape JSON does not have
                b'{"model": "tiny", "prompt": "' + bytes([0xff, 0xfe]) + b'"}'):  # invalid UTF-8
        r = httpx.post(url + "/v1/completions", headers={**h, "content-type": "application/json"}, content=raw)
        assert 400 <= r.status_code < 500 and "message" in r.json()["error"], (raw, r.status_code, r.text)
    assert httpx.get(url + "/health").status_code == 200  # unharmed


def test_client_disconnect_mid_stream_aborts_and_frees_kv(server):
    url, engine = server

    async def go():
        async with httpx.AsyncClient() as c:
            async with c.stream("POST", url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                                json={"model": "tiny", "prompt": [3, 4, 5], "max_tokens": 5000, "stream": True,
                                      "temperature": 0, "ignore_eos": True}) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        break  # leave after the first chunk

    asyncio.run(go())
    deadline = time.time() + 10
    while (engine.requests or engine.runner.pool.num_used) and time.time() < deadline:
        time.sleep(0.05)
    assert not engine.requests and engine.runner.pool.num_used == 0


def test_metrics_are_prometheus_text(server):
    text = httpx.get(server[0] + "/metrics").text
    assert "# TYPE specfleet:spec_decode_num_drafts counter" in text and "specfleet:kv_cache_usage_perc" in text
