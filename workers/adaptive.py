"""Adaptive verification in the engine (the local policy): estimators -> survival -> budget policy -> trim.

Each step, after the proposer drafted: the estimator turns the drafts' features into per-position acceptance
probabilities, the budget policy picks how many positions of which requests to verify from the warm-up cost
table, and the drafts are trimmed to those prefixes. After verification the outcomes train the estimator.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from workers.budget import choose_verify_lengths, survival
from workers.cost_table import CostTable, hardware_key, load_or_measure
from workers.estimators import LogisticEstimator, NgramEstimator
from workers.model_runner import StepChunk
from workers.model_store import cache_dir

if TYPE_CHECKING:
    from workers.engine import LLMEngine
    from workers.proposers.base import Proposal
    from workers.scheduler import ScheduledStep

log = logging.getLogger(__name__)
PROFILE_CONTEXT = 256  # context length of the warm-up steps


class AdaptiveVerifier:
    def __init__(self, cost: CostTable, estimator: LogisticEstimator | NgramEstimator) -> None:
        self.cost, self.estimator = cost, estimator
        self.verified_positions = 0
        self.offered_positions = 0

    @classmethod
    def build(cls, engine: "LLMEngine") -> "AdaptiveVerifier":
        cfg = engine.config
        key = hardware_key(cfg.model, str(engine.model.dtype), str(engine.model.device))
        path = cache_dir() / "cost_tables" / f"{key}.json"
        log.info("cost table: %s (measuring if absent, <= %.0f s)", path, cfg.spec.cost_table_budget_s)
        cost = load_or_measure(path, lambda r, n: _profile_step(engine, r, n), budget_s=cfg.spec.cost_table_budget_s,
                               requests=tuple(r for r in (1, 2, 4, 8, 16, 32, 64) if r <= cfg.max_num_seqs))
        k = engine.k
        est = NgramEstimator(k) if cfg.spec.method == "ngram" else LogisticEstimator(k, 3)
        return cls(cost, est)

    def trim(self, proposal: "Proposal", plan: "ScheduledStep") -> None:
        if proposal.features is None or not plan.decodes:
            return
        n = proposal.num_drafts
        scores = survival(self.estimator.predict(proposal.features), n)
        prefill_tokens = sum(c for _, c in plan.prefills)
        lengths = choose_verify_lengths(scores, self.cost, len(plan.decodes) + len(plan.prefills),
                                        len(plan.decodes) + prefill_tokens, float(len(plan.decodes)))
        self.offered_positions += int(n.sum())
        proposal.num_drafts = torch.minimum(n, lengths)
        self.verified_positions += int(proposal.num_drafts.sum())

    def learn(self, proposal: "Proposal", verify: list[tuple[int, object, int, int]], accepted: list[int]) -> None:
        rows = [(b, n, a) for (b, _, n, _), a in zip(verify, accepted) if b >= 0]
        if not rows or proposal.features is None:
            return
        idx = torch.tensor([b for b, _, _ in rows])
        self.estimator.observe(proposal.features[idx], torch.tensor([n for _, n, _ in rows]),
                               torch.tensor([a for _, _, a in rows]))


def _profile_step(engine: "LLMEngine", requests: int, tokens: int) -> None:
    """One target step of `requests` sequences at PROFILE_CONTEXT, `tokens` positions in all."""
    runner, bs = engine.runner, engine.runner.block_size
    per = tokens // requests
    blocks = runner.pool.allocate(requests * -(-(PROFILE_CONTEXT + per) // bs))
    try:
        nb = len(blocks) // requests
        chunks = [StepChunk([7] * per, PROFILE_CONTEXT, blocks[i * nb:(i + 1) * nb], per) for i in range(requests)]
        runner.run(chunks)
    finally:
        runner.pool.free(blocks)
