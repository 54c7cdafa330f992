"""Shared fixtures: tiny random Llama models (fast, exact mechanics) and the embedded default (real)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def make_tiny_llama(folder: Path, seed: int, vocab: int = 16, layers: int = 2, hidden: int = 64,
                    max_pos: int = 4096) -> Path:
    """A random Llama with the default model's tokenizer (ids < vocab decode to special tokens)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from workers.model_store import resolve_model

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper logits than the default init, so distributions are not near-uniform
        model.model.embed_tokens.weight.mul_(3)
    model.save_pretrained(folder)
    # The GPU machine has no default model, only its tokenizer files (SPECFLEET_TOKENIZER_DIR, see gpu_check)
    tok_dir = os.environ.get("SPECFLEET_TOKENIZER_DIR") or str(resolve_model(None))
    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_target"), seed=1)


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Deliberately different from tiny_target (another seed, one layer)."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_draft"), seed=2, layers=1)


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    from workers.model_store import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="session")
def tiny_full_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama over the default model's whole vocabulary: real text and chat templates work."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_full_vocab"), seed=3, vocab=49152, hidden=64)


@pytest.fixture(scope="session")
def free_port():
    """A function returning a free TCP port on 127.0.0.1 (for servers started by tests)."""
    import socket

    def pick() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    return pick


@pytest.fixture(scope="session")
def tiny_full_vocab_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A draft for tiny_full_vocab (same vocabulary, another seed, one layer)."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_full_vocab_draft"), seed=4, vocab=49152, hidden=64, layers=1)


@pytest.fixture
def background_stream():
    """start(url, body, headers=None) -> (thread, first_chunk, got): streams a completion in a thread and
    records its usage chunk, finish reason and any error event in `got` (SIGTERM / drain tests)."""
    import json
    import threading

    import httpx

    def start(url: str, body: dict, headers: dict | None = None):
        got: dict = {}
        first = threading.Event()

        def run() -> None:
            with httpx.stream("POST", url + "/v1/completions", json=body, headers=headers or {}, timeout=120) as r:
                for line in r.iter_lines():
                    first.set()
                    if line.startswith("data: {"):
                        data = json.loads(line[6:])
                        if data.get("usage"):
                            got["usage"] = data["usage"]
                        elif data.get("error"):
                            got["error"] = data["error"]
                        elif data["choices"][0].get("finish_reason"):
                            got["finish"] = data["choices"][0]["finish_reason"]

        t = threading.Thread(target=run)
        t.start()
        return t, first, got

    return start
