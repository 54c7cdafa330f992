"""Faults under load: latency and outcomes before, during and after each fault, on a real local Ray cluster.

    python benchmarks/faults.py --out benchmarks/results/faults_cpu.json   # ~12 min on 2 cores

The cluster: 2 SmolLM2 target replicas drafting on one shared drafter deployment (the trained draft, k=4,
adaptive-global verification, so the budget actor is in play). For each fault in turn a closed-loop load
(`router.loadgen`, chats, half streaming) runs; the fault is injected `--fault-at` seconds in, and the
script polls until the cluster has recovered:
  drafter       the drafter's Serve replica actor is killed; recovered = a replica resynced a new drafter
  budget_actor  the named budget actor is killed; recovered = a new actor is planning again
  replica       target-1's Serve replica actor is killed; recovered = Serve reports it healthy again
Requests are binned by start time: before the fault, during (fault to recovery), after. The JSON has each
window's requests, outcomes by kind and latency p50/p99, plus the recovery time and the idle KV usage.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import httpx

from router.loadgen import LoadgenConfig, percentile, run_loadgen


def _serve_actor(deployment: str):
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA") and f"#{deployment}#" in a["name"]]
    return names[0] if names else None


def _stats(i: int) -> dict:
    from ray import serve

    return serve.get_deployment_handle(f"target-{i}", "specfleet").stats.remote().result(timeout_s=30)


def _kill_drafter() -> tuple[object, callable]:
    import ray

    before = sum(_stats(i)["drafter"]["resyncs"] for i in range(2))
    ray.kill(ray.get_actor(_serve_actor("drafter-0"), namespace="serve"), no_restart=True)
    return before, lambda: sum(_stats(i)["drafter"]["resyncs"] for i in range(2)) > before


def _kill_budget_actor() -> tuple[object, callable]:
    """Recovered = a new actor exists and the replicas' global plans grow again after it appeared (the
    actor's own plan count stays 0 when no drafter capacity is shared, so it cannot tell)."""
    import ray

    from cluster.budget_actor import ACTOR_NAME, NAMESPACE

    old = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    old_id = old._actor_id.hex()
    ray.kill(old)
    seen: dict[str, int] = {}

    def planning_again() -> bool:
        try:
            new = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
        except ValueError:
            return False
        if new._actor_id.hex() == old_id:
            return False
        plans = sum(_stats(i)["budget"]["global_plans"] for i in range(2))
        seen.setdefault("at_new_actor", plans)
        return plans > seen["at_new_actor"]

    return old_id, planning_again


def _kill_replica() -> tuple[object, callable]:
    import ray
    from ray import serve

    old = _serve_actor("target-1")
    ray.kill(ray.get_actor(old, namespace="serve"), no_restart=True)

    def healthy_again() -> bool:
        dep = serve.status().applications["specfleet"].deployments["target-1"]
        name = _serve_actor("target-1")
        return str(dep.status).endswith("HEALTHY") and name is not None and name != old

    return old, healthy_again


FAULTS = {"drafter": _kill_drafter, "budget_actor": _kill_budget_actor, "replica": _kill_replica}


def _window(records: list[dict], lo: float, hi: float) -> dict:
    rs = [r for r in records if lo <= r["start"] < hi]
    kinds: dict[str, int] = {}
    for r in rs:
        kinds[r["outcome"]] = kinds.get(r["outcome"], 0) + 1
    lat = [r["end"] - r["start"] for r in rs if r["outcome"] == "ok"]
    return {"from_s": round(lo, 1), "to_s": round(hi, 1), "requests": len(rs), "outcomes": kinds,
            "latency_p50": percentile(lat, 0.5), "latency_p99": percentile(lat, 0.99)}


def _kv_idle(url: str) -> float | None:
    time.sleep(3)
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("specfleet:kv_cache_usage_perc"):
            return float(line.split()[-1])
    return None


def run_fault(name: str, url: str, args) -> dict:
    cfg = LoadgenConfig(url=url, concurrency=args.concurrency, duration_s=args.duration, turns=2,
                        stream_fraction=0.5, max_tokens=(16, 48), seed=hash(name) % 1000, timeout_s=300)
    report: dict = {}
    t = threading.Thread(target=lambda: report.update(run_loadgen(cfg)))
    t0 = time.monotonic()
    t.start()
    time.sleep(args.fault_at)
    t_fault = time.monotonic() - t0
    _, recovered = FAULTS[name]()
    t_rec = None
    while time.monotonic() - t0 < args.duration + 240:
        try:
            if recovered():
                t_rec = time.monotonic() - t0
                break
        except Exception:  # noqa: BLE001 - the cluster is mid-recovery; ask again
            pass
        time.sleep(0.5)
    t.join()
    recs = report["records"]  # times relative to the load's start (within ~0.1 s of t0)
    end = max((r["start"] for r in recs), default=0) + 1
    rec_at = t_rec if t_rec is not None else end
    out = {"fault": name, "fault_at_s": round(t_fault, 1),
           "recovered_after_s": round(t_rec - t_fault, 1) if t_rec is not None else None,
           "summary": report["summary"],
           "windows": {"before": _window(recs, 0, t_fault), "during": _window(recs, t_fault, rec_at),
                       "after": _window(recs, rec_at, end)},
           "kv_usage_when_idle": _kv_idle(url)}
    print(json.dumps({k: v for k, v in out.items() if k != "summary"}, indent=1), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", default="drafter,budget_actor,replica")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--duration", type=float, default=120, help="seconds of load per fault")
    ap.add_argument("--fault-at", type=float, default=40)
    ap.add_argument("--port", type=int, default=8012)
    ap.add_argument("--out", default="benchmarks/results/faults_cpu.json")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray
    from ray import serve

    from cluster.app import build_app

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    config = {"replicas": 2, "placement": {"replica_cpus": 1, "ingress_cpus": 0.5},
              "drafters": {"count": 1, "cpus": 0.5},
              "engine": {"spec": {"method": "draft", "k": 4, "verify": "adaptive-global"}}}
    t = time.perf_counter()
    serve.run(build_app(config), name="specfleet", route_prefix="/")
    url = f"http://127.0.0.1:{args.port}"
    print(f"cluster up in {time.perf_counter() - t:.0f} s", flush=True)
    results = {"config": config, "load": {"concurrency": args.concurrency, "duration_s": args.duration,
                                          "fault_at_s": args.fault_at, "max_tokens": [16, 48]},
               "runs": [run_fault(name, url, args) for name in args.faults.split(",")]}
    Path(args.out).write_text(json.dumps(results, indent=1))
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
