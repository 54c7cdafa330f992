"""Loading draft models: any HF folder with the target's tokenizer, or a shipped reduced-vocabulary draft.

A shipped draft (`workers/assets/<name>/`, made by `workers/train_draft.py`) stores only what it trained:
a few decoder layers and the final norm (bf16), plus `head_ids.json`, the target token ids its output layer
covers. The embedding and the output rows are the target's own (tied) embedding, taken at load time, so the
draft costs ~14 MB on disk and its output layer is 8k words instead of 49k.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from workers.llama import LlamaForward
from workers.model_store import ModelNotFoundError, resolve_model

ASSETS = Path(__file__).parent / "assets"
DEFAULT_DRAFT = "smollm2-135m-draft"


def resolve_draft(name_or_path: str | None) -> Path:
    if name_or_path is None or name_or_path == DEFAULT_DRAFT:
        folder = ASSETS / DEFAULT_DRAFT
        if not (folder / "draft.safetensors").exists():
            raise ModelNotFoundError(f"the shipped draft is missing from {folder}: train it with "
                                     "`python -m workers.train_draft`")
        return folder
    if (ASSETS / str(name_or_path) / "draft.safetensors").exists():
        return ASSETS / str(name_or_path)
    return resolve_model(name_or_path)


def load_draft(name_or_path: str | None, target_folder: Path, device: torch.device, dtype: torch.dtype,
               batch_invariant: bool) -> LlamaForward:
    folder = resolve_draft(name_or_path)
    if not (folder / "draft.safetensors").exists():
        draft, _ = LlamaForward.load(folder, device, dtype, batch_invariant)
        return draft
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoConfig, LlamaForCausalLM

    cfg = AutoConfig.from_pretrained(str(target_folder))
    cfg.num_hidden_layers = int(json.loads((folder / "config.json").read_text())["num_hidden_layers"])
    with torch.device("meta"):
        hf = LlamaForCausalLM(cfg)
    state = {f"model.{k}": v for k, v in load_file(str(folder / "draft.safetensors")).items()}
    with safe_open(str(_weights_file(target_folder)), "pt") as f:
        state["model.embed_tokens.weight"] = f.get_tensor("model.embed_tokens.weight")
    hf.load_state_dict(state, strict=False, assign=True)
    hf.model.rotary_emb = type(hf.model.rotary_emb)(cfg)  # buffers were on the meta device
    draft = LlamaForward(hf, device, dtype, batch_invariant)
    ids = torch.tensor(json.loads((folder / "head_ids.json").read_text()), dtype=torch.long, device=device)
    draft.set_output_vocab(ids)
    return draft


def _weights_file(folder: Path) -> Path:
    files = sorted(folder.glob("*.safetensors"))
    if len(files) != 1:
        raise ModelNotFoundError(f"expected one safetensors file in {folder}, found {len(files)}")
    return files[0]
