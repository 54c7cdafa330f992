"""The engine's commands: prepare-model, generate, demo, bench (router/cli.py adds `serve` on top)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path


def _engine(args: argparse.Namespace):
    from workers.config import EngineConfig, SpecConfig
    from workers.engine import LLMEngine

    spec = SpecConfig(method=args.spec, k=args.k, draft_model=args.draft_model, verify=args.verify)
    return LLMEngine(EngineConfig(model=args.model, dtype=args.dtype, spec=spec,
                                  tensor_parallel_size=args.tensor_parallel_size))


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m-instruct", help="default model name or a local HF folder")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--spec", default="off", choices=["off", "ngram", "draft"], help="speculative decoding method")
    p.add_argument("--k", type=int, default=None, help="draft tokens per step (default: 15 for n-gram and 7 for "
                   "a draft model with adaptive verification, 4 with fixed k)")
    p.add_argument("--draft-model", default=None,
                   help="draft model folder or shipped draft name (for --spec draft; default: the shipped draft)")
    p.add_argument("--verify", default="fixed", choices=["fixed", "adaptive", "adaptive-global"],
                   help="fixed: verify all k drafts; adaptive: verify what the cost model says pays off")
    p.add_argument("--tensor-parallel-size", type=int, default=1,
                   help="target shards (tensor parallel; local shard processes outside a cluster)")


def cmd_prepare_model(args: argparse.Namespace) -> int:
    from workers.model_store import prepare_default_model

    t = time.perf_counter()
    path = prepare_default_model(force=args.force)
    print(f"default model ready at {path} ({time.perf_counter() - t:.1f} s)")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from workers.config import SamplingParams

    sp = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed,
                        top_p=args.top_p, top_k=args.top_k, stop=args.stop or [])  # validate before loading
    eng = _engine(args)
    t = time.perf_counter()
    rid = eng.add_request(args.prompt, sp, chat=args.chat)
    req = None
    while eng.has_unfinished() or req is None:
        for o in eng.step():
            if not args.json:
                print(o.delta_text, end="", flush=True)
            if o.finished and o.req_id == rid:
                req = o.request
    dt = time.perf_counter() - t
    stats = {"finish_reason": req.finish_reason, "prompt_tokens": req.num_prompt, "output_tokens": req.num_output,
             "seconds": round(dt, 3), "output_tokens_per_s": round(req.num_output / dt, 2),
             "ttft_ms": round((req.first_token_time - req.arrival) * 1000, 1), "spec_decode": req.spec.to_dict()}
    if args.json:
        print(json.dumps({"text": req.text, "token_ids": req.output_ids, "stats": stats}))
    else:
        print(f"\n\n[{stats['output_tokens']} tokens, {stats['output_tokens_per_s']} tok/s, "
              f"mean acceptance length {req.spec.mean_acceptance_length:.2f}]", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from workers.config import SamplingParams

    eng = _engine(args)
    print(f"specfleet demo: {args.model}, speculation={args.spec} (k={eng.config.spec.k}). "
          "Type a message, Ctrl-D to quit.")
    print("> ", end="", flush=True)
    sp = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    for line in sys.stdin:
        if not line.strip():
            continue
        eng.add_request(line.strip(), sp, chat=True)
        while eng.has_unfinished():
            for o in eng.step():
                print(o.delta_text, end="", flush=True)
                if o.finished:
                    s = o.request.spec
                    print(f"\n[{o.request.num_output} tokens, mean acceptance length {s.mean_acceptance_length:.2f}]")
        print("> ", end="", flush=True)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from workers.bench import format_table, run_bench

    rows = run_bench(args.workloads.split(","), [int(c) for c in args.concurrency.split(",")], args.modes.split(","),
                     args.k, args.max_tokens, [p for p in args.peers.split(",") if p], args.prompts_per_slot,
                     args.seed, args.dtype, Path(args.out) if args.out else None, args.repeat,
                     sustained=args.sustained)
    print(format_table(rows))
    if args.out:
        print(f"\nwrote {args.out}")
    return 0


def main(argv: list[str] | None = None, extend=None) -> int:
    """`extend(subparsers, add_engine_args)` lets higher layers add commands (router/cli.py adds `serve`)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(prog="specfleet", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    if extend is not None:
        extend(sub, _add_engine_args)
    p = sub.add_parser("prepare-model", help="convert the embedded default model once (GGUF -> safetensors)")
    p.add_argument("--force", action="store_true")
    p.set_defaults(fn=cmd_prepare_model)

    p = sub.add_parser("generate", help="generate one completion")
    _add_engine_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--chat", action="store_true", help="apply the model's chat template")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object: text, token_ids, stats")
    p.set_defaults(fn=cmd_generate)

    p = sub.add_parser("demo", help="interactive chat with the engine (stdin)")
    _add_engine_args(p)
    p.add_argument("--max-tokens", type=int, default=256)
    p.set_defaults(fn=cmd_demo, spec="ngram")

    p = sub.add_parser("bench", help="offline closed-loop benchmark vs Hugging Face generate")
    p.add_argument("--workloads", default="sharegpt,repetitive")
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--modes", default="off,ngram:4,ngram:8",
                   help="our modes: off, METHOD[:K[:adaptive]] with METHOD ngram or draft")
    p.add_argument("--peers", default="hf,hf-pld", help="hf (plain generate), hf-pld (prompt lookup); '' for none")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompts-per-slot", type=int, default=2, help="requests per concurrency slot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="run everything N times, interleaved; report medians")
    p.add_argument("--sustained", action="store_true",
                   help="refill every slot, no drain: time P x c requests after the first wave, the same "
                        "prompts for every configuration; output lengths vary over max-tokens/3..5/3 (ours only)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--out", default=None, help="write JSON results here")
    p.set_defaults(fn=cmd_bench)

    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, FileNotFoundError) as exc:  # pydantic errors are ValueErrors: print them plainly
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
