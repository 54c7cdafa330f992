"""What a ragged decode/verify step costs under each setting of `attention_groups.GROUP_COST_ROWS`: the price, in
padded query rows, the attention's grouping puts on one more tiled group (sequences grouped by query length,
each group padded to its own longest query). A setting only decides how sequences are grouped, never what
they compute, so the outputs are the same; only time differs. Each shape is one forward of the default model
(no speculation engine) at a fixed context, the settings interleaved shape by shape, medians of the repeats.
The fp32 path pads every sequence to one fixed tile, so there is nothing to measure there.
What it does not show: in closed loop the setting it favours (40) made adaptive 2-3% slower
(benchmarks/group_cost_ab.py; docs/architecture.md, "How the attention groups lengths"), so read it with that.

    python benchmarks/ragged_groups.py --contexts 64,128,256 --requests 4,16,32 --settings 12,24,32,40,64,1000 \
        --repeats 6 --out benchmarks/results/ragged_groups_bf16_cpu.json
On a GPU machine without the model files (SmolLM2's shape, random weights; a setting applies on CPUs and CUDA):
    python3 benchmarks/ragged_groups.py --random-weights --device cuda --contexts 256,1024 --requests 32,128 \
        --settings 12,256,4096,1000000 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

import workers.attention as attention
import workers.attention_groups as attention_groups
from workers.config import EngineConfig, SpecConfig
from workers.engine import LLMEngine
from workers.model_runner import ModelRunner, StepChunk


def shapes(b: int) -> dict[str, list[int]]:
    """Rows per sequence of steps of `b` requests: uniform, and the ragged mixes verification makes (from 32
    requests also what adaptive n-gram plans looked like on the H200: a quarter of them verifying 1-7 drafts,
    and fixed k=4's half at 5 rows)."""
    mixes = {"1x1": [], "1x2": [2], "1x8": [8], "2x5": [5, 5], "2x8": [8, 8], "4x2": [2] * 4, "4x5": [5] * 4,
             "3x3": [3] * 3, "1x3+1x5": [3, 5], "1x2+1x4+1x8": [2, 4, 8]}
    out = {}
    for name, rows in mixes.items():
        if len(rows) <= b:
            out[f"{b}x1" if not rows else f"{b - len(rows)}x1+{name}"] = [1] * (b - len(rows)) + rows
    out[f"{b}x2"] = [2] * b
    if b >= 32:
        out[f"{b - b // 4}x1+{b // 4}x(2..8)"] = [1] * (b - b // 4) + [2 + i % 7 for i in range(b // 4)]
        out[f"{b - b // 2}x1+{b // 2}x5"] = [1] * (b - b // 2) + [5] * (b // 2)
    return out


def _forward_s(runner: ModelRunner, rows: list[int], context: int) -> float:
    per = -(-(context + max(rows)) // runner.block_size)
    blocks = runner.pool.allocate(len(rows) * per)
    try:
        t = time.perf_counter()
        out = runner.run([StepChunk([7] * n, context, blocks[i * per:(i + 1) * per], n) for i, n in enumerate(rows)])
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        return time.perf_counter() - t
    finally:
        runner.pool.free(blocks)


def measure(runner: ModelRunner, context: int, requests: int, settings: list[int], repeats: int) -> dict:
    cases = shapes(requests)
    times: dict[tuple[str, int], list[float]] = {(k, s): [] for k in cases for s in settings}
    default = attention_groups.GROUP_COST_ROWS, attention_groups.GROUP_COST_ROWS_CUDA
    try:
        for _ in range(repeats + 1):  # the first round warms up and is dropped
            for name, rows in cases.items():
                for s in settings:
                    attention_groups.GROUP_COST_ROWS = attention_groups.GROUP_COST_ROWS_CUDA = s
                    times[name, s].append(_forward_s(runner, rows, context))
    finally:
        attention_groups.GROUP_COST_ROWS, attention_groups.GROUP_COST_ROWS_CUDA = default
    medians = {name: {str(s): round(1e3 * statistics.median(times[name, s][1:]), 2) for s in settings}
               for name in cases}
    ragged = [n for n, rows in cases.items() if len(set(rows)) > 1]
    geo = {str(s): round(math.exp(statistics.mean(math.log(medians[n][str(s)] / medians[n][str(settings[0])])
                                                  for n in ragged)), 4) for s in settings}
    return {"context": context, "requests": requests, "ms": medians, "ragged_vs_first_setting": geo}


def _random_runner(device: str, tokens: int) -> ModelRunner:
    """A runner of SmolLM2-135M's shape (30 layers, 9 query / 3 KV heads, width 576) with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from workers.llama import LlamaForward
    from workers.model_runner import pick_device, pick_dtype

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                      rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    dev = pick_device(device)
    model = LlamaForward(LlamaForCausalLM(cfg), dev, pick_dtype("auto", dev))
    return ModelRunner(model, 2 * tokens * model.kv_bytes_per_token(), 16, enable_prefix_caching=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="64,128,256")
    ap.add_argument("--requests", default="4,16,32")
    ap.add_argument("--settings", default="12,24,40,64,1000", help="GROUP_COST_ROWS values; the first is the base")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--random-weights", action="store_true",
                    help="SmolLM2-135M's architecture with random weights (a machine without the model: only "
                         "time is measured)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    settings = [int(x) for x in a.settings.split(",")]
    contexts, requests = [int(x) for x in a.contexts.split(",")], [int(x) for x in a.requests.split(",")]
    if a.random_weights:
        runner = _random_runner(a.device, max(requests) * (max(contexts) + 16))
    else:
        runner = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, device=a.device, spec=SpecConfig(method="off"))).runner
    dtype = runner.model.dtype
    if attention.fixed_tile_needed(dtype):
        raise SystemExit(f"{dtype}: every sequence is padded to one fixed tile; nothing to measure")
    points = []
    for context in contexts:
        for b in requests:
            p = measure(runner, context, b, settings, a.repeats)
            points.append(p)
            print(f"context {context} requests {b}: ragged steps vs GROUP_COST_ROWS={settings[0]} "
                  f"(geometric mean) {p['ragged_vs_first_setting']}")
            for name, ms in p["ms"].items():
                print(f"  {name:24s}" + "".join(f"{ms[str(s)]:9.1f}" for s in settings))
    overall = {str(s): round(math.exp(statistics.mean(math.log(p["ragged_vs_first_setting"][str(s)])
                                                      for p in points)), 4) for s in settings}
    print("all points, ragged steps vs the first setting (geometric mean):", overall)
    if a.out:
        dev = runner.model.device
        gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
        a.out.write_text(json.dumps({"settings": settings, "repeats": a.repeats, "dtype": str(dtype),
                                     "random_weights": a.random_weights, "device": str(dev),
                                     "machine": {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                                 "cores": os.cpu_count(),
                                                 "gpu": gpu},
                                     "overall": overall, "points": points}, indent=1) + "\n")


if __name__ == "__main__":
    main()
