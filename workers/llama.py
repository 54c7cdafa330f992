"""A compact Llama-family forward over Hugging Face weights, for ragged batches over a paged KV cache.

All tokens of a step (prefill chunks of new requests and 1+n verify positions of decoding requests) are one
flat `[T, hidden]` batch: every linear layer is one matmul over all of them; only attention looks at the
per-sequence structure (see `attention.py`). Fused QKV and gate/up projections halve the op count of a layer,
which is what bounds small-batch decode on CPU (per-op overhead, not bandwidth).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from workers.attention import SMALL_ROWS, AttentionMetadata, paged_attention
from workers.gemm_invariance import invariant_pieces, k_pieces, split_linear


def _no_reduce(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor  # [D]
    qkv: torch.Tensor  # [(H + 2*KVH) * hd, D]
    qkv_bias: torch.Tensor | None
    o: torch.Tensor  # [D, H * hd]
    post_norm: torch.Tensor  # [D]
    gate_up: torch.Tensor  # [2*I, D]
    down: torch.Tensor  # [D, I]


class LlamaForward:
    """Weights and forward pass; holds no per-request state (the KV cache is passed in)."""

    def __init__(self, hf_model: torch.nn.Module, device: torch.device, dtype: torch.dtype,
                 batch_invariant: bool = True) -> None:
        cfg = hf_model.config
        self.batch_invariant = batch_invariant
        self.config = cfg
        self.device, self.dtype = device, dtype
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.hidden_size = cfg.hidden_size
        self.vocab_size = cfg.vocab_size
        self.eps = cfg.rms_norm_eps
        self.num_layers = cfg.num_hidden_layers
        if getattr(cfg, "mlp_bias", False):
            raise ValueError("models with MLP biases are not supported")
        sd = {k: v.detach() for k, v in hf_model.state_dict().items()}

        def w(name: str) -> torch.Tensor:
            return sd[name].to(device=device, dtype=dtype).contiguous()

        self.embed = w("model.embed_tokens.weight")
        self.lm_head = self.embed if "lm_head.weight" not in sd or cfg.tie_word_embeddings else w("lm_head.weight")
        self.final_norm = w("model.norm.weight")
        self.layers: list[LayerWeights] = []
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            bias = None
            scale = self.head_dim ** -0.5  # folded into q: attention needs no separate scaling op
            if a + "q_proj.bias" in sd:
                bias = torch.cat([w(a + "q_proj.bias") * scale, w(a + "k_proj.bias"), w(a + "v_proj.bias")])
            self.layers.append(LayerWeights(
                input_norm=w(p + "input_layernorm.weight"),
                qkv=torch.cat([w(a + "q_proj.weight") * scale, w(a + "k_proj.weight"), w(a + "v_proj.weight")]),
                qkv_bias=bias,
                o=w(a + "o_proj.weight"),
                post_norm=w(p + "post_attention_layernorm.weight"),
                gate_up=torch.cat([w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight")]),
                down=w(p + "mlp.down_proj.weight"),
            ))
        # Reuse HF's rotary embedding so every rope variant (llama3, yarn, ...) of the config is honoured.
        self.rotary = hf_model.model.rotary_emb.to(device)
        self.head_ids: torch.Tensor | None = None  # a reduced output vocabulary: logit column j = token head_ids[j]
        self.kv_heads_budget = self.num_kv_heads  # KV heads the cache is sized for (the largest tensor shard's)
        self.reduce = _no_reduce  # completes row-parallel projections under tensor parallelism (an all-reduce)
        self.k_parts: dict[int, torch.Tensor] = {}  # weight data_ptr -> its pieces along the inputs (k_pieces)
        self.rows_invariant: bool | None = None  # None: not checked (see plan_row_invariance)
        self.plan_row_invariance()

    def plan_row_invariance(self) -> None:
        """Check that this machine's GEMMs give rows that do not depend on the block's row count, for every
        weight shape (gemm_invariance.py); split the inputs of those whose plain GEMM does not. Only bf16/fp16
        with batch_invariant are checked, on CPU or CUDA (an H200 held at every SmolLM2 shape, 0.7 s there):
        fp32 has its own row classes (docs/architecture.md). Call again after replacing weights (tensor
        sharding, a reduced vocabulary)."""
        self.k_parts, self.rows_invariant = {}, None
        if not self.batch_invariant or self.device.type not in ("cpu", "cuda") or self.dtype == torch.float32:
            return
        self.rows_invariant = True
        weights = [w for lw in self.layers for w in (lw.qkv, lw.o, lw.gate_up, lw.down)] + [self.lm_head]
        for w in weights:
            pieces = invariant_pieces(self.dtype, w.shape[1], w.shape[0], str(self.device))
            if pieces is None:
                self.rows_invariant = False
            elif pieces > 1:
                self.k_parts[w.data_ptr()] = k_pieces(w, pieces)

    def _mm(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """A block of <= 32 rows (SMALL_ROWS): split along the inputs where plan_row_invariance said so."""
        parts = self.k_parts.get(w.data_ptr())
        return F.linear(x, w, b) if parts is None else split_linear(x, parts, b)

    def set_output_vocab(self, ids: torch.Tensor) -> None:
        """Compute logits only for the tokens `ids` (a draft's reduced vocabulary, FR-Spec style)."""
        self.head_ids = ids
        self.lm_head = self.lm_head[ids].contiguous()
        self.plan_row_invariance()

    @classmethod
    def load(cls, folder: str | Path, device: torch.device, dtype: torch.dtype,
             batch_invariant: bool = True) -> tuple["LlamaForward", object]:
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        return cls(hf, device, dtype, batch_invariant), hf.config

    def _linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
                blocks: list[tuple[slice, int]] | None = None) -> torch.Tensor:
        """x @ w.T. With batch_invariant, row blocks whose GEMM shape does not depend on the rest of the
        batch (see AttentionMetadata.row_blocks); `blocks=None` means plain blocks of <= 32 rows."""
        n = x.shape[0]
        if not self.batch_invariant or n <= SMALL_ROWS:
            return self._mm(x, w, b)
        if blocks is None:
            return torch.cat([self._mm(c, w, b) for c in x.split(SMALL_ROWS)])
        outs = []
        for rows, pad in blocks:
            part = x[rows]
            if pad:  # a prefill segment, always at the same fixed M: plain GEMM rows hold there (no split)
                y = F.linear(F.pad(part, (0, 0, 0, pad - part.shape[0])) if part.shape[0] < pad else part, w, b)
                y = y[: part.shape[0]]
            else:
                y = self._mm(part, w, b)
            outs.append(y)
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.kv_heads_budget * self.head_dim * torch.tensor([], dtype=self.dtype).element_size()

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and a sign-folded sin [T, 1, hd], so rotate_half(x) * sin == x.roll(hd/2) * sin_signed."""
        cos, sin = self.rotary(self.embed[:1], positions[None])  # [1, T, hd]
        half = self.head_dim // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        return cos[0, :, None, :].to(self.dtype), sin[0, :, None, :].to(self.dtype)

    def _apply_rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(x * cos, x.roll(self.head_dim // 2, dims=-1), sin)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T]
        positions: torch.Tensor,  # [T]
        kv_cache: "KVCacheTensors",
        meta: AttentionMetadata,
        logits_indices: torch.Tensor,  # [N] rows of T whose logits are needed
        return_hidden: bool = False,
    ) -> torch.Tensor:  # [N, vocab]
        T = input_ids.shape[0]
        H, KVH, hd = self.num_heads, self.num_kv_heads, self.head_dim
        h = self.embed[input_ids]  # [T, D]
        cos, sin = self._rope(positions)
        for i, lw in enumerate(self.layers):
            x = self._rms(h, lw.input_norm)
            qkv = self._linear(x, lw.qkv, lw.qkv_bias, meta.row_blocks)
            qk = self._apply_rope(qkv[:, : (H + KVH) * hd].view(T, H + KVH, hd), cos, sin)  # q and k at once
            q, k, v = qk[:, :H], qk[:, H:], qkv[:, (H + KVH) * hd:]
            kv = kv_cache.layers[i]
            kv.index_copy_(2, meta.slot_mapping, torch.stack((k, v.view(T, KVH, hd))).transpose(1, 2))
            attn = paged_attention(q, kv, meta)  # [T, H, hd]
            h = h + self.reduce(self._linear(attn.reshape(T, H * hd), lw.o, None, meta.row_blocks))
            x = self._rms(h, lw.post_norm)
            gate, up = self._linear(x, lw.gate_up, None, meta.row_blocks).chunk(2, dim=-1)
            h = h + self.reduce(self._linear(F.silu(gate) * up, lw.down, None, meta.row_blocks))
        h = self._rms(h[logits_indices], self.final_norm)
        if return_hidden:
            return h
        return self._linear(h, self.lm_head).float()


@dataclass(slots=True)
class KVCacheTensors:
    """Per-layer KV storage, head-major: [2 (K, V), KVH, slot, hd], slot = block * block_size + offset.
    K and V share one tensor so that one gather and one scatter serve both."""

    layers: list[torch.Tensor]  # L x [2, KVH, num_blocks * block_size, hd]

    @classmethod
    def allocate(cls, model: LlamaForward, num_blocks: int, block_size: int) -> "KVCacheTensors":
        shape = (2, model.num_kv_heads, num_blocks * block_size, model.head_dim)
        return cls([torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in range(model.num_layers)])
