"""KubeRay manifests from a ClusterConfig: the RayService's serveConfigV2 is generated, never hand-written.

    python -m cluster.k8s k8s/overlays/gpu/cluster.yaml --gpu > k8s/overlays/gpu/rayservice-patch.yaml

`serve_config(cfg)` is the serveConfigV2 document (import path `cluster.app:build_app`, args = the config);
`rayservice(cfg, ...)` the whole RayService (ray.io/v1): a head group (GCS, dashboard, Serve proxy, metrics
port) and one worker group, CPU or `nvidia.com/gpu`, with Ray token authentication on.
"""
from __future__ import annotations

import argparse
import json
import sys

import yaml

from cluster.config import ClusterConfig

IMAGE = "ghcr.io/specfleet/specfleet:0.1.0"  # built from the repository (see k8s/README.md)
METRICS_PORT = 8080


def serve_config(cfg: ClusterConfig) -> dict:
    return {"proxy_location": "HeadOnly",
            "http_options": {"host": "0.0.0.0", "port": cfg.http.port},  # inside the pod; the Service fronts it
            "applications": [{"name": "specfleet", "route_prefix": "/", "import_path": "cluster.app:build_app",
                              "args": cfg.model_dump(mode="json", exclude_defaults=True)}]}


def _container(name: str, cpu: str, memory: str, gpus: int, ports: list[tuple[str, int]],
               env: list[dict]) -> dict:
    limits = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {"name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
            "ports": [{"name": n, "containerPort": p} for n, p in ports], "env": env}


def _drafter_group(cfg: ClusterConfig, name: str, env: list[dict]) -> dict:
    """Drafters on nodes whose GPUs the NVIDIA device plugin shares through MPS (device-plugin-mps.yaml): one
    pod holds one MPS share (`nvidia.com/gpu: 1`) and advertises `drafters.node_resource` so that only
    drafters land there; the plugin runs the MPS daemon and gives the pod its client environment."""
    d = cfg.drafters
    per_pod = max(1, round(1 / d.gpus)) if d.gpus else d.count
    pods = -(-d.count // per_pod)
    pod = _container("ray-drafter", "2", "8Gi", 1, [("metrics", METRICS_PORT)], env)
    params = {"metrics-export-port": str(METRICS_PORT)}
    if d.node_resource:
        params["resources"] = json.dumps(json.dumps({d.node_resource: per_pod}))
    return {"groupName": "drafter-workers", "replicas": pods, "minReplicas": pods, "maxReplicas": pods,
            "rayStartParams": params,
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": name}},
                         "spec": {"containers": [pod],
                                  "nodeSelector": {"nvidia.com/device-plugin.config": "mps-drafters"}}}}


def rayservice(cfg: ClusterConfig, name: str = "specfleet", gpu: bool = False, workers: int = 1,
               gpus_per_worker: int = 1, worker_cpu: str = "4", worker_memory: str = "16Gi") -> dict:
    env = [{"name": "HF_HUB_OFFLINE", "value": "1"}]
    if cfg.http.api_key_env:
        env.append({"name": cfg.http.api_key_env,
                    "valueFrom": {"secretKeyRef": {"name": f"{name}-api-key", "key": "api-key"}}})
    head = _container("ray-head", "2", "8Gi", 0, [("gcs", 6379), ("dashboard", 8265), ("serve", 8000),
                                                   ("metrics", METRICS_PORT)], env)
    worker = _container("ray-worker", worker_cpu, worker_memory, gpus_per_worker if gpu else 0,
                        [("metrics", METRICS_PORT)], env)
    worker_group = {"groupName": "gpu-workers" if gpu else "cpu-workers", "replicas": workers,
                    "minReplicas": workers, "maxReplicas": workers,
                    "rayStartParams": {"metrics-export-port": str(METRICS_PORT)},
                    "template": {"metadata": {"labels": {"app.kubernetes.io/name": name}},
                                 "spec": {"containers": [worker]}}}
    groups = [worker_group]
    if gpu:
        worker_group["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
        if cfg.drafters.count:
            groups.append(_drafter_group(cfg, name, env))
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name}},
            "spec": {"serveConfigV2": yaml.safe_dump(serve_config(cfg), sort_keys=False),
                     "rayClusterConfig": {
                         "rayVersion": "2.60.0",
                         "authOptions": {"mode": "token"},  # Ray token auth stays on in clusters
                         "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0",
                                                              "metrics-export-port": str(METRICS_PORT)},
                                           "template": {"metadata": {"labels": {"app.kubernetes.io/name": name}},
                                                        "spec": {"containers": [head]}}},
                         "workerGroupSpecs": groups}}}


class _Literal(str):
    """A multi-line string written as a YAML literal block (readable serveConfigV2)."""


yaml.SafeDumper.add_representer(_Literal, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="a ClusterConfig YAML")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--gpus-per-worker", type=int, default=1)
    args = ap.parse_args(argv)
    cfg = ClusterConfig.model_validate(yaml.safe_load(open(args.config)) or {})
    doc = rayservice(cfg, gpu=args.gpu, workers=args.workers, gpus_per_worker=args.gpus_per_worker)
    doc["spec"]["serveConfigV2"] = _Literal(doc["spec"]["serveConfigV2"])
    sys.stdout.write("# Generated by `python -m cluster.k8s` from the ClusterConfig next to this file: edit that.\n")
    yaml.safe_dump(doc, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
