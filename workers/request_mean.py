"""The mean estimate per draft position that the depth plan reads, balanced over requests.

Each of the last PRIOR_REQUESTS requests that drafted keeps its own mean estimate per position, and the plan reads
their average, each request weighing its drafted positions there up to PRIOR_CAP. A running mean over drafted
positions instead (PRIOR_RATE, before 2026-12-06) stood for whichever requests drafted last: when the plan
drafted nothing, only probes moved it, and a probe takes the request with the least to catch up on, the one
probed last. At the trained draft, ShareGPT c=16, 7 of a timed window's 8 probes drafted the same request and the
mean stayed at 0.21-0.25 (set by the warm-up's last request) where the batch's drafts averaged 0.32 (accepted
0.345), so the plan drafted nothing while fixed k=1 ran 1.04x of no speculation (docs/performance.md,
"2026-12-06, second session").
"""
from __future__ import annotations

import torch

PRIOR_REQUESTS = 16  # requests the mean remembers, the least recently drafted one dropped first
PRIOR_CAP = 8  # the most positions one request weighs per position: a single probe weighs 1/8 of that


class RequestBalancedMean:
    def __init__(self, k: int, requests: int = PRIOR_REQUESTS) -> None:
        self.sums = torch.zeros(requests, k)  # [R, K] each remembered request's summed estimates
        self.counts = torch.zeros(requests, k)  # [R, K] and its drafted positions
        self.rows: dict[str, int] = {}  # req_id -> its row, least recently drafted first

    def add(self, req_ids: list[str], probs: torch.Tensor, drafted: torch.Tensor,
            fallback: torch.Tensor) -> torch.Tensor:  # [K]
        """Fold in one step's estimates `probs` [B, K] where `drafted` [B, K] (0/1) of the requests `req_ids`, and
        return the mean per position, `fallback` [K] where no remembered request drafted that deep."""
        idx = torch.tensor([self._row(r) for r in req_ids])
        self.sums.index_add_(0, idx, probs * drafted)
        self.counts.index_add_(0, idx, drafted)
        weight = self.counts.clamp(max=PRIOR_CAP)  # [R, K]
        total = weight.sum(0)  # [K]
        mean = (weight * self.sums / self.counts.clamp_min(1)).sum(0) / total.clamp_min(1)
        return torch.where(total > 0, mean, fallback)

    def _row(self, req_id: str) -> int:
        row = self.rows.pop(req_id, None)
        if row is None:
            if len(self.rows) < self.sums.shape[0]:
                row = len(self.rows)
            else:  # forget the least recently drafted request
                row = self.rows.pop(next(iter(self.rows)))
            self.sums[row] = 0.0
            self.counts[row] = 0.0
        self.rows[req_id] = row  # now the most recently drafted
        return row
