"""Where an engine step's time goes, per configuration: forward, proposer, adaptive trim, verification, tokens
and verified positions per step, and (adaptive) how the policy's verify lengths were spread. Steps that also
prefill and decode-only steps are reported apart (tokens emitted and forward time per step), and for an
adaptive engine, what the drafts it cut would have added: the runs are greedy, so a draft token would have
been accepted exactly when it equals the token the request emitted at that position (`cut_report`).

    python benchmarks/profile_steps.py --workload sharegpt --concurrency 32 --modes ngram:2,ngram:7:adaptive
    python benchmarks/profile_steps.py --workload repetitive --concurrency 1 --modes ngram:4,ngram:7,ngram:7:adaptive
    python benchmarks/profile_steps.py --workload sharegpt --concurrency 16 --modes ngram:4,ngram:7:adaptive \
        --sustained --prompts-per-slot 2 --rounds 2 --interleave   # the modes in the same minutes
"""
from __future__ import annotations

import argparse
import collections
import statistics
import time

from workers.bench import _spec, _warmed, run_ours, sustained_plan, varied_lengths, workload_prompts
from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig
from workers.attention_groups import context_cost_slots
from workers.cost_table import CostTable
from workers.online_costs import ragged_extra
from workers.engine import LLMEngine
from workers.warmup_tables import PROFILE_KEY_SLOTS, target_table_path


def instrument(e: LLMEngine) -> dict:
    T = collections.Counter()
    lengths: collections.Counter = collections.Counter()
    # (requests, tokens, ragged extra rows, forward seconds, key slots beyond the warm-up's context)
    decode_steps: list[tuple[int, int, int, float, int]] = []
    kinds = collections.defaultdict(collections.Counter)  # "prefill" | "decode" -> steps, tokens emitted, fwd s
    drafts: list[tuple] = []  # adaptive: (request, its length then, draft tokens, verified, step also prefilled)
    rr, pp, vv, st = e.runner.run, e._propose, e._verify, e.step

    def timed(key, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            out = fn(*a, **kw)
            T[key] += time.perf_counter() - t
            return out
        return wrapper

    def run(chunks, **kw):
        T["tok"] += sum(len(c.token_ids) for c in chunks)
        t = time.perf_counter()
        out = timed("fwd", rr)(chunks, **kw)
        T["last_fwd"] = time.perf_counter() - t
        T["last_pure"] = all(c.num_logits == len(c.token_ids) for c in chunks)
        if T["last_pure"]:  # a pure decode/verify step
            rows = [len(c.token_ids) for c in chunks]
            over = (e.runner.key_slots - e.runner.tiled_seqs * PROFILE_KEY_SLOTS
                    + e.runner.context_splits * (context_cost_slots(e.model.device) or 0))
            decode_steps.append((len(chunks), sum(rows), ragged_extra(rows), time.perf_counter() - t, over))
        return out

    def step():
        T["steps"] += 1
        T["last_fwd"] = -1.0
        outs = timed("step", st)()
        if T["last_fwd"] >= 0:
            kind = kinds["decode" if T["last_pure"] else "prefill"]
            kind["steps"] += 1
            kind["tokens"] += sum(len(o.new_token_ids) for o in outs)
            kind["fwd"] += T["last_fwd"]
        return outs

    def propose(decodes):
        before = T["prop"]
        out = timed("prop", pp)(decodes)
        T["last_prop"] = T["prop"] - before
        return out

    e.runner.run, e._propose, e._verify, e.step = run, propose, timed("verify", vv), step
    if e.adaptive:
        tr = e.adaptive.trim

        def trim(p, plan):
            offered = p.num_drafts.tolist()
            timed("trim", tr)(p, plan)
            for (req, _), n0, n1, row in zip(plan.decodes, offered, p.num_drafts.tolist(), p.draft_tokens.tolist()):
                if n0:
                    drafts.append((req, len(req.tokens), row[:n0], n1, bool(plan.prefills)))
            T["vpos"] += int(p.num_drafts.sum())
            lengths.update(p.num_drafts.tolist())
            if plan.prefills:  # steps that also prefill: where a draft first catches up on whole prompts
                T["mixed_steps"] += 1
                T["mixed_prop"] += T["last_prop"]
                T["mixed_vpos"] += int(p.num_drafts.sum())
        e.adaptive.trim = trim
    return {"T": T, "lengths": lengths, "decode_steps": decode_steps, "kinds": kinds, "drafts": drafts}


def reset(probe: dict) -> None:
    """Forget what `instrument` counted so far: the untimed first wave of a sustained run (its tokens/s
    already leave it out; its step counts and times used to count it)."""
    probe["T"].clear()
    probe["lengths"].clear()
    probe["decode_steps"].clear()
    probe["kinds"].clear()
    probe["drafts"].clear()


def uninstrument(e: LLMEngine) -> None:
    """Undo `instrument`: the engine's own methods again."""
    for obj, name in ((e.runner, "run"), (e, "_propose"), (e, "_verify"), (e, "step")):
        setattr(obj, name, getattr(type(obj), name).__get__(obj))
    if e.adaptive:
        e.adaptive.trim = type(e.adaptive).trim.__get__(e.adaptive)


def table_check(steps: list[tuple[int, int, int, float, int]], table: CostTable) -> str:
    """How the warm-up cost table's prediction compares with the observed forward of pure decode steps:
    the median observed / predicted, for steps at the batch's base tokens, for uniform steps with extra
    tokens, and for ragged ones (predicted with and without the table's ragged cells); the context term
    (`key_slot_s` x the key slots beyond the warm-up's) is in each prediction, and the first is also given
    without it."""
    def ratio(r, n, e, s, over, ragged=True, keys=True):
        return s / (table.lookup(r, n) + (float(table.ragged_array(r, e)) if ragged else 0.0)
                    + (table.key_slot_s * over if keys else 0.0))
    base = [ratio(*x) for x in steps if x[1] == x[0]]
    base_flat = [ratio(*x, keys=False) for x in steps if x[1] == x[0]]
    uniform = [ratio(*x) for x in steps if x[1] > x[0] and not x[2]]
    ragged = [ratio(*x) for x in steps if x[2]]
    flat = [ratio(*x, ragged=False) for x in steps if x[2]]
    med = lambda xs: f"{statistics.median(xs):.2f} (n={len(xs)})" if xs else "-"  # noqa: E731
    return (f"observed/table: 1 token each {med(base)} ({med(base_flat)} without the context term), "
            f"uniform drafts {med(uniform)}, ragged {med(ragged)} "
            f"({med(flat)} without the ragged cells)")


def cut_report(drafts: list[tuple], fixed_k: int = 4) -> str:
    """What the adaptive engine's cuts cost, in steps that also prefill and in decode-only steps: drafted,
    verified and accepted positions, and what would have been accepted had every draft been verified, or
    the first `fixed_k` of each (accepted of verified). Greedy runs only: a request's later tokens are what
    it emitted."""
    out = []
    for mixed, name in ((True, "steps that also prefill"), (False, "decode-only steps")):
        n = v = a = all_a = k_a = k_v = 0
        for req, at, toks, verified, m in drafts:
            if m != mixed:
                continue
            run = 0
            while run < len(toks) and at + run < len(req.tokens) and req.tokens[at + run] == toks[run]:
                run += 1
            n, v, a = n + len(toks), v + verified, a + min(run, verified)
            all_a, k_a, k_v = all_a + run, k_a + min(run, fixed_k), k_v + min(len(toks), fixed_k)
        out.append(f"{name}: drafted {n}, verified {v}, accepted {a} (all drafts verified: {all_a}, "
                   f"the first {fixed_k}: {k_a} of {k_v})")
    return "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--modes", default="ngram:2,ngram:7:adaptive")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=1, help="rounds; each runs every mode once")
    ap.add_argument("--prompts-per-slot", type=int, default=1, help="requests per concurrency slot")
    ap.add_argument("--sustained", action="store_true", help="refill every slot, no drain (workers/bench.py)")
    ap.add_argument("--interleave", type=int, nargs="?", const=1, default=0, metavar="STEPS",
                    help="run a round's modes together, step by step in turn (workers/closed_loop.py)")
    args = ap.parse_args()
    engines = {m: _warmed(LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=_spec(m, 7))), args.max_tokens, 0)
               for m in args.modes.split(",")}
    any_e = next(iter(engines.values()))
    # the warm-up table as measured (on disk), not the copies the adaptive engines refreshed since
    path = target_table_path(any_e)
    table = CostTable.from_json(path.read_text()) if path.exists() else None
    if table is not None:
        table.row_block = next((e.adaptive.cost.row_block for e in engines.values() if e.adaptive), 1)
    n = max(args.concurrency * args.prompts_per_slot, 4)
    c, L = args.concurrency, args.max_tokens
    warm, count = sustained_plan(c, n) if args.sustained else (0, n)
    ps = [any_e.encode_prompt(t, chat=True) for t in workload_prompts(args.workload, count, 0)]
    if args.sustained:  # as the grid: varied output lengths, or no speculation's slots refill in lockstep
        L = varied_lengths(count, L, 0)
    for _ in range(args.rounds):
        if args.interleave:
            for e in engines.values():
                run_ours(e, ps[:2], 2, 4)  # warm-up  # all modes in the same minutes, each timed by its own steps (workers/closed_loop.py)
            probes = {m: instrument(e) for m, e in engines.items()}
            loops = [ClosedLoop(e, ps, c, L, admit=count if args.sustained else None, untimed=warm,
                                on_clock_start=lambda p=probes[m]: reset(p)) for m, e in engines.items()]
            results = dict(zip(engines, run_interleaved(loops, args.interleave)))
            for m, e in engines.items():
                uninstrument(e)
                report(m, e, results[m], probes[m], table)
            continue
        for m, e in engines.items():
            run_ours(e, ps[:2], 2, 4)  # warm-up
            probe = instrument(e)
            r = run_ours(e, ps, c, L, admit=count if args.sustained else None, untimed=warm,
                         on_clock_start=lambda p=probe: reset(p))
            uninstrument(e)
            report(m, e, r, probe, table)


def report(m: str, e: LLMEngine, r: dict, probe: dict, table: CostTable | None) -> None:
    T, k = probe["T"], max(probe["T"]["steps"], 1)
    ms = {x: round(T[x] / k * 1e3, 1) for x in ("step", "fwd", "prop", "trim", "verify")}
    ms["other"] = round(ms["step"] - ms["fwd"] - ms["prop"] - ms["trim"] - ms["verify"], 1)
    pure = probe["decode_steps"]
    pure_s = sum(x[3] for x in pure)
    print(f"{m}: {r['output_tokens_per_s']:.1f} tok/s, {k} steps, ms/step {ms}, tokens/step "
          f"{T['tok'] / k:.1f}, forward of pure decode steps {len(pure)} x {pure_s / max(len(pure), 1) * 1e3:.1f}"
          f" ms, of the others {k - len(pure)} x {(T['fwd'] - pure_s) / max(k - len(pure), 1) * 1e3:.1f} ms"
          f", verified/step {T['vpos'] / k:.2f}, MAL {r['mean_acceptance_length']}, "
          f"acc/pos {r['acceptance_per_position']}"
          + (f", verify lengths {dict(sorted(probe['lengths'].items()))}; steps that also prefill: "
             f"{T['mixed_steps']}, drafting {T['mixed_prop'] * 1e3:.0f} ms of {T['prop'] * 1e3:.0f}, "
             f"verified {T['mixed_vpos']} of {T['vpos']}" if e.adaptive else "")
          + (f"; {table_check(probe['decode_steps'], table)}" if table else ""), flush=True)
    for name, kind in sorted(probe["kinds"].items()):
        k = max(kind["steps"], 1)
        print(f"    {name} steps: {kind['steps']}, tokens/step {kind['tokens'] / k:.2f}, "
              f"forward {kind['fwd'] / k * 1e3:.1f} ms/step")
    if probe["drafts"]:
        print(f"    cuts: {cut_report(probe['drafts'])}")

if __name__ == "__main__":
    main()
