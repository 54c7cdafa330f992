"""Diagnostic: SDPA's first call at a new shape, the way attention.py's segment path calls it (GQA 9/3 heads,
head dim 64, bf16; a bool mask when the segment starts past position 0), per backend set."""
import json
import os
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"
H, KVH, D = 9, 3, 64
SETS = {"default": None, "no_cudnn": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
        "cudnn_only": [SDPBackend.CUDNN_ATTENTION], "efficient_only": [SDPBackend.EFFICIENT_ATTENTION],
        "flash_only": [SDPBackend.FLASH_ATTENTION]}
# (query rows, start position): draft catch-ups and prefill segments of the lengths the probe log saw
SHAPES = [(12, 100), (26, 300), (43, 0), (11, 517), (39, 0), (25, 811), (12, 100), (70, 129)]


def call(q_len, start, backends):
    ctx = start + q_len
    q = torch.randn(1, H, q_len, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, KVH, ctx, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    mask = None
    if start:
        pos = torch.arange(start, ctx, device=dev)
        mask = torch.arange(ctx, device=dev)[None, :] <= pos[:, None]
    torch.cuda.synchronize()
    t = time.perf_counter()
    try:
        if backends is None:
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=1.0, enable_gqa=True)
        else:
            with sdpa_kernel(backends):
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=1.0,
                                               enable_gqa=True)
        torch.cuda.synchronize()
    except RuntimeError as e:
        return f"error: {str(e)[:120]}"
    return round((time.perf_counter() - t) * 1e3, 3)


out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
       "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled()}
call(16, 0, None)  # CUDA context, first kernels
for j, (name, backends) in enumerate(SETS.items()):
    rows = []
    for q_len, start in SHAPES:
        q_len, start = q_len + j, start + 7 * j  # shapes new to each set (the 7th repeats the 1st)
        first = call(q_len, start, backends)
        again = call(q_len, start, backends)
        rows.append([q_len, start, first, again])
    out[name] = rows
    print(name, rows, flush=True)
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
with open(os.path.join(os.environ.get("OUT", "/tmp"), "sdpa_shapes.json"), "w") as f:
    json.dump(out, f, indent=1)
print(json.dumps({k: v for k, v in out.items() if not isinstance(v, list)}))
