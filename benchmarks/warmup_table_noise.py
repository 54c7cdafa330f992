"""How much the warm-up cost table moves from one measurement to the next: the target's table measured
`--tables` times each way, timed in rounds (the warm-up's way, workers/cost_measure.py) and cell after cell
(as before 2026-12-05), alternately on one engine, with the warm-up's grid and budget. Prints, per quantity
the policy reads (the ragged cells, the row block, the per-row slope, the key-slot cost), its values and
their spread (max - min) per way; writes every table to JSON.

    python benchmarks/warmup_table_noise.py --tables 4    # ~8 min (bf16, 2 cores)

Nothing else may run on the machine meanwhile: the point is the machine's own drift."""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from workers import warmup_tables as W
from workers.attention_groups import padded_key_slots
from workers.bench import _spec
from workers.config import EngineConfig
from workers.cost_measure import measure
from workers.cost_table import CostTable
from workers.engine import LLMEngine


def quantities(t: CostTable) -> dict[str, float]:
    """What the policy reads from a table beyond each row's level, in ms (block in rows, key slot in us)."""
    q = {f"ragged {r}/{e}": s * 1e3 for (r, e), s in sorted(t.ragged.items())}
    q |= {f"row slope {r}": (t.seconds[(r, 2 * r)] - t.seconds[(r, r)]) / r * 1e3
          for r in sorted({r for r, _ in t.seconds}) if (r, 2 * r) in t.seconds and r > 1}
    q["block rows"] = t.block_rows if t.block_rows is not None else float("nan")
    q["key slot us"] = t.key_slot_s * 1e6
    return q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", type=int, default=4, help="tables measured each way")
    ap.add_argument("--out", default="benchmarks/results/warmup_table_noise_cpu.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=1.0, spec=_spec("ngram:7:adaptive", 7)))
    runner, cfg = engine.runner, engine.config
    long = W.PROFILE_CONTEXT + W.CONTEXT_PROBE
    requests = tuple(r for r in (1, 2, 4, 8, 16, 32, 64) if r <= cfg.max_num_seqs)
    kw = dict(requests=requests, budget_s=cfg.spec.cost_table_budget_s, row_block=engine.adaptive.cost.row_block,
              ragged_step=lambda rows: W.profile_rows(runner, rows),
              context_step=lambda r: W.profile_rows(runner, [1] * r, long),
              context_slots=padded_key_slots(long + 1) - W.PROFILE_KEY_SLOTS, context_requests=requests)
    runs = []
    for i in range(args.tables):
        for way in ("rounds", "cell after cell"):
            start = time.perf_counter()
            table = measure(lambda r, n: W.profile_step(runner, r, n), in_rounds=way == "rounds", **kw)
            runs.append({"way": way, "seconds": time.perf_counter() - start, "table": json.loads(table.to_json()),
                         "quantities": quantities(table)})
            print(f"table {i + 1}/{args.tables}, {way}: {runs[-1]['seconds']:.1f} s", flush=True)
    spread = {}
    for way in ("rounds", "cell after cell"):
        tables = [r["quantities"] for r in runs if r["way"] == way]
        spread[way] = {k: {"values": [t.get(k) for t in tables],
                           "spread": max(t.get(k, 0.0) for t in tables) - min(t.get(k, 0.0) for t in tables)}
                       for k in tables[0]}
    print(f"{'quantity':16s} {'rounds: values':40s} spread | {'cell after cell: values':40s} spread")
    for k in spread["rounds"]:
        a, b = spread["rounds"][k], spread["cell after cell"].get(k, {"values": [], "spread": float("nan")})
        fa = " ".join(f"{v:5.1f}" for v in a["values"])
        fb = " ".join(f"{v:5.1f}" for v in b["values"] if v is not None)
        print(f"{k:16s} {fa:40s} {a['spread']:6.1f} | {fb:40s} {b['spread']:6.1f}")
    Path(args.out).write_text(json.dumps({"runs": runs, "spread": spread}, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
