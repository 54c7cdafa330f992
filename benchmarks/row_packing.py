"""What packing small rows into full 32-row blocks saves: the target's forward of fixed step shapes with each
sequence's rows kept in one block (the runner until 2026-12-06) and with a run of small rows cut into full
blocks (`attention._RowBlocks` now), alternating round by round on the same KV cache, so the machine's drift
falls on both alike. Medians of the rounds and of the rounds' ratios; the logits must be identical (the packing
is a matter of time).

    python benchmarks/row_packing.py --rounds 21 --out benchmarks/results/row_packing_cpu.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import workers.attention as attention
from workers.bench import prefilled_step
from workers.config import EngineConfig
from workers.engine import LLMEngine

# name -> rows per sequence (1 + verified drafts)
SHAPES = {
    "32 x 1 (no speculation, c=32)": [1] * 32,
    "32 x 3 (fixed k=2, c=32)": [3] * 32,
    "32 x 5 (fixed k=4, c=32)": [5] * 32,
    "32 x 8 (fixed k=7, c=32)": [8] * 32,
    "20 x 1 + 6 x 4 + 6 x 8 (ragged, c=32)": [1] * 20 + [4] * 6 + [8] * 6,
    "16 x 5 (fixed k=4, c=16)": [5] * 16,
}


class OneBlockPerSequence(attention._RowBlocks):
    """The packing before 2026-12-06: a small segment that does not fit the open block opens the next one."""

    def _flush(self) -> None:  # the run as one block: `add` cut it before it outgrew one
        if self.end > self.start:
            self.blocks.append((slice(self.start, self.end), 0))
        self.start = self.end

    def add(self, seg: attention.SeqSpan) -> None:
        if seg.query_len <= attention.SMALL_ROWS and self.end - self.start + seg.query_len > attention.SMALL_ROWS:
            self._flush()
        super().add(seg)


PACKERS = {"one block per sequence": OneBlockPerSequence, "full blocks": attention._RowBlocks}


def time_shape(runner, rows: list[int], context: int, rounds: int, gen: torch.Generator) -> dict:
    step, blocks = prefilled_step(runner, rows, context, gen)
    times: dict[str, list[float]] = {name: [] for name in PACKERS}
    outs = {}
    for r in range(rounds + 1):  # round 0 warms both up, untimed; the order alternates
        for name in (list(PACKERS) if r % 2 else list(PACKERS)[::-1]):
            attention._RowBlocks = PACKERS[name]  # build_metadata reads the module's name
            try:
                t0 = time.perf_counter()
                outs[name] = runner.run(step)
                if r:
                    times[name].append(time.perf_counter() - t0)
            finally:
                attention._RowBlocks = PACKERS["full blocks"]
    runner.pool.free(blocks)
    old, new = (statistics.median(times[k]) for k in times)
    # paired: the two forwards of a round run back to back (this machine's speed moves ~30% within minutes)
    paired = statistics.median(b / a for a, b in zip(*times.values()))
    return {"rows": sum(rows), "one_block_per_sequence_ms": round(1000 * old, 1), "full_blocks_ms": round(1000 * new, 1),
            "ratio_paired": round(paired, 3), "identical_logits": bool(torch.equal(*outs.values())),
            "samples_ms": {k: [round(1000 * x, 1) for x in v] for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--out", default="benchmarks/results/row_packing_cpu.json")
    args = ap.parse_args()
    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5))
    gen = torch.Generator().manual_seed(0)
    result = {"context": args.context, "rounds": args.rounds, "dtype": str(engine.model.dtype), "shapes": {}}
    for name, rows in SHAPES.items():
        result["shapes"][name] = r = time_shape(engine.runner, rows, args.context, args.rounds, gen)
        print(f"{name}: {r['one_block_per_sequence_ms']} -> {r['full_blocks_ms']} ms (paired {r['ratio_paired']}), "
              f"identical logits: {r['identical_logits']}", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
