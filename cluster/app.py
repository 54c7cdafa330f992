"""The Ray Serve application: `serve run` / `serve deploy` import path `cluster.app:build_app`.

Deployments: one `target-<i>` per replica (each owns an engine loop, `cluster/replica.py`) and an `ingress`
serving the OpenAI-compatible API (`router/api.py`) over a `RayBackend` that picks a replica per request.
"""
from __future__ import annotations

import os

from ray import serve

from cluster.config import ClusterConfig
from cluster.replica import TargetReplica


@serve.ingress()
class Ingress:
    def __init__(self, config_json: str, **replicas) -> None:
        self.config = ClusterConfig.model_validate_json(config_json)
        self.replicas = replicas  # name -> DeploymentHandle

    def __serve_build_asgi_app__(self):
        from router.api import build_api
        from router.ray_backend import RayBackend

        http = self.config.http
        key = os.environ.get(http.api_key_env) if http.api_key_env else None
        if http.api_key_env and not key:
            raise RuntimeError(f"http.api_key_env names {http.api_key_env!r}, which is not set on the ingress")
        backend = RayBackend(self.config.served_name, self.replicas, self.config.prefix_affinity_tokens)
        return build_api(backend, api_key=key, max_body_bytes=http.max_body_bytes, max_inflight=http.max_inflight,
                         default_max_tokens=http.default_max_tokens)


class PlacementError(ValueError):
    """The configuration asks for more than the cluster has: fail at once, never hang pending."""


def check_placement(cfg: ClusterConfig) -> None:
    """Compare what the deployments need with the running cluster's resources (when Ray is up)."""
    import ray

    if not ray.is_initialized():
        return
    have = ray.cluster_resources()
    p = cfg.placement
    need = {"CPU": cfg.replicas * p.replica_cpus + p.ingress_cpus, "GPU": cfg.replicas * p.replica_gpus}
    short = {k: (v, have.get(k, 0.0)) for k, v in need.items() if v > have.get(k, 0.0) + 1e-9}
    if short:
        detail = ", ".join(f"{k}: needs {v:g}, cluster has {h:g}" for k, (v, h) in short.items())
        raise PlacementError(f"cannot place {cfg.replicas} replica(s) x (CPU {p.replica_cpus:g}, GPU "
                             f"{p.replica_gpus:g}) + ingress (CPU {p.ingress_cpus:g}): {detail}. Lower "
                             f"placement.* or replicas, or add nodes.")


def build_app(args: dict | None = None) -> serve.Application:
    """Application builder: `args` is a ClusterConfig as a dict (the `args:` of serve_config.yaml)."""
    cfg = ClusterConfig.model_validate(args or {})
    check_placement(cfg)
    p = cfg.placement
    handles = {}
    for i in range(cfg.replicas):
        name = f"target-{i}"
        dep = serve.deployment(TargetReplica, name=name, num_replicas=1, max_ongoing_requests=4096,
                               ray_actor_options={"num_cpus": p.replica_cpus, "num_gpus": p.replica_gpus})
        handles[name.replace("-", "_")] = dep.bind(cfg.model_dump_json(), name)
    ingress = serve.deployment(Ingress, name="ingress", num_replicas=1, max_ongoing_requests=4096,
                               ray_actor_options={"num_cpus": p.ingress_cpus})
    return ingress.bind(cfg.model_dump_json(), **handles)
