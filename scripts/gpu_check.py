"""GPU check (no Ray, no network): engine correctness tests + a two-minute benchmark, printed as a table.

The default model's weights are too large to send (64 MiB limit), so the benchmark runs a random-weight model
of SmolLM2-135M's exact shape (timing does not depend on weight values; acceptance does, so only step
times and no-speculation throughput are reported), and correctness runs the tiny-model test suite.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch


def smollm_shaped(folder: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                      rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(os.environ["SPECFLEET_TOKENIZER_DIR"]).save_pretrained(folder)
    return folder


def bench(model_dir: Path, seconds: float) -> list[dict]:
    from workers.config import EngineConfig, SamplingParams, SpecConfig
    from workers.engine import LLMEngine

    rows = []
    deadline = time.perf_counter() + seconds
    for mode, k in (("off", 0), ("ngram", 4)):
        eng = LLMEngine(EngineConfig(model=str(model_dir), kv_cache_memory_gb=8,
                                     spec=SpecConfig(method=mode, k=k) if k else SpecConfig()))
        for c in (1, 16, 64):
            if time.perf_counter() > deadline:
                break
            prompt = [(i * 37) % 5000 + 10 for i in range(200)]
            sp = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)
            eng.generate([prompt] * 2, sp)  # warm-up
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t = time.perf_counter()
            res = eng.generate([prompt[: 100 + i] for i in range(2 * c)], sp)
            dt = time.perf_counter() - t
            toks = sum(r.num_output for r in res)
            rows.append({"mode": mode, "k": k, "concurrency": c, "output_tokens_per_s": round(toks / dt, 1),
                         "mean_acceptance_length": round(eng.spec_stats.mean_acceptance_length, 2)})
            print(rows[-1], flush=True)
    return rows


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
          torch.cuda.get_device_name() if torch.cuda.is_available() else "")
    import pytest

    rc = pytest.main(["-q", "-m", "not model", "tests/workers", "-p", "no:cacheprovider"])
    rows = bench(smollm_shaped(Path("/tmp/smollm_shaped")), seconds=float(os.environ.get("BENCH_SECONDS", 120)))
    print("\n| mode | k | c | tok/s |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['k']} | {r['concurrency']} | {r['output_tokens_per_s']} |")
    (out / "gpu_check.json").write_text(json.dumps({"pytest_exit": int(rc), "rows": rows}, indent=1))
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
