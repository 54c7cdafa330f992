"""SIGTERM drains the server (in-flight requests finish, new ones are refused), and the load generator
accounts for every request against a real server, including clients that hang up mid-stream."""
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest


@pytest.fixture
def local_server(tiny_full_vocab, free_port):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "serve", "--local", "--model", str(tiny_full_vocab),
                             "--spec", "ngram", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, HF_HUB_OFFLINE="1"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail(proc.stdout.read().decode()[-2000:])
    yield url, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_sigterm_finishes_in_flight_requests_and_refuses_new_ones(local_server, background_stream):
    url, proc = local_server
    body = {"model": str("x"), "prompt": "drain me", "max_tokens": 600, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    models = httpx.get(url + "/v1/models").json()
    body["model"] = models["data"][0]["id"]
    t, first, got = background_stream(url, body)
    assert first.wait(30)
    proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert got == {"usage": got["usage"], "finish": "length"} and got["usage"]["completion_tokens"] == 600
    assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has drained
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)


def test_loadgen_accounts_for_every_request(local_server):
    from router.loadgen import LoadgenConfig, run_loadgen

    url, _ = local_server
    model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    cfg = LoadgenConfig(url=url, model=model, concurrency=4, duration_s=8, max_requests=24, turns=2,
                        max_tokens=(4, 12), stream_fraction=0.6, disconnect_fraction=0.5, long_fraction=0.2,
                        long_prompt_tokens=300)
    report = run_loadgen(cfg)
    s = report["summary"]
    assert s["requests"] == len(report["records"]) > 0
    assert set(s["outcomes"]) <= {"ok", "disconnected"}, s["outcomes"]  # no server error, no hang
    assert s["outcomes"].get("ok", 0) > 0 and s["ttft_p50"] is not None
    deadline = time.time() + 15  # every request, hung-up ones included, has given its KV blocks back
    while time.time() < deadline:
        usage = [ln for ln in httpx.get(url + "/metrics").text.splitlines() if ln.startswith("specfleet:kv_cache_usage_perc")]
        if usage and float(usage[0].split()[-1]) == 0.0:
            break
        time.sleep(0.5)
    assert usage and float(usage[0].split()[-1]) == 0.0, usage
