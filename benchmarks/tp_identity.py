"""Greedy identity of 2 tensor-parallel shards vs 1 on the embedded default (local shard processes, gloo).

    python benchmarks/tp_identity.py float32 20 64     # dtype, ShareGPT prompts, new tokens
"""
import sys
import time

from workers.config import EngineConfig, SamplingParams
from workers.engine import LLMEngine
from workers.workloads import sharegpt_prompts


def main() -> None:
    dtype, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    prompts = sharegpt_prompts(n)
    sp = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    outs = {}
    for tp in (1, 2):
        t0 = time.perf_counter()
        eng = LLMEngine(EngineConfig(dtype=dtype, tensor_parallel_size=tp, kv_cache_memory_gb=0.25))
        t1 = time.perf_counter()
        outs[tp] = [r.output_ids for r in eng.generate(prompts, sp, chat=True)]
        print(f"tp={tp}: load {t1 - t0:.1f} s, generate {time.perf_counter() - t1:.1f} s", flush=True)
        if eng.shard_peers is not None:
            eng.shard_peers.close()
    firsts = [next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) for a, b in zip(outs[1], outs[2]) if a != b]
    print(f"{dtype}: {n - len(firsts)}/{n} identical; first divergence at tokens {sorted(firsts)}")


if __name__ == "__main__":  # shard processes are spawned: they re-import this file
    main()
