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


def _add_loadgen(sub) -> None:
    p = sub.add_parser("loadgen", help="closed-loop load against a running server (JSON report)")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=60.0, help="seconds")
    p.add_argument("--max-requests", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--stream-fraction", type=float, default=0.5)
    p.add_argument("--disconnect-fraction", type=float, default=0.0)
    p.add_argument("--long-fraction", type=float, default=0.0)
    p.add_argument("--long-prompt-tokens", type=int, default=1500)
    p.add_argument("--api-key", default=os.environ.get("SPECFLEET_API_KEY"))
    p.add_argument("--out", default=None, help="write the JSON report here")
    p.set_defaults(fn=cmd_loadgen)


def cmd_loadgen(args: argparse.Namespace) -> int:
    import json

    from router.loadgen import LoadgenConfig, run_loadgen

    cfg = LoadgenConfig(url=args.url, model=args.model, concurrency=args.concurrency, duration_s=args.duration,
                        max_requests=args.max_requests, seed=args.seed, turns=args.turns,
                        stream_fraction=args.stream_fraction, disconnect_fraction=args.disconnect_fraction,
                        long_fraction=args.long_fraction, long_prompt_tokens=args.long_prompt_tokens,
                        api_key=args.api_key)
    report = run_loadgen(cfg)
    print(json.dumps(report["summary"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


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
        # one machine: give the replicas its cores (the ingress keeps half a CPU), so each engine gets the
        # torch threads they stand for (Ray would otherwise pin every replica to one thread)
        cpus = max(0.25, ((os.cpu_count() or 1) - 0.5) / args.replicas)
        cfg = ClusterConfig(engine=engine, replicas=args.replicas, http=HTTPConfig(**http),
                            placement={"replica_cpus": cpus})
    run_local_cluster(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    from workers.cli import main as engine_main

    def extend(sub, add_engine_args) -> None:
        _add_serve(sub, add_engine_args)
        _add_loadgen(sub)

    return engine_main(argv, extend=extend)


if __name__ == "__main__":
    sys.exit(main())
