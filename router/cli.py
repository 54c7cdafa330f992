"""`specfleet` entry point: the engine's commands (workers/cli.py) plus `serve` (the HTTP API)."""
from __future__ import annotations

import argparse
import os
import sys


def _add_serve(sub, add_engine_args) -> None:
    p = sub.add_parser("serve", help="serve the OpenAI-compatible HTTP API")
    add_engine_args(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("SPECFLEET_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1 (default: $SPECFLEET_API_KEY; none)")
    p.add_argument("--replicas", type=int, default=1, help="target replicas (Ray Serve)")
    p.add_argument("--local", action="store_true", help="one engine in this process, no Ray")
    p.add_argument("--config", default=None, help="a ClusterConfig YAML (the args of serve_config.yaml); "
                   "--host/--port/--api-key still apply, the engine and replica flags are then ignored")
    p.set_defaults(fn=cmd_serve, spec="ngram", verify="adaptive")


def cmd_serve(args: argparse.Namespace) -> int:
    from workers.config import EngineConfig, SpecConfig

    spec = SpecConfig(method=args.spec, k=args.k, draft_model=args.draft_model, verify=args.verify)
    engine = EngineConfig(model=args.model, dtype=args.dtype, spec=spec, tensor_parallel_size=args.tensor_parallel_size)
    if args.config:
        import yaml

        from cluster.config import ClusterConfig

        base = ClusterConfig.model_validate(yaml.safe_load(open(args.config)) or {})
        engine = base.engine
    if args.local:
        from router.server import serve_local

        serve_local(engine, args.host, args.port, args.api_key)
        return 0
    from cluster.config import ClusterConfig, HTTPConfig
    from cluster.launch import run_local_cluster

    if args.api_key:
        os.environ["SPECFLEET_API_KEY"] = args.api_key
    http = {"host": args.host, "port": args.port}
    if args.api_key:
        http["api_key_env"] = "SPECFLEET_API_KEY"
    if args.config:
        cfg = base.model_copy(update={"http": base.http.model_copy(update=http)})
    else:
        cfg = ClusterConfig(engine=engine, replicas=args.replicas, http=HTTPConfig(**http))
    run_local_cluster(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    from workers.cli import main as engine_main

    return engine_main(argv, extend=_add_serve)


if __name__ == "__main__":
    sys.exit(main())
