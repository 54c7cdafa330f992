"""Catch-ups: the rows a draft model first feeds for a request before it drafts (every token since its last
draft), and their price.

A catch-up is paid once: after it, the request's draft feeds only what the last step accepted. The depth plan
prices it spread over the steps the request has left (its remaining max_tokens over the tokens a drafting step
emits), at most CATCH_UP_HORIZON. Charged whole to one step, a request that had not drafted for a while
(catch-ups of 9-110 ms at c=2 against ~12 ms for a draft iteration) was never drafted again, and its catch-up
only grew: at ShareGPT c=2, 0 of 45 plans drafted where 39 would have without the catch-up, and fixed k=2 ran
5-8% above no speculation (ad-hoc plan log, not committed). The cap hedges against requests that end early
(EOS) or stop drafting as the load rises, which loses what was paid.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from workers.cost_table import CostTable
from workers.warmup_tables import CATCH_UP_ROWS

if TYPE_CHECKING:
    from workers.request import Request

CATCH_UP_HORIZON = 16


class CatchUpLedger:
    """Where each request's draft stands, the catch-up rows this step's plan noted, and the drafter's price of
    a catch-up row (its warm-up table's catch-up column, scaled online by `observe`)."""

    def __init__(self) -> None:
        self.drafted_at: dict[str, tuple[int, int]] = {}  # req_id -> (its tokens, depth) at its last draft
        self.planned: dict[str, int] = {}  # req_id -> rows its next draft first feeds (this step's plan)
        self.step_rows = 0  # extra catch-up rows of the requests that drafted this step
        self.scale = 1.0  # observed / warm-up cost of catch-up rows

    def rows(self, req: "Request") -> int:
        """Rows a draft model first feeds for `req` (it recomputes >= 1): every token since its last draft,
        less the drafts it had already fed that were accepted (assumed all; exact after one draft step)."""
        now = len(req.tokens)
        if req.req_id not in self.drafted_at:
            return max(1, now)  # the whole prompt (and any output so far)
        then, depth = self.drafted_at[req.req_id]
        grown = now - then
        return max(1, grown - min(grown - 1, depth - 1))

    def note(self, reqs: list) -> list[int]:
        """Each request's catch-up rows beyond the usual 1, noted for this step's plan (`drafted`)."""
        extra = [self.rows(r) - 1 for r in reqs]
        self.planned, self.step_rows = {r.req_id: e for r, e in zip(reqs, extra)}, 0
        return extra

    def clear(self) -> None:
        """This step's plan notes no catch-up (an idle plan held without computing)."""
        self.planned, self.step_rows = {}, 0

    def drafted(self, decodes: list, depths: list[int]) -> None:
        """The step drafted `depths` for the requests of `decodes`: they paid their noted catch-ups."""
        self.step_rows = 0
        for (req, _), depth in zip(decodes, depths):
            if depth > 0:
                self.step_rows += self.planned.get(req.req_id, 0)
                self.drafted_at[req.req_id] = (len(req.tokens), depth)

    def forget(self, req_id: str) -> None:
        self.drafted_at.pop(req_id, None)

    def row_s(self, draft_cost: CostTable, requests: int) -> float:
        """The draft's seconds per catch-up row at a batch of `requests`."""
        return self.scale * draft_cost.row_slope(requests, 1 + CATCH_UP_ROWS)

    def observe(self, draft_cost: CostTable, draft_s: float, requests: int, depth: int) -> None:
        """Scale what this step's draft prediction read by observed / predicted: the iterations' cell, and the
        catch-up rate where the catch-up was a sizeable part of it. This runs every drafting step. Refreshing 8
        steps at a time, as the target's table is, saved ~0.14 ms a step at c=1 (each refresh drops the cached
        curves), but the plan then read stale drafting prices and the engine ran ~1% slower under load
        (docs/performance.md, "eighteenth session")."""
        iteration = draft_cost.lookup(requests, requests)
        catch_up = self.row_s(draft_cost, requests) * self.step_rows
        ratio = draft_s / max(depth * iteration + catch_up, 1e-12)
        draft_cost.observe(requests, requests, ratio * iteration)
        if catch_up > 0.2 * depth * iteration:
            self.scale *= 1.0 + draft_cost.ema * (ratio - 1.0)

    @staticmethod
    def horizon(reqs: list, scores: torch.Tensor) -> torch.Tensor:  # [B]
        """Steps over which the depth plan spreads each request's catch-up (CATCH_UP_HORIZON): its remaining
        tokens over what a step drafting all its positions would emit (1 + their survival)."""
        left = torch.tensor([max(r.max_tokens - r.num_output, 1) for r in reqs], dtype=scores.dtype)
        return (left / (1.0 + scores.sum(1))).clamp(1.0, CATCH_UP_HORIZON)
