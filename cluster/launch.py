"""`specfleet serve`: start a local Ray cluster in this process and run the Serve application on it."""
from __future__ import annotations

import os
import signal
import time


def run_local_cluster(cfg, blocking: bool = True) -> None:
    import ray
    from ray import serve

    from cluster.app import build_app

    t0 = time.perf_counter()
    if cfg.http.host in ("127.0.0.1", "localhost", "::1"):
        # Ray's token auth protects clusters reachable by others; a loopback-only local cluster runs without
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(include_dashboard=False, log_to_driver=False)
    if blocking:  # after ray.init (whose own handler would die on SIGTERM), before the app can take requests:
        signal.signal(signal.SIGTERM, _interrupt)  # /health may turn 200 before serve.run returns
    try:
        serve.start(http_options={"host": cfg.http.host, "port": cfg.http.port})
        serve.run(build_app(cfg.model_dump()), name="specfleet", route_prefix="/", blocking=False)
        print(f"specfleet: {cfg.served_name} ({cfg.replicas} replica(s), speculation {cfg.engine.spec.method}, "
              f"verify {cfg.engine.spec.verify}) ready in {time.perf_counter() - t0:.1f} s on "
              f"http://{cfg.http.host}:{cfg.http.port}/v1", flush=True)
        if not blocking:
            return
        while True:  # SIGTERM drains like Ctrl-C
            time.sleep(3600)
    except KeyboardInterrupt:
        print(f"specfleet: draining (in-flight requests get up to {cfg.http.drain_timeout_s:g} s)", flush=True)
        try:
            left = drain(cfg.http.drain_timeout_s)
            print(f"specfleet: drained ({left} request(s) still in flight cut off); stopping", flush=True)
        except KeyboardInterrupt:  # a second Ctrl-C / SIGTERM: stop now
            print("specfleet: drain interrupted; stopping now", flush=True)
        serve.shutdown()
        ray.shutdown()


def drain(timeout_s: float, app_name: str = "specfleet") -> int:
    """Ask the ingress to refuse new requests (503, /health 503), then wait until its in-flight requests
    have finished or `timeout_s` passed; returns how many were still running. (serve.shutdown() alone kills
    the HTTP proxy at once, cutting streams in flight: measured, tests/cluster/test_cluster_shutdown.py.)"""
    from ray import serve

    try:
        ingress = serve.get_deployment_handle("ingress", app_name)
        left = ingress.drain.remote().result(timeout_s=30)
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            time.sleep(0.25)
            left = ingress.inflight.remote().result(timeout_s=30)
        return left
    except Exception as exc:  # noqa: BLE001 - an ingress already gone: nothing left to drain
        print(f"specfleet: drain skipped ({type(exc).__name__})", flush=True)
        return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
