"""One adaptive engine, its runs alternating between the policy attached and detached (`engine.adaptive =
None`: every draft is verified, as fixed k does). The engine object, its weights, KV blocks and warm-up are
the same in both, so what differs is only the policy's work per step. Where adaptive verifies full drafts
anyway (n-gram, repetitive, c=1), this asks whether its deficit against a separate fixed-k engine comes from
the policy or from the engine it runs in.

    python benchmarks/policy_detached.py --mode ngram:7:adaptive --workload repetitive --concurrency 1 --rounds 8
"""
from __future__ import annotations

import argparse
import statistics

from profile_steps import instrument, uninstrument
from workers.bench import _spec, _warmed, run_ours, sustained_plan, varied_lengths, workload_prompts
from workers.config import EngineConfig
from workers.engine import LLMEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="ngram:7:adaptive")
    ap.add_argument("--workload", default="repetitive")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--per-slot", type=int, default=2)
    args = ap.parse_args()
    e = _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(args.mode, 7))), args.max_tokens, 0)
    policy = e.adaptive
    if policy is None:
        raise SystemExit(f"{args.mode} has no adaptive policy to detach")
    c = args.concurrency
    warm, count = sustained_plan(c, max(args.per_slot * c, 8))  # the grid's window
    prompts = [e.encode_prompt(t, chat=True) for t in workload_prompts(args.workload, count, 0)]
    lengths = varied_lengths(count, args.max_tokens, 0)
    res: dict[str, list[tuple[float, float]]] = {"attached": [], "detached": []}
    for rnd in range(args.rounds):
        for state in ("attached", "detached") if rnd % 2 == 0 else ("detached", "attached"):
            e.adaptive = policy if state == "attached" else None
            run_ours(e, prompts[:2], 2, 4)
            probe = instrument(e)
            r = run_ours(e, prompts, c, lengths, admit=count, untimed=warm)
            uninstrument(e)
            steps = max(probe["T"]["steps"], 1)
            res[state].append((r["output_tokens_per_s"], probe["T"]["fwd"] / steps * 1e3))
            print(f"round {rnd} policy {state}: {r['output_tokens_per_s']:.1f} tok/s, {steps} steps, forward "
                  f"{probe['T']['fwd'] / steps * 1e3:.1f} ms/step, mean acceptance length "
                  f"{r['mean_acceptance_length']}", flush=True)
    e.adaptive = policy
    for i, what in ((0, "tokens/s"), (1, "forward per step")):
        ratios = [a[i] / d[i] for a, d in zip(res["attached"], res["detached"])]
        print(f"attached / detached, {what}: median {statistics.median(ratios):.3f}, per round "
              f"{[round(x, 3) for x in ratios]}")


if __name__ == "__main__":
    main()
