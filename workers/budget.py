"""The budget policy (pure): which draft positions the target verifies this step.

Every candidate position of every speculating request is scored by its survival probability (the product
of the request's per-position acceptance estimates up to it, so scores never increase along a request).
All positions are ranked together; taking the N best gives expected tokens = (speculating requests, each
emits >= 1 token) + sum of the N scores, and expected time = cost table at (requests, step tokens + N),
plus the table's ragged-step cost when the requests would not all verify the same count, and its cost per
query-length group beyond the two the ragged cells time (`CostTable.group_s`).
The N maximising tokens per second wins; each request verifies the prefix of its drafts that was taken.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workers.cost_table import CostTable


def survival(accept_prob: torch.Tensor, num_drafts: torch.Tensor) -> torch.Tensor:
    """accept_prob [B, K] per-position estimates -> survival [B, K] (0 beyond each request's drafts)."""
    K = accept_prob.shape[1]
    s = accept_prob.clamp(0.0, 1.0).cumprod(dim=1)
    return s * (torch.arange(K)[None, :] < num_drafts[:, None])


def _ranked(flat: np.ndarray, K: int) -> np.ndarray:
    """Indices of the positive scores of a flattened [B, K], best first; ties go to earlier positions, so
    any top-N is a prefix of every request's drafts."""
    key = flat.astype(np.float64) - (np.arange(len(flat)) % K) * 1e-9
    return np.argsort(-key, kind="stable")[: int((flat > 0).sum())]


@dataclass(slots=True)
class VerifyPlan:
    lengths: torch.Tensor  # [B] verify (or draft) length per request
    seconds: float  # the cost model's step time for that choice, before any calibration scale


def choose_verify_lengths(*args, **kwargs) -> torch.Tensor:  # [B]
    """`plan_verify_lengths`, the lengths alone."""
    return plan_verify_lengths(*args, **kwargs).lengths


def plan_verify_lengths(
    scores: torch.Tensor,  # [B, K] survival, non-increasing along K, 0 where no draft
    cost: CostTable,
    num_requests: int,  # requests in the step (speculating or not)
    base_tokens: int,  # tokens the step computes anyway: 1 per decoding request + prefill chunk tokens
    base_emitted: float,  # tokens emitted without any draft (1 per decoding request)
    fixed_s: float = 0.0,  # per-step time outside the target's forward (host work, sampling)
    draft_step_s: float = 0.0,  # seconds per draft iteration: > 0 when choosing how deep to DRAFT
    request_s: torch.Tensor | None = None,  # [B] seconds a request adds if it drafts at all (its catch-up)
    prefill_tokens: int = 0,  # tokens of prefill chunks in the step (included in base_tokens)
    draft_host_s: float = 0.0,  # with draft_step_s: host seconds a step adds if anyone drafts
    plain_scale: float = 1.0,  # observed / predicted time of steps that take no position
    spec_scale: float = 1.0,  # the same for steps that take some
    decode_rows_floor: bool = False,  # rows on the step's token curve cost at least what they do as decode rows
    mixed_ragged: bool = True,  # a mixed step's verified rows pay the ragged cost too (False: as before 2026-12-05)
) -> VerifyPlan:
    """With `prefill_tokens` > 0 (a mixed step), verified rows are priced as rows of the B decoding requests
    alone (their marginal on the table's decode curve), plus the ragged cost of B requests as in a pure decode
    step: the chunks run as their own GEMM blocks, but the decoding requests' attention still splits by query
    length. Measured (AMD EPYC, bf16, context 200, medians of 25-41 steps; docs/performance.md, "A verified
    row beside a prefill chunk"): at 31 decoding requests one request verifying 1 draft added 5-9 ms to steps
    with a 24-150-token chunk (7-8 ms without a chunk), where the table prices the row at 0 (it fills the
    32-row block): at ShareGPT c=32, where most steps prefill beside ~31 decoding requests, one verified row
    read as free while it cost about two tokens' time at the decode rate (~3-4 ms a token). (An earlier
    measurement at 16 requests with a 256-token chunk read no ragged cost, within its noise.)

    The depth plan of such a step reads its rows on the step's token curve, as drafting there is not free
    (see docs/architecture.md, "A step that also prefills"), with `decode_rows_floor` at no less than their
    price as decode rows: on the curve alone, the rows that filled the chunk's last 32-row block were free, and
    at ShareGPT c=32 the plan drafted ~20 requests in such steps, of which the verify choice kept 1-2 (at 31
    decoding requests a second verified row opens a block).

    The group cost (`cost.group_s`) is read by the verify choice only: the depth plan's search is [limits, caps,
    positions] wide, and the verify choice that follows it prices the groups of whatever was drafted.

    With `draft_step_s`, the same choice prices drafting too: taking positions up to depth d costs d
    draft iterations (the drafter runs one batched iteration per position). The best set is then not always
    a prefix of the survival ranking (one confident request's 6th position makes everyone pay 6 iterations),
    so the ranking is also searched under every depth cap d = 1..K and the best cap wins.

    `draft_host_s` is what a drafting step costs the host beyond the drafter and the forward (features,
    the estimates, the trim, learning from the outcomes, the sampler's verify path): 1.7-1.8 ms of a ~70 ms
    step for the trained draft at repetitive c=2, which the plan had priced at nothing.

    With `request_s`, a request's first position also pays its own fixed cost (a draft model first catches
    up on every token since the request's last draft: its whole prompt the first time; the depth plan passes
    it spread over the steps the request has left, workers/catch_up.py CATCH_UP_HORIZON). A confident request
    with a long catch-up would then block the cheap ones ranked after it, so the search also runs without
    the requests whose catch-up is above each quartile of the batch's, and the best of all wins.

    The two scales are the caller's calibration of this time model against the steps it chose (see
    workers/plan_calibration.py); the plan returned reports its unscaled time."""
    B, K = scores.shape
    if B == 0 or K == 0:
        return VerifyPlan(torch.zeros(B, dtype=torch.long), 0.0)
    if B == 1 and draft_step_s == 0 and not prefill_tokens and not decode_rows_floor:
        return _one_request(scores[0].tolist(), cost, num_requests, base_tokens, base_emitted, fixed_s,
                            plain_scale, spec_scale)
    # numpy inside: the arrays are tiny, and each torch op costs several microseconds more (the policy ran
    # ~1 ms per step at c=2, 2% of a 50 ms step)
    flat = scores.detach().cpu().numpy().astype(np.float64).ravel()
    order = _ranked(flat, K)  # [n] every candidate position, best first
    n = len(order)
    step_s = step_seconds(cost, num_requests, base_tokens, B, n, fixed_s, prefill_tokens, decode_rows_floor)
    if draft_step_s == 0 and request_s is None:  # the trim's call: `_verify_choice`
        return _verify_choice(flat, order, K, B, step_s, cost, num_requests, prefill_tokens, mixed_ragged,
                              base_emitted, plain_scale, spec_scale)
    least_own = max(float(request_s.min()), 0.0) if request_s is not None else 0.0
    if n == 0 or (draft_step_s > 0 and drafting_cannot_pay(flat[order], step_s, base_emitted, plain_scale,
                                                           spec_scale, draft_step_s + draft_host_s, least_own)):
        return VerifyPlan(torch.zeros(B, dtype=torch.long), float(step_s[0]))
    # every (catch-up limit, depth cap) at once: which ranked positions each may take  [L, C, n]
    depth = order % K + 1
    caps = np.arange(1, K + 1) if draft_step_s > 0 else np.array([K])
    take = depth[None, None, :] <= caps[None, :, None]
    own = None
    if request_s is not None and bool((request_s > 0).any()):  # nothing to catch up on: as without it
        own = request_s.detach().cpu().double().numpy()[order // K]
        limits = np.array(_catch_up_limits(own))
        take = take & (own[None, :] <= limits[:, None])[:, None, :]
    count = take.cumsum(-1)  # positions taken up to and including each one
    tokens = base_emitted + (flat[order] * take).cumsum(-1)
    deepest = np.maximum.accumulate(depth * take, axis=-1)  # the longest verify among the positions taken
    # the verify choice only prices the groups (see the docstring)
    seconds = _step_with_drafts_s(step_s, count, deepest, depth, take, cost, K, B, num_requests, prefill_tokens,
                                  mixed_ragged, groups=draft_step_s == 0 and own is None)
    if draft_step_s > 0:  # every candidate here takes >= 1 position, so it pays the drafting host time
        seconds = seconds + draft_step_s * deepest + draft_host_s
    if own is not None:  # a request's first position (ranked before its others) pays its catch-up
        seconds = seconds + (own * (order % K == 0) * take).cumsum(-1)
    rate = np.where(take, tokens / np.maximum(seconds * spec_scale, 1e-12), -1.0).reshape(-1, n)  # [L * C, n]
    best = int(rate.argmax())
    if rate.flat[best] <= base_emitted / (step_s[0] * plain_scale):
        return VerifyPlan(torch.zeros(B, dtype=torch.long), float(step_s[0]))
    row, last = divmod(best, n)
    taken = order[: last + 1][take.reshape(-1, n)[row, : last + 1]]
    return VerifyPlan(torch.from_numpy(np.bincount(taken // K, minlength=B)).long(),
                      float(np.broadcast_to(seconds, take.shape).reshape(-1, n)[row, last]))


def _verify_choice(flat: np.ndarray, order: np.ndarray, K: int, B: int, step_s: np.ndarray, cost: CostTable,
                   num_requests: int, prefill_tokens: int, mixed_ragged: bool, base_emitted: float,
                   plain_scale: float, spec_scale: float) -> VerifyPlan:
    """The search below when nothing prices drafting (no depth caps, no catch-ups): every ranked position may
    be taken, so the candidates are the prefixes of the ranking and the search's [L, C, n] masks are all true.
    The same arithmetic (`_step_with_drafts_s`, the same plans to the bit: tested) without them: ~12 of its ~45
    array ops fewer, each ~5-10 us after a forward (the trim runs this every drafting step)."""
    n = len(order)
    if n == 0:
        return VerifyPlan(torch.zeros(B, dtype=torch.long), float(step_s[0]))
    depth = order % K + 1
    count = np.arange(1, n + 1)  # positions taken up to and including each one
    deepest = np.maximum.accumulate(depth)
    seconds = _step_with_drafts_s(step_s, count, deepest, depth, np.ones(n, dtype=bool), cost, K, B, num_requests,
                                  prefill_tokens, mixed_ragged, groups=True)
    rate = (base_emitted + flat[order].cumsum()) / np.maximum(seconds * spec_scale, 1e-12)
    last = int(rate.argmax())
    if rate[last] <= base_emitted / (step_s[0] * plain_scale):
        return VerifyPlan(torch.zeros(B, dtype=torch.long), float(step_s[0]))
    return VerifyPlan(torch.from_numpy(np.bincount(order[: last + 1] // K, minlength=B)).long(), float(seconds[last]))


def _step_with_drafts_s(step_s: np.ndarray, count: np.ndarray, deepest: np.ndarray, depth: np.ndarray,
                        take: np.ndarray, cost: CostTable, K: int, B: int, num_requests: int, prefill_tokens: int,
                        mixed_ragged: bool, groups: bool) -> np.ndarray:  # shaped as `count`
    """The step's seconds once the ranked positions of `take` up to each one are taken (`count` of them, the
    longest verify `deepest`; `depth` [n] each position's): its lookup, plus the ragged cost unless every request
    verifies the same count (see cost_table.py; never with one request), plus with `groups` each query-length
    group beyond the two the ragged cells time (two requests make at most those two)."""
    seconds = step_s[count]
    if cost.ragged and (mixed_ragged or not prefill_tokens) and B > 1:
        ragged = (count > 0) & (count < B * deepest)
        seconds = seconds + ragged * cost.ragged_array(B if prefill_tokens else num_requests, np.arange(K + 1))[deepest]
        if groups and cost.group_s > 0 and B > 2:
            seconds = seconds + cost.group_s * np.maximum(_query_lengths(depth, take, B) - 2, 0)
    return seconds


def _one_request(scores: list[float], cost: CostTable, num_requests: int, base_tokens: int, base_emitted: float,
                 fixed_s: float, plain_scale: float, spec_scale: float) -> VerifyPlan:
    """The verify choice of a pure decode step of one request (c=1: every drafting step there), as the search
    below makes it (a prefix, no ragged or group cost with one request, the first best length), in plain
    Python: the search's ~20 array ops took ~0.2 ms of a ~40 ms step, paid cold after the draft."""
    plain_s = cost.lookup(num_requests, base_tokens) + fixed_s
    best, best_rate, drafts = 0, base_emitted / (plain_s * plain_scale), 0.0
    for m, score in enumerate(scores, start=1):
        if score <= 0:
            break
        drafts += score  # summed apart from base_emitted, as the search's cumulative sum is
        rate = (base_emitted + drafts) / max((cost.lookup(num_requests, base_tokens + m) + fixed_s) * spec_scale,
                                             1e-12)
        if rate > best_rate:
            best, best_rate = m, rate
    seconds = cost.lookup(num_requests, base_tokens + best) + fixed_s
    return VerifyPlan(torch.tensor([best]), float(seconds))


def step_seconds(cost: CostTable, num_requests: int, base_tokens: int, B: int, n: int, fixed_s: float,
                 prefill_tokens: int = 0, decode_rows_floor: bool = False) -> np.ndarray:  # [n + 1]
    """The step's seconds with 0..n drafted rows taken (`plan_verify_lengths` says how rows are priced next to
    a prefill chunk and what `decode_rows_floor` means)."""
    if prefill_tokens > 0 or decode_rows_floor:  # the step without drafts, plus the drafts' rows as decode rows
        as_decode = (cost.lookup(num_requests, base_tokens) + fixed_s - cost.lookup(B, B)
                     + cost.lookup_range(B, B, n + 1))
        if prefill_tokens > 0:
            return as_decode
    step_s = cost.lookup_range(num_requests, base_tokens, n + 1) + fixed_s  # by positions taken
    return np.maximum(step_s, as_decode) if decode_rows_floor else step_s


def drafting_cannot_pay(ranked: np.ndarray, step_s: np.ndarray, base_emitted: float, plain_scale: float,
                        spec_scale: float, drafting_s: float, least_own: float) -> bool:
    """No choice of the depth plan's search beats not drafting, by a bound that costs a few array ops: m
    positions emit at most the m best scores (`ranked`, [n]), and cost at least the step with m more rows
    (`step_s`, [>= n + 1]), one draft iteration with its host time (`drafting_s`) and the smallest catch-up
    of a request that may draft (`least_own`). The search is 0.4 ms a call at c=32 (~7,800 candidate sets),
    and there nothing drafts: the bound decides those plans alone, with the same result."""
    n = len(ranked)
    rate = (base_emitted + np.cumsum(ranked)) / ((step_s[1:n + 1] + drafting_s + least_own) * spec_scale)
    return float(rate.max()) <= base_emitted / (step_s[0] * plain_scale)


def _query_lengths(depth: np.ndarray, take: np.ndarray, B: int) -> np.ndarray:
    """Distinct query lengths (1 + verified drafts) among the B requests once each ranked position of
    `take` [..., n] is taken (`depth` [n]: each position's depth; a request's positions come in order, so
    taking one moves it from depth - 1 to depth)."""
    n = len(depth)
    step = np.zeros((n, int(depth.max()) + 1), dtype=np.int32)  # [n, K + 1] change of the length histogram
    step[np.arange(n), depth] = 1
    step[np.arange(n), depth - 1] = -1
    hist = (take[..., None] * step).cumsum(-2)  # [..., n, K + 1]
    hist[..., 0] += B
    return (hist > 0).sum(-1)


def _catch_up_limits(catch_up: np.ndarray) -> list[float]:
    """Caps on the catch-up of requests allowed to draft (some have one): none, the catch-up quartiles, and 0."""
    v = np.sort(catch_up)
    quartiles = {float(v[round(q * (len(v) - 1))]) for q in (0.75, 0.5, 0.25)}
    return [float("inf")] + sorted(quartiles | {0.0}, reverse=True)


def allocate_capacity(scores: list[torch.Tensor], capacity: int,
                      costs: list[tuple[CostTable, int, int]] | None = None) -> list[torch.Tensor]:
    """Share `capacity` draft positions among several batches (e.g. replicas sharing one drafter GPU).
    scores: [B_r, K] survival each -> per-request caps [B_r].

    Without `costs`, the positions with the highest survival anywhere win. With each batch's (cost table,
    requests, step tokens), positions are ranked by what they add to the SUM of the batches' tokens per
    second: a position on a batch whose step is already compute-bound is worth less than a slightly less
    likely one on a memory-bound batch, where verifying it is nearly free. Each batch's marginal gains are
    made non-increasing (running minimum), so the positions taken are a prefix of its own ranking."""
    if not scores:
        return []
    K = max(s.shape[1] for s in scores)
    orders, keys = [], []
    for i, s in enumerate(scores):
        s = torch.nn.functional.pad(s, (0, K - s.shape[1]))
        flat = s.flatten()
        order = torch.from_numpy(_ranked(flat.detach().cpu().numpy(), K))
        if costs is None:
            gain = flat[order]
        else:
            table, requests, base = costs[i]
            expected = requests + torch.cat([torch.zeros(1), flat[order].cumsum(0)])
            rate = expected / table.lookup_many(requests, base + torch.arange(len(order) + 1)).float()
            gain = torch.cummin(rate[1:] - rate[:-1], 0).values if len(order) else rate[:0]
        orders.append(order)
        keys.append(gain)
    owner = torch.cat([torch.full((len(o),), i) for i, o in enumerate(orders)])
    key = torch.cat(keys)
    rank = torch.cat([torch.arange(len(o)) for o in orders])
    chosen = (key - rank * 1e-12).argsort(descending=True)[: min(capacity, int((key > 0).sum()))]
    counts = torch.bincount(owner[chosen], minlength=len(scores))
    return [torch.bincount(o[: int(n)] // K, minlength=s.shape[0]) for o, n, s in zip(orders, counts, scores)]
