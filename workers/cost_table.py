"""Warm-up cost table: the target's step time over (requests in the step, tokens in the step).

Measured once at start-up on the real runner (bounded in time), persisted keyed by model, dtype and hardware
so a restart reuses it, and refreshed online from observed step times (the row a lookup reads is scaled
by observed / predicted: its level by LEVEL_SHARE of each step, the cells read by all of it, see `observe`).
Lookups interpolate linearly in tokens and take the nearest measured request count.

The grid's cells are uniform steps (every request computes the same number of rows). A ragged step (some
requests verify drafts, others do not) costs more than the uniform step with as many tokens: the runner's
attention handles each query length as its own padded group (workers/attention.py), and a group costs ~20
small ops per layer. Measured at 8 requests, context 256: 7 x 1 + 1 x 2 rows 71.5 ms against 65.2 for 8 x 1
(a uniform 8 x 2 prices the 9th row at 2.1 ms); 7 x 1 + 1 x 8 rows 90.1 ms against 83.4 for 8 x 2. So the
table also measures `ragged` cells: the extra seconds of a step where one request computes `1 + e` rows and
the others 1, over the uniform lookup of the same tokens.

Every cell is measured at one context (the warm-up's), yet a step's attention gathers each sequence's keys
padded to its group's longest context (workers/attention.py): ~3.5-4 us per key slot per sequence on an AMD
EPYC (bf16, 2 threads; 2-32 requests at contexts 100-1000, ad hoc), so 32 requests at context 512 took 136 ms
where the table's 256 took 102. The warm-up measures that too, as `key_slot_s`, and
`benchmarks/profile_steps.py` prices each served step's key slots with it when it checks the table. The
policy does not: pricing and observing steps at the table's context plus that term was tried and lost in
closed loop (docs/architecture.md, "A step's contexts").
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field

import numpy as np

DEFAULT_REQUESTS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_EXTRA_TOKENS = (0, 1, 2, 4, 8)  # verify positions per request on top of its 1 token
RAGGED_EXTRA = (1, 7)  # rows beyond 1 of the one longer request in the ragged cells
DENSE_MAX = 1 << 16  # token counts up to this are looked up in a dense per-row table
# Of each online refresh's step, the share that scales the whole row (its level; the rest moves the cells the
# lookup read). The machine's speed drifts between the warm-up and serving (an AVX2 CPU: a 1 x 1 step read
# 76-112 ms at different hours), and an adaptive engine that does not speculate only ever refreshes its plain
# cell: with the cells read alone, a table measured in a slow hour had the 2-request plain cell at 80 ms after
# serving and the 2 x 2 cell still at 121 (2 x 1 steps ran 90 ms, 2 x 3 steps 97), so one verified row was
# priced at 20 ms and the trained draft was never drafted at c=2, where fixed k=2 ran 5-8% above no
# speculation. Unread cells
# keep the warm-up's shape; with 1.0 the shape would never be learned, as each refresh would scale the whole row.
LEVEL_SHARE = 0.9


@dataclass
class CostTable:
    """seconds[(requests, tokens)] for tokens >= requests (every request computes >= 1 position).

    `row_block` > 1: the runner computes linear layers in blocks of that many rows (the batch-invariant
    path, 32), and a block costs about the same however full it is (measured at 32 requests, context 256:
    32 tokens 135-149 ms; 38, 45 or 55 tokens in any mix 191-211 ms; 64 tokens 168-209 ms). So the step
    time is a staircase in blocks, and interpolating between 32 and 64 tokens priced a few extra verify
    tokens at a fraction of the block they open. Lookups above one block read the table at whole blocks.

    `block_rows` (measured at warm-up, see `cost_measure.block_cost_rows`): a block's fixed cost in rows.
    Reading every step past a block boundary at the next whole block priced 1-8 extra rows as 32 (measured at
    32 requests, context 256-400: 33-40 rows 188-220 ms, 64 rows 247-252, 32 rows 149-165), and the online
    refresh then pulled the whole-block cell down towards those partial steps, so a full second block looked
    as cheap as a few rows (fixed k=1's steps at c=32 read 0.81x the table). With it, the lookup axis is
    rows + block_rows x blocks: a step pays each block it opens once, then its rows."""

    seconds: dict[tuple[int, int], float] = field(default_factory=dict)
    # (requests, e) -> extra seconds of a step where one request computes 1 + e rows and the others 1
    ragged: dict[tuple[int, int], float] = field(default_factory=dict)
    ema: float = 0.1  # weight of one online observation
    row_block: int = 1
    block_rows: float | None = None  # a row block's fixed cost in rows (None: read at whole blocks)
    # seconds each query-length group beyond the ragged cells' two adds to a step (learned online, see
    # GroupCostFit; not persisted): the runner's attention pads each distinct query length as its own group
    group_s: float = 0.0
    # seconds per key slot of one sequence beyond the warm-up's context (module docstring; 0: not measured;
    # a diagnostic: the policy does not read it)
    key_slot_s: float = 0.0
    _curves: dict = field(default_factory=dict, repr=False, compare=False)  # lookup curves, dropped on refresh

    def _row(self, requests: int) -> int:
        """The measured request count nearest to `requests` (the row lookups read)."""
        key = ("rows", len(self.seconds))
        if key not in self._curves:
            self._curves[key] = sorted({r for r, _ in self.seconds})
        rs = self._curves[key]
        i = min(bisect.bisect_left(rs, requests), len(rs) - 1)
        return rs[i] if i == 0 or rs[i] - requests <= requests - rs[i - 1] else rs[i - 1]

    def nearest_requests(self, requests: int) -> int:
        """The measured request count whose row a lookup for `requests` reads."""
        return self._row(max(1, requests))

    def _x(self, tokens: int) -> int:
        """Where a step of `tokens` sits on the lookup axis: its rows plus `block_rows` per block it uses;
        without `block_rows`, its tokens within one row block, else its rows rounded up to whole blocks. The
        runner packs small rows densely (workers/attention.py `_RowBlocks`), measured cells included."""
        q = self.row_block
        if q <= 1:
            return tokens
        blocks = -(-tokens // q)  # (the vectorised twin is in `_interpolate`)
        if self.block_rows is not None:
            return tokens + self.block_rows * blocks
        return tokens if tokens <= q else blocks * q

    def _cells(self, requests: int) -> list[tuple[int, float]]:
        """The nearest request count's (position on the lookup axis, seconds), made non-decreasing
        (pool-adjacent-violators): a noisy cell must not make verifying more look cheaper than verifying less."""
        r = self._row(requests)
        by_x: dict[int, list[float]] = {}
        for (rr, t), s in self.seconds.items():
            if rr == r:
                by_x.setdefault(self._x(t), []).append(s)
        xs = sorted(by_x)
        return list(zip(xs, _isotonic([sum(by_x[x]) / len(by_x[x]) for x in xs])))

    def lookup(self, requests: int, tokens: int) -> float:
        """One lookup: `_interpolate` at one token count, in plain Python on the row's cached cells (a dense
        table would be rebuilt after every refresh, and the drafter's table is refreshed every drafting step:
        its rebuild was ~0.14 ms of a ~26 ms step at c=1, paid with the host's caches cold after a forward)."""
        if not isinstance(tokens, (int, np.integer)):
            return float(self._interpolate(requests, np.array([tokens]))[0])
        xs, ss = self._curve_lists(max(1, requests))
        x = self._x(int(tokens))
        if len(xs) == 1 or x <= xs[0]:
            return ss[0]
        j = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)  # segment [j-1, j]; ends extrapolate
        return ss[j - 1] + (ss[j] - ss[j - 1]) * (x - xs[j - 1]) / (xs[j] - xs[j - 1])

    def lookup_many(self, requests: int, tokens: "torch.Tensor") -> "torch.Tensor":
        import torch

        return torch.from_numpy(self.lookup_array(requests, tokens.numpy()))

    def lookup_array(self, requests: int, tokens: np.ndarray) -> np.ndarray:
        """Vectorised lookup for one request count and many token counts (the budget policy's hot path).
        Integer token counts read a dense per-row table (`_dense`): one indexing op instead of an
        interpolation of ~10 numpy calls, several times a step (the adaptive engine's policy took ~1.5 ms of
        a ~52 ms step at c=1; what this saved is small, see docs/architecture.md)."""
        tokens = np.asarray(tokens)
        if tokens.dtype.kind in "iu" and tokens.size:
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo >= 0 and hi <= DENSE_MAX:
                return self._dense(max(1, requests), hi)[tokens]
        return self._interpolate(requests, tokens)

    def lookup_range(self, requests: int, start: int, count: int) -> np.ndarray:  # [count]
        """`lookup_array` at the token counts start, start + 1, ... (`count` of them): a slice of the dense
        table, not an index array (the depth plan reads such runs every step; each numpy op on a small array
        costs several microseconds after a forward has evicted the host's caches)."""
        stop = start + count
        if 0 <= start and stop - 1 <= DENSE_MAX:
            return self._dense(max(1, requests), stop - 1)[start:stop]
        return self._interpolate(requests, np.arange(start, stop))

    def _dense(self, requests: int, top: int) -> np.ndarray:
        """`_interpolate` at every token count 0..>= `top` for the row of `requests`, cached until the next
        refresh (grown by doubling when a lookup reads past its end)."""
        key = ("dense", self._row(requests), self.row_block, self.block_rows, len(self.seconds))
        dense = self._curves.get(key)
        if dense is None or len(dense) <= top:
            size = max(256, 1 << top.bit_length(), 2 * len(dense) if dense is not None else 0)
            dense = self._curves[key] = self._interpolate(requests, np.arange(size))
        return dense

    def _interpolate(self, requests: int, tokens: np.ndarray) -> np.ndarray:
        """Lookups by interpolation along the row's cells (`_curve`), for any token counts."""
        ts, ss = self._curve(max(1, requests))
        if len(ts) == 1:
            return np.full(tokens.shape, ss[0])
        x = tokens.astype(np.float64)
        if self.row_block > 1:
            q = self.row_block
            if self.block_rows is not None:
                x = x + self.block_rows * np.ceil(x / q)
            else:
                x = np.where(x > q, np.ceil(x / q) * q, x)
        j = np.clip(np.searchsorted(ts, x), 1, len(ts) - 1)  # segment [j-1, j]; ends extrapolate
        t0, t1, s0, s1 = ts[j - 1], ts[j], ss[j - 1], ss[j]
        return np.where(x <= ts[0], ss[0], s0 + (s1 - s0) * (x - t0) / (t1 - t0))

    def row_slope(self, requests: int, per_request: int) -> float:
        """Seconds per extra row between the cells of `requests` x 1 and `requests` x `per_request` tokens
        (the nearest request count with both measured; 0 when none has). Read from the cells themselves:
        the staircase axis places a sequence of many rows in whole blocks, not where a lookup reads."""
        key = ("slope", requests, per_request, len(self.seconds))
        if key not in self._curves:  # cached until the next refresh: the depth plan reads it every step
            rows = sorted({r for r, _ in self.seconds
                           if (r, r) in self.seconds and (r, r * per_request) in self.seconds},
                          key=lambda r: (abs(r - requests), r))
            if not rows or per_request <= 1:
                self._curves[key] = 0.0
            else:
                r = rows[0]
                self._curves[key] = max(0.0, self.seconds[(r, r * per_request)] - self.seconds[(r, r)]) / (
                    r * (per_request - 1))
        return self._curves[key]

    def _ragged_row(self, requests: int) -> int | None:
        """The request count whose ragged cells a lookup reads: the uniform lookups' row where it has them
        (also where the online refresh put them), else the nearest measured one."""
        rs = sorted({r for r, _ in self.ragged})
        if not rs:
            return None
        row = self._row(max(1, requests)) if self.seconds else requests
        return row if row in rs else min(rs, key=lambda x: (abs(x - requests), x))

    def ragged_array(self, requests: int, extra: np.ndarray) -> np.ndarray:
        """Extra seconds of a ragged step whose longest request computes 1 + `extra` rows (0 where extra <= 0),
        read at `_ragged_row`, linear in `extra` between the measured cells and at the last segment's slope
        beyond them, made non-decreasing in `extra` as the uniform curves are in tokens: a noisy cell never makes
        a longer draft look cheaper to verify (the H200's table had 40 ms at 1 extra row and 22 ms at 7, 32
        requests; 2026-12-04)."""
        key = ("ragged", requests, len(self.ragged))
        if key not in self._curves:
            r = self._ragged_row(requests)
            if r is None:
                self._curves[key] = None
            else:
                cells = sorted((e, s) for (rr, e), s in self.ragged.items() if rr == r)
                self._curves[key] = (np.array([e for e, _ in cells], float),
                                     np.array(_isotonic([s for _, s in cells]), float))
        curve = self._curves[key]
        if curve is None:
            return np.zeros(np.shape(extra))
        es, ss = curve
        seconds = np.interp(extra, es, ss)
        if len(es) > 1:  # beyond the last cell (RAGGED_EXTRA's 7 rows; n-gram drafts of k=15): its segment's
            # slope, where a flat end priced a request verifying 15 as one verifying 7
            slope = (ss[-1] - ss[-2]) / (es[-1] - es[-2])
            seconds = seconds + slope * np.maximum(np.asarray(extra, float) - es[-1], 0.0)
        return np.where(np.asarray(extra) > 0, seconds, 0.0)

    def _curve(self, requests: int) -> tuple[np.ndarray, np.ndarray]:
        """`_cells` as arrays (axis positions, seconds), cached: the policy looks up several times a step."""
        key = (self._row(requests), self.row_block, self.block_rows, len(self.seconds))
        if key not in self._curves:
            self._curves[key] = tuple(np.array(v, dtype=np.float64) for v in self._curve_lists(requests))
        return self._curves[key]

    def _curve_lists(self, requests: int) -> tuple[list[float], list[float]]:
        """`_cells` as Python lists (axis positions, seconds), cached: what a single `lookup` reads."""
        key = ("lists", self._row(requests), self.row_block, self.block_rows, len(self.seconds))
        if key not in self._curves:
            cells = self._cells(requests)
            self._curves[key] = ([float(t) for t, _ in cells], [float(x) for _, x in cells])
        return self._curves[key]

    def _drop_curves(self, row: int) -> None:
        """After a refresh of `row`: drop the cached curves it changed (its own, and every slope and ragged
        curve, which may read it), keeping the other rows' (each is rebuilt from ~10 cold numpy calls)."""
        for key in list(self._curves):
            if key[0] in ("slope", "ragged") or key[0] == row or (key[0] in ("lists", "dense") and key[1] == row):
                del self._curves[key]

    def observe(self, requests: int, tokens: int, seconds: float, count: int = 1) -> None:
        """Online refresh: scale the cells of the row a lookup of (requests, tokens) reads by observed /
        predicted (`seconds`: the mean of `count` steps, weighed as that many single observations): every
        cell by LEVEL_SHARE of the EMA step (the row's level), the cells the lookup reads by the rest too,
        each by its interpolation weight (the row's shape), so the cell read moves by the whole step.
        (Moving only the nearest cell towards the raw time flattened the curve: steps with a few more tokens
        than a cell pulled it up, steps with fewer pulled the next one down, so extra verify tokens looked
        ever cheaper. Moving only the cells read left the others where the warm-up put them, see
        LEVEL_SHARE.) The row's ragged cells, seconds of the same steps, take the level step too."""
        if not self.seconds:
            return
        r = self._row(max(1, requests))
        cells = sorted((self._x(t), t) for rr, t in self.seconds if rr == r)  # (axis position, key)
        weights = {cells[i][1]: w for i, w in _interp_weights([x for x, _ in cells], self._x(tokens))}
        ratio = seconds / max(self.lookup(requests, tokens), 1e-12)
        ema = 1.0 - (1.0 - self.ema) ** count
        for _, t in cells:
            share = LEVEL_SHARE + (1.0 - LEVEL_SHARE) * weights.get(t, 0.0)
            self.seconds[(r, t)] *= 1.0 + ema * share * (ratio - 1.0)
        for key in [k for k in self.ragged if k[0] == r]:
            self.ragged[key] *= 1.0 + ema * LEVEL_SHARE * (ratio - 1.0)
        self._drop_curves(r)

    def observe_ragged(self, requests: int, extra: int, seconds: float) -> None:
        """Online refresh of the ragged cost: a pure decode step whose longest request computed 1 + `extra`
        rows took `seconds` over its uniform lookup (and its groups' fitted cost). The cells of the uniform
        lookups' row move towards it by the EMA, each by its interpolation weight in `extra`; a row without
        cells (the warm-up's budget cut them) first gets a copy of what it read. Measured on an AVX2 (fp32)
        machine: the warm-up had only the 2-request cells (80 ms), which priced every ragged step at 8 requests
        80 ms over ~206 ms steps, while such steps ran within a few ms of their uniform lookup; without a
        refresh the policy never took the ragged steps that would have shown it."""
        if extra <= 0 or not self.ragged or not self.seconds:
            return
        row = self._row(max(1, requests))
        if row not in {r for r, _ in self.ragged}:
            es = sorted({e for _, e in self.ragged})
            self.ragged.update({(row, e): float(s) for e, s in zip(es, self.ragged_array(requests, np.array(es)))})
        es = sorted(e for r, e in self.ragged if r == row)
        weights = {es[i]: w for i, w in _interp_weights(es, extra)}
        step = self.ema * (seconds - float(self.ragged_array(requests, extra))) / sum(w * w for w in weights.values())
        for e, w in weights.items():  # normalised: the lookup itself moves by ema x its error
            self.ragged[(row, e)] = max(0.0, self.ragged[(row, e)] + w * step)
        # only the ragged curves: rebuilding the uniform ones every step cost ~0.5% of a c=1 step (OBSERVE_BATCH)
        for key in [k for k in self._curves if k[0] == "ragged"]:
            del self._curves[key]

    def to_json(self) -> str:
        return json.dumps({"seconds": [[r, t, s] for (r, t), s in sorted(self.seconds.items())],
                           "ragged": [[r, e, s] for (r, e), s in sorted(self.ragged.items())],
                           "row_block": self.row_block, "block_rows": self.block_rows,
                           "key_slot_s": self.key_slot_s})

    @classmethod
    def from_json(cls, text: str) -> "CostTable":
        data = json.loads(text)
        return cls({(int(r), int(t)): float(s) for r, t, s in data["seconds"]},
                   {(int(r), int(e)): float(s) for r, e, s in data.get("ragged", [])},
                   row_block=int(data.get("row_block", 1)), block_rows=data.get("block_rows"),
                   key_slot_s=float(data.get("key_slot_s", 0.0)))


def _isotonic(ys: list[float]) -> list[float]:
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return [s / c for s, c in blocks for _ in range(int(c))]


def _interp_weights(xs: list[float], x: float) -> list[tuple[int, float]]:
    """(index, weight) of the sorted points `xs` that a linear interpolation at `x` reads (clamped at the
    ends): what an online observation at `x` refreshes, each cell by its share."""
    j = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    if len(xs) == 1 or x <= xs[0]:
        return [(0, 1.0)]
    if x >= xs[-1] or xs[j] == xs[j - 1]:
        return [(j, 1.0)]
    w1 = (x - xs[j - 1]) / (xs[j] - xs[j - 1])
    return [(j - 1, 1.0 - w1), (j, w1)]
