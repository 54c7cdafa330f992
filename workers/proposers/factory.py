"""Builds the proposer a SpecConfig names (used by the engine, and by the cluster's drafter actors)."""
from __future__ import annotations

import torch

from workers.config import EngineConfig
from workers.model_runner import ModelRunner
from workers.model_store import resolve_model
from workers.proposers.base import Proposer


def build_proposer(config: EngineConfig, device: torch.device, dtype: torch.dtype,
                   target_vocab: int | None = None) -> Proposer | None:
    """`target_vocab` default: read from the target's config (a drafter process does not load the target)."""
    spec = config.spec
    if spec.method == "ngram":
        from workers.proposers.ngram import NgramProposer

        return NgramProposer(spec.k, spec.ngram_min, spec.ngram_max)
    if spec.method == "draft":
        from workers.draft_store import load_draft
        from workers.proposers.draft_model import DraftModelProposer

        target = resolve_model(config.model)
        draft = load_draft(spec.draft_model, target, device, dtype, config.batch_invariant)
        if target_vocab is None:
            from transformers import AutoConfig

            target_vocab = AutoConfig.from_pretrained(str(target)).vocab_size
        if draft.vocab_size != target_vocab:
            raise ValueError(f"draft vocabulary {draft.vocab_size} != target vocabulary {target_vocab}")
        kv = int(config.kv_cache_memory_gb * 2**30 // 4)
        return DraftModelProposer(ModelRunner(draft, kv, config.block_size, False), spec.k, spec.draft_top_k)
    return None
