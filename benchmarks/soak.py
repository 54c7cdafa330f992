"""Soak: `specfleet serve` (a local Ray cluster, adaptive n-gram speculation) under mixed closed-loop load.

    python benchmarks/soak.py --duration 600 --concurrency 32 --out benchmarks/results/soak_cpu.json

Load: multi-turn chats, ShareGPT and long prompts (10%), half streaming, 10% of streams hang up early.
Checks, written to the JSON: no server error and no hung request (every request accounted for by outcome),
KV blocks back to zero once idle, resident memory of the server's processes after warm-up vs at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from router.loadgen import LoadgenConfig, run_loadgen


def _by_process(root: psutil.Process) -> dict[str, float]:
    """RSS in MB per process of the tree, by Ray's process title (ray::ServeReplica:...:target-0, gcs_server,
    raylet, ...), so a growth can be pinned on one of them."""
    out: dict[str, float] = {}
    for p in [root] + root.children(recursive=True):
        try:
            cmd = p.cmdline()
            # a Ray worker's title carries its current task after a dot (ray::ServeReplica:app:target-0.handle_...)
            label = cmd[0].split(".")[0] if cmd and cmd[0].startswith("ray::") else p.name()
            out[label] = round(out.get(label, 0.0) + p.memory_info().rss / 2**20, 1)
        except psutil.Error:
            pass
    return out


def _metric(url: str, name: str) -> float | None:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name):
            return float(line.split()[-1])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--warmup", type=float, default=120, help="RSS baseline taken this long into the load")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--out", default="benchmarks/results/soak_cpu.json")
    args = ap.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen([sys.executable, "-m", "router.cli", "serve", "--spec", "ngram", "--k", "7",
                               "--verify", "adaptive", "--port", str(args.port)],
                              env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    root = psutil.Process(server.pid)
    t0 = time.time()
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.time() - t0 > 300 or server.poll() is not None:
            raise SystemExit("server did not come up")
        time.sleep(1)
    rss: list[tuple[float, float]] = []
    per_process: dict[str, dict[str, float]] = {}
    stop = threading.Event()

    def sample() -> None:
        start = time.time()
        while not stop.wait(10):
            t = time.time() - start
            rss.append((round(t, 1), round(sum(_by_process(root).values()), 1)))
            if t >= args.warmup and "after_warmup" not in per_process:
                per_process["after_warmup"] = _by_process(root)
        per_process["end"] = _by_process(root)

    threading.Thread(target=sample, daemon=True).start()
    cfg = LoadgenConfig(url=url, concurrency=args.concurrency, duration_s=args.duration, turns=3,
                        stream_fraction=0.5, disconnect_fraction=0.1, long_fraction=0.1, long_prompt_tokens=1500,
                        max_tokens=(16, 128))
    report = run_loadgen(cfg)
    stop.set()
    time.sleep(5)
    kv_idle = _metric(url, "specfleet:kv_cache_usage_perc")
    base = next((m for t, m in rss if t >= args.warmup), rss[0][1] if rss else None)
    end = rss[-1][1] if rss else None
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    result = {"summary": report["summary"], "config": report["config"], "kv_usage_when_idle": kv_idle,
              "rss_mb_after_warmup": base, "rss_mb_end": end,
              "rss_growth": round(end / base - 1, 4) if base and end else None, "rss_samples": rss,
              "rss_mb_by_process": per_process,
              "records": report["records"]}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("records", "rss_samples")}, indent=1))


if __name__ == "__main__":
    main()
