"""The start-up check of GEMM row invariance and the split GEMM it falls back to, on this machine's kernels."""
import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from workers.gemm_invariance import invariant_pieces, k_pieces, split_linear
from workers.llama import LlamaForward


def test_split_linear_is_the_same_product_with_bias():
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(5, 300, generator=g), torch.randn(7, 300, generator=g), torch.randn(7, generator=g)
    stacked = k_pieces(w, 3)  # 3 pieces of 100 inputs
    assert stacked.shape == (3, 100, 7) and torch.equal(stacked[1], w[:, 100:200].T)
    assert torch.allclose(split_linear(x, stacked, b), F.linear(x, w, b), atol=1e-4)


@pytest.mark.parametrize("in_features", [576, 1536])  # SmolLM2's hidden size and its MLP's inner size
def test_the_chosen_chunk_gives_rows_that_do_not_depend_on_the_row_count(in_features):
    """Whatever the check chose for this CPU holds on data it never saw, at every block size up to 32."""
    pieces = invariant_pieces(torch.bfloat16, in_features, 576)
    if pieces is None:
        pytest.skip(f"no row-invariant bf16 GEMM with {in_features} inputs on this CPU")
    g = torch.Generator().manual_seed(7)
    w = torch.randn(576, in_features, generator=g).bfloat16()
    x = torch.randn(32, in_features, generator=g).bfloat16()
    stacked = k_pieces(w, pieces)
    linear = (lambda a: F.linear(a, w)) if pieces == 1 else (lambda a: split_linear(a, stacked))
    alone = torch.cat([linear(x[r:r + 1]) for r in range(32)])
    for m in range(2, 33):
        assert torch.equal(linear(x[:m]), alone[:m]), f"rows differ at M={m} in {pieces} pieces"


def _tiny(intermediate: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=intermediate, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def test_the_model_splits_exactly_the_weights_whose_plain_gemm_fails():
    model = LlamaForward(_tiny(1536), torch.device("cpu"), torch.bfloat16)
    weights = [w for lw in model.layers for w in (lw.qkv, lw.o, lw.gate_up, lw.down)] + [model.lm_head]
    pieces = {w.data_ptr(): invariant_pieces(torch.bfloat16, w.shape[1], w.shape[0]) for w in weights}
    assert model.rows_invariant is (None not in pieces.values())
    assert set(model.k_parts) == {ptr for ptr, p in pieces.items() if p is not None and p > 1}
    by_ptr = {w.data_ptr(): w for w in weights}
    for ptr, stacked in model.k_parts.items():
        w = by_ptr[ptr]
        assert stacked.shape == (stacked.shape[0], w.shape[1] // stacked.shape[0], w.shape[0])
        assert torch.equal(stacked[0], w[:, : stacked.shape[1]].T) and stacked.is_contiguous()


def test_fp32_and_the_plain_path_are_not_checked():
    assert LlamaForward(_tiny(128), torch.device("cpu"), torch.float32).rows_invariant is None
    plain = LlamaForward(_tiny(1536), torch.device("cpu"), torch.bfloat16, batch_invariant=False)
    assert plain.rows_invariant is None and plain.k_parts == {}


def test_a_reduced_vocabulary_replans_the_head():
    model = LlamaForward(_tiny(128), torch.device("cpu"), torch.bfloat16)
    old_head = model.lm_head.data_ptr()
    model.set_output_vocab(torch.arange(0, 256, 2))
    assert model.lm_head.shape[0] == 128 and old_head not in model.k_parts
    assert model.rows_invariant is not None
