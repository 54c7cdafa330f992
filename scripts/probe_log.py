"""Diagnostic for the GPU check (gpu_check.py imports it when BENCH_PROBE_LOG=1): each probe as priced and as
run, what reset the probe share, and the drafter's calls split into its forwards (synchronised) and the rest."""
from __future__ import annotations

import time

import torch

from workers import adaptive, probes
from workers.proposers import draft_model

LOG: dict = {"probes": [], "resets": 0, "draft_calls": []}


def install() -> dict:
    S = probes.ProbeSchedule
    choose, reset, observe = S.choose, S.reset, adaptive.AdaptiveVerifier.observe_step

    def choose_probe(self, drafts, n, extra, step, *a):
        b = choose(self, drafts, n, extra, step, *a)
        if b is not None:
            LOG["probes"].append({"B": len(n), "rows": extra[b] + 1, "priced_s": self.priced,
                                  "scale": round(self.scale, 3), "cost_s": self.cost_s, "share": self.share * 2})
        return b

    def reset_probes(self):
        LOG["resets"] += 1
        reset(self)

    def observe_step(self, wall_s, forward_s, draft_s, *a, **kw):
        if self.probe.priced is not None and LOG["probes"]:
            LOG["probes"][-1].update(draft_s=draft_s, wall_s=wall_s, forward_s=forward_s)
        return observe(self, wall_s, forward_s, draft_s, *a, **kw)

    S.choose, S.reset, adaptive.AdaptiveVerifier.observe_step = choose_probe, reset_probes, observe_step
    P = draft_model.DraftModelProposer
    propose = P.propose

    def timed_propose(self, batch):
        t0, runs, run = time.perf_counter(), [], self.runner.run

        def timed_run(chunks):
            t = time.perf_counter()
            out = run(chunks)
            if out.is_cuda:
                torch.cuda.synchronize(out.device)
            runs.append([round(time.perf_counter() - t, 5), sum(len(c.token_ids) for c in chunks), len(chunks)])
            return out

        self.runner.run = timed_run
        try:
            out = propose(self, batch)
        finally:
            del self.runner.run
        LOG["draft_calls"].append({"s": round(time.perf_counter() - t0, 5), "runs": runs,
                                   "active": sum(1 for d in batch if d.max_drafts > 0)})
        return out

    P.propose = timed_propose
    return LOG


def take() -> dict:
    """The log so far, emptied."""
    out = {k: v for k, v in LOG.items()}
    LOG.update(probes=[], resets=0, draft_calls=[])
    return out
