"""`specfleet serve` (a real local Ray cluster in a subprocess): an API key keeps unauthenticated requests out
and never shows up in the server's output, the Ray session's logs or /metrics; SIGTERM drains: a stream in
flight finishes in full, then the server exits."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

KEY = "sk-specfleet-test-7f3a9c1e5b"


def _files_containing(root: pathlib.Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                hits.append(str(path))
        except OSError:  # sockets, files removed while we look
            pass
    return hits


@pytest.fixture
def cluster_server(tiny_full_vocab, free_port):
    pytest.importorskip("ray")
    port = free_port()
    ray_tmp = pathlib.Path(tempfile.mkdtemp(prefix="sfray"))  # its own Ray session dir: logs we can search
    log = ray_tmp / "server.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_TMPDIR=str(ray_tmp), SPECFLEET_API_KEY=KEY,
               RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "router.cli", "serve", "--model", str(tiny_full_vocab),
                                 "--spec", "ngram", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:  # 200 once a replica answers
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail(log.read_text()[-3000:])
    yield url, proc, ray_tmp, log
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    shutil.rmtree(ray_tmp, ignore_errors=True)


# long enough to outlast SIGTERM, the health poll and the refused request: at 1500 tokens the stream ended
# first once in a clean-clone CI run on a fast hour (2026-12-02)
STREAM_TOKENS = 3000


def test_api_key_and_sigterm_drain_on_the_cluster(cluster_server, background_stream):
    url, proc, ray_tmp, log = cluster_server
    model = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()["data"][0]["id"]
    body = {"model": model, "prompt": "drain me", "max_tokens": STREAM_TOKENS, "temperature": 0, "ignore_eos": True}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = httpx.post(url + "/v1/completions", json=body | {"max_tokens": 2}, headers=headers, timeout=30)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    auth = {"Authorization": f"Bearer {KEY}"}
    metrics = httpx.get(url + "/metrics", timeout=30).text
    assert "kv_cache_usage_perc" in metrics and KEY not in metrics

    t, first, got = background_stream(url, body | {"stream": True, "stream_options": {"include_usage": True}},
                                      auth)
    assert first.wait(60)
    proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 30
    try:
        while time.time() < deadline and httpx.get(url + "/health", timeout=5).status_code == 200:
            time.sleep(0.2)
    except httpx.HTTPError as exc:
        time.sleep(2)
        pytest.fail(f"the server stopped without draining ({exc!r}):\n" + log.read_text()[-3000:])
    refused = httpx.post(url + "/v1/completions", json=body | {"max_tokens": 2}, headers=auth, timeout=30)
    assert t.is_alive(), "the stream ended before the drain could be observed"
    assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]
    t.join(180)
    assert not t.is_alive() and "error" not in got, got
    assert got["usage"]["completion_tokens"] == STREAM_TOKENS  # the stream in flight at SIGTERM finished in full
    assert proc.wait(120) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)
    out = log.read_text()
    assert "draining" in out
    assert KEY not in out and not _files_containing(ray_tmp, KEY.encode())  # nor in any Ray log or file
