"""The warm-up cost tables of adaptive verification: the target's step time over (requests, positions), its
ragged and context cells, and the draft's iterations and catch-ups, measured at start-up on the real runners and
kept on disk keyed by model, dtype and hardware (workers/cost_table.py holds the table and its lookups)."""
from __future__ import annotations

import hashlib
import logging
import platform
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from workers.attention import SMALL_ROWS
from workers.attention_groups import padded_key_slots
from workers.cost_measure import load_or_measure
from workers.cost_table import DEFAULT_EXTRA_TOKENS, RAGGED_EXTRA, CostTable
from workers.model_runner import ModelRunner, StepChunk
from workers.model_store import cache_dir

if TYPE_CHECKING:
    from workers.engine import LLMEngine

log = logging.getLogger(__name__)
PROFILE_CONTEXT = 256  # context length of the warm-up steps
PROFILE_KEY_SLOTS = padded_key_slots(PROFILE_CONTEXT + 1)  # what each warm-up sequence's attention gathers
# The warm-up's context cells (`CostTable.key_slot_s`): one step of r x 1 token at this much more context
CONTEXT_PROBE = 256
# The draft's warm-up table also times catch-up steps: each request feeds 1 + CATCH_UP_ROWS tokens at once.
# Catch-up rows cost the draft's layers like any row (measured, trained draft, 32 requests: 13.6 ms for 1 token
# each, 126 ms for 17 each): a request's first draft feeds its whole prompt, which at c=32 ShareGPT was
# 559 of 1,094 ms of drafting while the plan priced every draft iteration at ~14 ms.
CATCH_UP_ROWS = 16
# What a saved target table must have been measured with to be reused (`target_table_path`); `|dense-rows`:
# small rows packed into full row blocks (workers/attention.py `_RowBlocks`, 2026-12-06), so steps of the same
# shape cost other times than in tables measured before
TABLE_KEY = "|blocks|ragged-by-count|keys|open-uniform|rounds|dense-rows"


def warm_up_tables(engine: "LLMEngine") -> tuple[CostTable, CostTable | None]:
    """The target's cost table and, for a draft model, the draft's (one iteration of r requests, 1 token each,
    and catch-ups of 1 + CATCH_UP_ROWS tokens each): read from disk, or measured within
    `spec.cost_table_budget_s` (the draft's within a quarter of it) and saved."""
    cfg = engine.config
    path = target_table_path(engine)
    log.info("cost table: %s (measuring if absent, <= %.0f s)", path, cfg.spec.cost_table_budget_s)
    requests = tuple(r for r in (1, 2, 4, 8, 16, 32, 64) if r <= cfg.max_num_seqs)
    row_block = SMALL_ROWS if cfg.batch_invariant else 1  # a property of the runner, not the file
    requests_fit = requests_that_fit(engine.runner, requests, 1 + max(DEFAULT_EXTRA_TOKENS + RAGGED_EXTRA), path,
                                     block_at=row_block if row_block > 1 else 0)
    long = PROFILE_CONTEXT + CONTEXT_PROBE
    cost = load_or_measure(path, lambda r, n: profile_step(engine.runner, r, n),
                           budget_s=cfg.spec.cost_table_budget_s, requests=requests_fit,
                           ragged_step=lambda rows: profile_rows(engine.runner, rows), row_block=row_block,
                           context_step=lambda r: profile_rows(engine.runner, [1] * r, long),
                           context_slots=padded_key_slots(long + 1) - PROFILE_KEY_SLOTS,
                           context_requests=requests_that_fit(engine.runner, requests_fit, long + 1 - PROFILE_CONTEXT,
                                                              path, quiet=True))
    cost.row_block = row_block
    if cfg.spec.method != "draft":
        return cost, None
    # a remote drafter is timed through its transport; a local one is profiled here
    step = getattr(engine.proposer, "profile_step", None)
    where = "|remote" if step is not None else ""
    runner = None if step is not None else engine.proposer.runner
    step = step or (lambda r, n: profile_step(runner, r, n))
    dkey = hardware_key(f"{cfg.model}|draft:{cfg.spec.draft_model}{where}|catch-up|rounds|dense-rows",
                        str(engine.model.dtype), str(engine.model.device))
    dpath = cache_dir() / "cost_tables" / f"{dkey}.json"
    draft_cost = load_or_measure(dpath, step, budget_s=cfg.spec.cost_table_budget_s / 4,
                                 requests=requests_that_fit(runner, requests, 1 + CATCH_UP_ROWS, dpath),
                                 extra=(0, CATCH_UP_ROWS))
    draft_cost.row_block = row_block
    return cost, draft_cost


def target_table_path(engine: "LLMEngine") -> Path:
    """Where the target's warm-up table is kept: keyed by model, tensor parallelism, dtype and hardware
    (`|blocks`: tables measured before the ragged cells and the row blocks' cost existed are not reused;
    `|ragged-by-count`: nor those whose budget cut left the ragged cells of all but the smallest request count;
    `|keys`: nor those without the context cells, `CostTable.key_slot_s`; `|open-uniform`: nor those whose
    row block was timed on a ragged step, `block_cost_rows`; `|rounds`: nor those timed cell after cell,
    workers/cost_measure.py; the draft's key gained `|rounds` too)."""
    cfg = engine.config
    tp = f"|tp{cfg.tensor_parallel_size}" if cfg.tensor_parallel_size > 1 else ""
    key = hardware_key(cfg.model + tp + TABLE_KEY, str(engine.model.dtype), str(engine.model.device))
    return cache_dir() / "cost_tables" / f"{key}.json"


def requests_that_fit(runner: ModelRunner | None, requests: tuple[int, ...], rows: int,
                       table: Path | None = None, quiet: bool = False, block_at: int = 0) -> tuple[int, ...]:
    """The warm-up's request counts whose steps (`rows` positions each at PROFILE_CONTEXT) fit in the runner's
    KV pool (all of them when the `table` is on disk and so not measured, or with no local runner); the
    others are left out (the table extrapolates) with a warning. A 0.5 GB fp32 pool (728 blocks of
    the default model) cannot hold 64 x 17 blocks: the warm-up raised NoFreeBlocksError and the engine did not
    start, unless a table measured with a larger pool was already on disk. With `block_at` (the row block),
    that count's cells also time the row block on `block_at` + 1 sequences (`cost_measure.block_cost_rows`)."""
    pool = getattr(runner, "pool", None)
    if pool is None or (table is not None and table.exists()):
        return requests
    per_request = -(-(PROFILE_CONTEXT + rows) // pool.block_size)
    fit = tuple(r for r in requests if (r + (r == block_at)) * per_request <= pool.num_free) or requests[:1]
    if len(fit) < len(requests) and not quiet:
        log.warning("cost table: the KV pool (%d blocks free) holds warm-up steps of up to %d requests; "
                    "larger counts are extrapolated (raise kv_cache_memory_gb to measure them)",
                    pool.num_free, fit[-1])
    return fit


def profile_step(runner: ModelRunner, requests: int, tokens: int) -> None:
    """One step of `requests` sequences at PROFILE_CONTEXT, `tokens` positions in all."""
    profile_rows(runner, [tokens // requests] * requests)


def profile_rows(runner: ModelRunner, rows: list[int], context: int = PROFILE_CONTEXT) -> None:
    """One step of sequences at `context` computing `rows[i]` positions each (all of them logits)."""
    nb = -(-(context + max(rows)) // runner.block_size)
    blocks = runner.pool.allocate(len(rows) * nb)
    try:
        runner.run([StepChunk([7] * n, context, blocks[i * nb:(i + 1) * nb], n) for i, n in enumerate(rows)])
        if runner.model.device.type == "cuda":  # else the timer reads the kernels' launch, not their run
            torch.cuda.synchronize(runner.model.device)
    finally:
        runner.pool.free(blocks)


def hardware_key(model: str, dtype: str, device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    raw = f"{model}|{dtype}|{device}|{cpu}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
