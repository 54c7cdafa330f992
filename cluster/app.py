"""The Ray Serve application: `serve run` / `serve deploy` import path `cluster.app:build_app`.

Deployments: one `target-<i>` per replica (each owns an engine loop, `cluster/replica.py`, and its target
shards 1.. as actors in its placement group, `cluster/shards.py`), `drafter-<j>` when drafters run apart
(`cluster/drafter.py`), and an `ingress` serving the OpenAI-compatible API (`router/api.py`) over a
`RayBackend` that picks a replica per request.
"""
from __future__ import annotations

import math
import os

from ray import serve

from cluster.config import ClusterConfig
from cluster.drafter import Drafter
from cluster.replica import TargetReplica, with_threads


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
        self._backend = RayBackend(self.config.served_name, self.replicas, self.config.prefix_affinity_tokens)
        self._api = build_api(self._backend, api_key=key, max_body_bytes=http.max_body_bytes,
                             max_inflight=http.max_inflight, default_max_tokens=http.default_max_tokens)
        return self._api

    def drain(self) -> int:
        """SIGTERM, step 1 (cluster/launch.py): refuse new requests (503) and say how many are in flight."""
        self._api.state.draining = True
        return self._backend.num_inflight()

    def inflight(self) -> int:
        return self._backend.num_inflight()


class PlacementError(ValueError):
    """The configuration asks for more than the cluster has: fail at once, never hang pending."""


def replica_bundles(cfg: ClusterConfig) -> list[dict[str, float]]:
    """The placement group of one replica: bundle 0 = the replica (shard 0), bundle r = shard r."""
    p = cfg.placement

    def bundle(cpus: float) -> dict[str, float]:
        return {k: v for k, v in (("CPU", cpus), ("GPU", p.gpus_per_shard)) if v > 0}

    return [bundle(p.replica_cpus)] + [bundle(p.shard_cpus) for _ in range(cfg.engine.tensor_parallel_size - 1)]


def placement_needs(cfg: ClusterConfig) -> dict[str, float]:
    p, d = cfg.placement, cfg.drafters
    tp = cfg.engine.tensor_parallel_size
    drafter_gpus = math.ceil(d.count * d.gpus - 1e-9) if d.gpus else 0  # fractions pack onto whole GPUs
    need = {"CPU": cfg.replicas * (p.replica_cpus + (tp - 1) * p.shard_cpus) + p.ingress_cpus + d.count * d.cpus,
            "GPU": cfg.replicas * tp * p.gpus_per_shard + drafter_gpus}
    if d.count and d.node_resource:
        need[d.node_resource] = float(d.count)
    return need


def check_placement(cfg: ClusterConfig) -> None:
    """Compare what the deployments need with the running cluster's resources (when Ray is up)."""
    import ray

    if not ray.is_initialized():
        return
    have = ray.cluster_resources()
    short = {k: (v, have.get(k, 0.0)) for k, v in placement_needs(cfg).items() if v > have.get(k, 0.0) + 1e-9}
    p, d, tp = cfg.placement, cfg.drafters, cfg.engine.tensor_parallel_size
    what = (f"{cfg.replicas} replica(s) x {tp} shard(s) (replica CPU {p.replica_cpus:g}, shard CPU "
            f"{p.shard_cpus:g}, GPU {p.gpus_per_shard:g} each) + {d.count} drafter(s) (CPU {d.cpus:g}, GPU "
            f"{d.gpus:g}) + ingress (CPU {p.ingress_cpus:g})")
    if short:
        detail = ", ".join(f"{k}: needs {v:g}, cluster has {h:g}" for k, (v, h) in short.items())
        raise PlacementError(f"cannot place {what}: {detail}. Lower placement.* / drafters.* or replicas, "
                             f"or add nodes.")
    node_gpus = max((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n.get("Alive")), default=0.0)
    if tp * p.gpus_per_shard > node_gpus + 1e-9:
        raise PlacementError(f"a replica's {tp} shards must share one node (STRICT_PACK) and need "
                             f"{tp * p.gpus_per_shard:g} GPUs, but the largest node has {node_gpus:g}: lower "
                             f"engine.tensor_parallel_size or use larger nodes.")


def build_app(args: dict | None = None) -> serve.Application:
    """Application builder: `args` is a ClusterConfig as a dict (the `args:` of serve_config.yaml)."""
    cfg = ClusterConfig.model_validate(args or {})
    check_placement(cfg)
    cfg_json = cfg.model_dump_json()
    d = cfg.drafters
    drafters = [serve.deployment(Drafter, name=f"drafter-{j}", num_replicas=1, max_ongoing_requests=64,
                                 ray_actor_options={"num_cpus": d.cpus, "num_gpus": d.gpus,
                                                    "resources": {d.node_resource: 1} if d.node_resource else {},
                                                    "runtime_env": {"env_vars": d.mps.client_env()}})
                .bind(with_threads(cfg.engine, d.cpus).model_dump_json(), d.mps.model_dump_json())
                for j in range(d.count)]
    bundles = replica_bundles(cfg)
    handles = {}
    for i in range(cfg.replicas):
        name = f"target-{i}"
        pg = {"placement_group_bundles": bundles, "placement_group_strategy": "STRICT_PACK"} \
            if len(bundles) > 1 or "GPU" in bundles[0] else {}
        dep = serve.deployment(TargetReplica, name=name, num_replicas=1, max_ongoing_requests=4096,
                               graceful_shutdown_timeout_s=cfg.http.drain_timeout_s,
                               health_check_period_s=2 if cfg.engine.tensor_parallel_size > 1 else 10,
                               ray_actor_options={"num_cpus": cfg.placement.replica_cpus,
                                                  "num_gpus": cfg.placement.gpus_per_shard}, **pg)
        handles[name.replace("-", "_")] = dep.bind(cfg_json, name, [drafters[j] for j in cfg.drafters_of(i)])
    ingress = serve.deployment(Ingress, name="ingress", num_replicas=1, max_ongoing_requests=4096,
                               graceful_shutdown_timeout_s=cfg.http.drain_timeout_s,
                               ray_actor_options={"num_cpus": cfg.placement.ingress_cpus})
    return ingress.bind(cfg_json, **handles)
