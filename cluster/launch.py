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
    serve.start(http_options={"host": cfg.http.host, "port": cfg.http.port})
    serve.run(build_app(cfg.model_dump()), name="specfleet", route_prefix="/", blocking=False)
    print(f"specfleet: {cfg.served_name} ({cfg.replicas} replica(s), speculation {cfg.engine.spec.method}, "
          f"verify {cfg.engine.spec.verify}) ready in {time.perf_counter() - t0:.1f} s on "
          f"http://{cfg.http.host}:{cfg.http.port}/v1", flush=True)
    if blocking:
        signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM drains like Ctrl-C
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"specfleet: draining (in-flight requests get up to {cfg.http.drain_timeout_s:g} s)", flush=True)
            serve.shutdown()  # replicas stop taking requests and finish ongoing ones (graceful_shutdown_timeout_s)
            ray.shutdown()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
