"""HTTP load run against the Ray Serve application: closed loop with the official async `openai` client at
concurrency 1, 8, 32 against 1 and 2 target replicas (embedded default, n-gram + adaptive verification),
streaming chat completions of ShareGPT prompts. Reports throughput, TTFT / ITL p50 / p99 and each replica's
share of the requests. Usage: python benchmarks/http_load.py benchmarks/results/http_load_cpu.json
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path

from workers.metrics import percentile
from workers.workloads import sharegpt_prompts

MAX_TOKENS = 48


async def _one(client, prompt: str, out: dict) -> None:
    t0 = time.perf_counter()
    first, last, n = None, None, 0
    stream = await client.chat.completions.create(
        model="smollm2-135m-instruct", messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
        temperature=0, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = now
            elif last is not None:
                out["itl"].append(now - last)
            last = now
        if chunk.usage:
            n = chunk.usage.completion_tokens
    out["ttft"].append(first - t0)
    out["tokens"] += n


async def closed_loop(base_url: str, prompts: list[str], concurrency: int) -> dict:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
    out = {"ttft": [], "itl": [], "tokens": 0}
    todo = list(prompts)

    async def worker():
        while todo:
            await _one(client, todo.pop(), out)

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    dt = time.perf_counter() - t0
    await client.close()
    ms = lambda v: round(v * 1000, 1)  # noqa: E731
    return {"concurrency": concurrency, "requests": len(prompts), "seconds": round(dt, 2),
            "output_tokens_per_s": round(out["tokens"] / dt, 2),
            "ttft_p50_ms": ms(percentile(out["ttft"], 50)), "ttft_p99_ms": ms(percentile(out["ttft"], 99)),
            "itl_p50_ms": ms(percentile(out["itl"], 50)), "itl_p99_ms": ms(percentile(out["itl"], 99))}


def main(out_path: str) -> None:
    import ray
    from ray import serve

    from cluster.app import build_app

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback only
    results = []
    for replicas in (1, 2):
        ray.init(include_dashboard=False, log_to_driver=False, num_cpus=4)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        args = {"replicas": replicas, "placement": {"replica_cpus": 1, "ingress_cpus": 0.5},
                "engine": {"kv_cache_memory_gb": 0.5, "spec": {"method": "ngram", "k": 7, "verify": "adaptive"}}}
        serve.run(build_app(args), name="specfleet", route_prefix="/")
        url = f"http://127.0.0.1:{port}/v1"
        asyncio.run(closed_loop(url, sharegpt_prompts(8, seed=99), 4))  # warm-up (estimator, caches)
        for c in (1, 8, 32):
            before = [serve.get_deployment_handle(f"target-{i}", "specfleet").stats.remote().result()["requests_served"]
                      for i in range(replicas)]
            row = asyncio.run(closed_loop(url, sharegpt_prompts(max(8, 2 * c), seed=c), c))
            after = [serve.get_deployment_handle(f"target-{i}", "specfleet").stats.remote().result()["requests_served"]
                     for i in range(replicas)]
            row.update(replicas=replicas, replica_share=[a - b for a, b in zip(after, before)])
            print(json.dumps(row), flush=True)
            results.append(row)
        serve.shutdown()
        ray.shutdown()
    Path(out_path).write_text(json.dumps({"max_tokens": MAX_TOKENS, "rows": results}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
