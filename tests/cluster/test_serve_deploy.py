"""`ray start --head` + `serve deploy` of a ClusterConfig YAML + one HTTP request + `ray stop`, as users do."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

BIN = Path(sys.executable).parent



@pytest.mark.skipif(shutil.which("ray", path=str(BIN)) is None, reason="ray CLI not installed")
def test_ray_start_serve_deploy_request_ray_stop(tiny_full_vocab, tmp_path, free_port):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}  # loopback-only test cluster
    gcs, dash, http = free_port(), free_port(), free_port()
    cfg = {"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": http},
           "applications": [{"name": "specfleet", "route_prefix": "/", "import_path": "cluster.app:build_app",
                             "args": {"model_name": "tiny", "placement": {"replica_cpus": 0.5, "ingress_cpus": 0.25},
                                      "engine": {"model": str(tiny_full_vocab),
                                                 "spec": {"method": "ngram", "k": 4}}}}]}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = lambda *a, **kw: subprocess.run([str(BIN / a[0]), *a[1:]], env=env, capture_output=True, text=True,  # noqa: E731
                                          timeout=kw.get("timeout", 180), cwd=Path(__file__).parents[2])
    start = run("ray", "start", "--head", f"--port={gcs}", "--num-cpus=3", "--include-dashboard=true",
                "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--disable-usage-stats")
    assert start.returncode == 0, start.stderr[-2000:]
    try:
        dep = run("serve", "deploy", str(path), "--address", f"http://127.0.0.1:{dash}")
        assert dep.returncode == 0, dep.stderr[-2000:]
        deadline, r = time.time() + 240, None
        while time.time() < deadline:
            try:
                r = httpx.post(f"http://127.0.0.1:{http}/v1/completions", timeout=30,
                               json={"model": "tiny", "prompt": "hello", "max_tokens": 5, "temperature": 0,
                                     "ignore_eos": True})
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        assert r is not None and r.status_code == 200, r.text if r is not None else "no answer"
        assert r.json()["usage"]["completion_tokens"] == 5
    finally:
        run("ray", "stop", "--force")
