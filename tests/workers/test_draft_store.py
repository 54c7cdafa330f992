"""Shipped reduced-vocabulary drafts: loading (layers + norm + head ids, embedding from the target) and use."""
import json

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.draft_store import load_draft
from workers.engine import LLMEngine
from workers.train_draft import _loss, choose_vocab

HEAD = [0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15]  # token 4 and 8 are outside the draft's vocabulary


def _ship_first_layer(target_dir, out):
    """A 1-layer shipped draft made of the target's first layer, the way train_draft.save writes one."""
    hf = AutoModelForCausalLM.from_pretrained(str(target_dir))
    state = {k[len("model."):]: v.to(torch.bfloat16) for k, v in hf.state_dict().items()
             if k.startswith("model.layers.0.") or k == "model.norm.weight"}
    out.mkdir()
    save_file(state, str(out / "draft.safetensors"))
    (out / "head_ids.json").write_text(json.dumps(HEAD))
    (out / "config.json").write_text(json.dumps({"num_hidden_layers": 1}))
    return out


def test_shipped_draft_loads_with_the_targets_embedding_and_a_reduced_head(tiny_target, tmp_path):
    asset = _ship_first_layer(tiny_target, tmp_path / "draft")
    draft = load_draft(str(asset), tiny_target, torch.device("cpu"), torch.float32, True)
    assert draft.num_layers == 1 and draft.lm_head.shape[0] == len(HEAD) and draft.vocab_size == 16
    assert draft.head_ids.tolist() == HEAD


def test_engine_with_a_reduced_vocab_draft_is_lossless(tiny_target, tmp_path):
    asset = _ship_first_layer(tiny_target, tmp_path / "draft")
    prompts = [[1, 5, 6, 7, 5, 6, 7, 5, 6], [3, 4], [9, 10, 11, 12, 13] * 4]
    sp = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    base = [r.output_ids for r in LLMEngine(EngineConfig(model=str(tiny_target))).generate(prompts, sp)]
    eng = LLMEngine(EngineConfig(model=str(tiny_target), spec=SpecConfig(method="draft", k=3, draft_model=str(asset))))
    assert [r.output_ids for r in eng.generate(prompts, sp)] == base
    assert eng.spec_stats.num_drafts > 0
    # proposals are target token ids, never ids of the reduced head
    sampled = eng.generate(prompts, SamplingParams(max_tokens=24, temperature=1.0, seed=3, ignore_eos=True))
    assert all(0 <= t < 16 for r in sampled for t in r.output_ids)


def test_training_pieces_vocab_and_loss():
    top_idx = torch.tensor([[[3, 1], [3, 2], [5, 3]]], dtype=torch.int32)  # [1 window, 3 positions, top-2]
    top_logp = torch.log(torch.tensor([[[0.9, 0.1], [0.6, 0.4], [0.5, 0.5]]])).half()
    assert choose_vocab({"top_idx": top_idx, "top_logp": top_logp}, 2).tolist() == [3, 5]
    idx = torch.tensor([[0, -1]])
    p = torch.tensor([[0.7, 0.3]])
    good, bad = torch.tensor([[5.0, 0.0]]), torch.tensor([[0.0, 5.0]])
    assert _loss(good, idx, p) < _loss(bad, idx, p)  # mass outside the draft vocabulary is ignored
