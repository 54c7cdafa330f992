"""Offline closed-loop benchmark: our engine side by side with Hugging Face `generate` in one run.

Closed loop: `concurrency` requests are in flight at all times until the prompt list is done; greedy, EOS
ignored, so every configuration writes the same tokens.
Drained (the default): every prompt generates exactly `max_tokens` tokens and runs to its end, so the run also
times the drain, where the load falls from `concurrency` to 1 and a token that ends one request early buys only
a smaller batch later. With one request per slot that is most of the run, and it counts against speculation
(n-gram, ShareGPT, c=4: adaptive / max(no speculation, k=2) 0.95-0.97 drained with 2 requests per slot, 1.005
with 8).
Sustained (`sustained=True`): every slot is refilled from a supply of distinct prompts. The first wave of c
prompts, which all arrive at once, is a warm-up: the clock starts as the first refill enters. It stops at the
first step after which the next `requests` prompts are all in and a slot is free (one more would enter), so
every configuration prefills the same prompts in its window and ends it as a request finishes, with c - 1
still busy. Output lengths vary (uniform over [max_tokens/3, 5 max_tokens/3], one seeded draw per prompt, the
same for every configuration), as a served load's do.
Why this window: a window that stops at a token count lets faster configurations admit (and prefill) more
prompts, and ShareGPT prompt lengths vary 10x: speculative configurations admitted +19-24% more prompt tokens
than no speculation (n-gram, ShareGPT, c=32; 4-7% with varied lengths, `benchmarks/sustained_window.py`), and
at c <= 4 one prompt more or less moved a point by several percent. The first wave is a transient that cost
speculation more than no speculation: at c=32 (n-gram, ShareGPT) the first 63 admissions timed k=2 at 0.953x
of no speculation in two runs, against 0.97-1.00x over 256 (adaptive: 0.965-0.970x against 0.97-1.00x;
docs/performance.md, "The window"). Each row records the prompt tokens its window admitted.
HF `generate` has no continuous batching: it runs static batches of `concurrency` prompts (left-padded);
its prompt lookup (assisted generation) only supports batch size 1, so it runs one request at a time.
"""
from __future__ import annotations

from collections.abc import Callable

import json
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from workers.closed_loop import ClosedLoop, run_interleaved
from workers.config import EngineConfig, SpecConfig
from workers.engine import LLMEngine
from workers.metrics import StepTimes
from workers.model_runner import ModelRunner, StepChunk
from workers.workloads import repetitive_prompts, sharegpt_prompts


@dataclass
class BenchRow:
    engine: str  # specfleet | hf
    mode: str  # off | ngram | draft
    k: int
    drafter: str | None
    workload: str
    concurrency: int
    num_requests: int
    output_tokens: int
    seconds: float
    output_tokens_per_s: float  # median over repeats
    samples_tokens_per_s: list[float] | None = None  # every repeat, in run order
    mean_acceptance_length: float | None = None
    acceptance_per_position: list[float] | None = None
    tokens_per_computed_position: float | None = None
    # prompt tokens of the requests admitted in the timed window: sustained runs of different configurations
    # may admit different prompts (ShareGPT lengths vary 10x), and their prefill is part of the time
    prompt_tokens: int | None = None
    ttft_p50_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    note: str = ""


def prefilled_step(runner: ModelRunner, rows: list[int], context: int,
                   gen: torch.Generator) -> tuple[list[StepChunk], list[int]]:
    """Sequences of `context` random tokens, each prefilled on its own, and one step computing `rows[i]` more
    positions of sequence i (every one a logits row); the caller frees the KV blocks returned."""
    per = -(-(context + max(rows)) // runner.block_size)
    blocks = runner.pool.allocate(len(rows) * per)
    tables = [blocks[i * per:(i + 1) * per] for i in range(len(rows))]
    for t in tables:
        runner.run([StepChunk(torch.randint(100, 10000, (context,), generator=gen).tolist(), 0, t, 0)])
    step = [StepChunk(torch.randint(100, 10000, (n,), generator=gen).tolist(), context, t, n)
            for n, t in zip(rows, tables)]
    return step, blocks


def workload_prompts(name: str, n: int, seed: int) -> list[str]:
    return {"sharegpt": sharegpt_prompts, "repetitive": repetitive_prompts}[name](n, seed=seed)


def sustained_plan(concurrency: int, requests: int, waves: int = 1) -> tuple[int, int]:
    """(warm-up prompts, prompts admitted in all) for a sustained run (`run_ours(untimed=, admit=)`) that
    times `requests` prompts after the first `waves` waves of `concurrency` prompts. Right after the first
    wave the slots hold what it left: its slowest requests, as the fast ones finished first. A policy whose
    requests' speeds spread more (adaptive) is charged for that until the batch mixes again (n-gram,
    repetitive c=32: the 64 prompts after the first wave read adaptive 2-4 points under the 256 after it,
    docs/performance.md, "How many prompts a point needs"); a second untimed wave lets it mix first."""
    return waves * concurrency, waves * concurrency + requests


def varied_lengths(count: int, mean: int, seed: int) -> list[int]:
    """One output length per prompt, uniform over [mean/3, 5 mean/3] (so its mean is `mean`), seeded."""
    rng = random.Random(seed)
    return [rng.randint(max(1, round(mean / 3)), round(5 * mean / 3)) for _ in range(count)]


def point_sample(engine: LLMEngine, workload: str, count: int, max_tokens: int, seed: int,
                 sustained: bool) -> tuple[list[list[int]], int | list[int]]:
    """A point's prompts (as chat prompts of `engine`) and output lengths: varied per prompt when sustained."""
    prompts = [engine.encode_prompt(t, chat=True) for t in workload_prompts(workload, count, seed)]
    return prompts, varied_lengths(count, max_tokens, seed) if sustained else max_tokens


def run_ours(engine: LLMEngine, prompts: list[list[int]], concurrency: int, max_tokens: int | list[int],
             stop_after_tokens: int | None = None, admit: int | None = None, untimed: int = 0,
             on_clock_start: Callable[[], None] | None = None) -> dict:
    """Closed loop over `prompts` (`max_tokens`: for every request, or one per prompt). With `admit`, the first
    `admit` prompts are served and the run stops (in-flight requests aborted) at the first step after which
    they are all in and a slot is free. With `stop_after_tokens`, the prompts are cycled and the run stops at
    the first step by which that many tokens were emitted. The first `untimed` prompts are a warm-up: the
    clock, the counts and the engine's statistics start as the next one enters."""
    loop = ClosedLoop(engine, prompts, concurrency, max_tokens, stop_after_tokens, admit, untimed, on_clock_start)
    while not loop.done():
        loop.tick()
    return loop.finish()


def run_hf(model, tok, prompts: list[list[int]], concurrency: int, max_tokens: int, lookup_k: int = 0) -> dict:
    out_tokens = 0
    batch = 1 if lookup_k else concurrency
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        width = max(map(len, chunk))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        kw = dict(prompt_lookup_num_tokens=lookup_k) if lookup_k else {}
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                                 min_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id, **kw)
        out_tokens += (out.shape[1] - width) * len(chunk)
    dt = time.perf_counter() - t0
    return dict(output_tokens=out_tokens, seconds=dt, output_tokens_per_s=out_tokens / dt)


def _spec(mode: str, default_k: int) -> SpecConfig:
    """'off', 'ngram', 'ngram:8', 'ngram:8:adaptive' (method[:k[:verify]]). A suffix '#name' ('ngram:7#copy')
    asks for another engine of the same configuration (a placebo: how far two identical engines read apart)."""
    method, k, verify = (mode.partition("#")[0].split(":") + ["", ""])[:3]
    if method == "off":
        return SpecConfig()
    return SpecConfig(method=method, k=int(k) if k else default_k, verify=verify or "fixed")


def run_bench(workloads: list[str], concurrencies: list[int], modes: list[str], k: int, max_tokens: int,
              peers: list[str], prompts_per_slot: int, seed: int, dtype: str, out: Path | None,
              repeat: int = 1, kv_cache_memory_gb: float = 1.0, sustained: bool = False,
              min_requests: int = 4, interleave: int = 0, fresh_prompts: bool = False,
              untimed_waves: int = 1) -> list[BenchRow]:
    """Every configuration `repeat` times (drained or sustained: see the module doc) over
    max(`prompts_per_slot` x c, `min_requests`) requests per point. The repeats of one (workload, concurrency)
    point run back to back, each cycling through all configurations, so a slow period of this noisy machine
    hits every configuration of the point alike; each row reports the median tokens/s and keeps every
    sample. With `interleave` = n > 0, the configurations of a repeat run together, n steps each in turn, each
    timed by its own steps (workers/closed_loop.py): drift within a repeat then falls on all of them alike too;
    latencies are not reported. With `fresh_prompts`, repeat r serves its own sample of prompts and output
    lengths (seed + r; repeat 0 the same as without): a window of a few dozen requests reads which requests
    it holds (n-gram, repetitive, c=32: windows of 32 requests scatter 0.93-1.08 in adaptive / k=2, the same
    in every repeat of one sample; docs/performance.md, "How many prompts a point needs"), so repeats of
    one sample cannot average that out and repeats of fresh samples do. Sustained runs time the requests
    after `untimed_waves` waves of c (`sustained_plan`)."""
    runs = _run_plan(workloads, concurrencies, modes, k, max_tokens, peers, prompts_per_slot, seed, dtype, repeat,
                     kv_cache_memory_gb, sustained, min_requests, interleave, fresh_prompts, untimed_waves)
    rows = []
    for group in zip(*runs):
        samples = [g.output_tokens_per_s for g in group]
        # the middle sample's counts (the lower middle for an even number) and the median tokens/s
        med = sorted(group, key=lambda g: g.output_tokens_per_s)[(len(group) - 1) // 2]
        rows.append(BenchRow(**{**asdict(med), "output_tokens_per_s": statistics.median(samples),
                                "samples_tokens_per_s": [round(x, 2) for x in samples]}))
    if out is not None:
        _write(out, rows, max_tokens, seed, dtype, repeat, sustained, fresh_prompts)
    return rows


_ENGINES: dict[tuple[str, int, str], LLMEngine] = {}
ADAPTIVE_WARMUP_REQUESTS = 16


def _warmed(engine: LLMEngine, max_tokens: int, seed: int) -> LLMEngine:
    """Adaptive engines are measured in steady state, as a running server is: first they serve 16 ShareGPT
    requests (other prompts than the measured ones) so the estimator has refit past its warm-up (during
    which it verifies full drafts)."""
    if engine.adaptive is not None:
        prompts = [engine.encode_prompt(p, chat=True) for p in sharegpt_prompts(ADAPTIVE_WARMUP_REQUESTS,
                                                                                  seed=seed + 1000)]
        run_ours(engine, prompts, 8, max_tokens)
        engine.step_times = StepTimes()  # stats()["step_times"]: the measured load's steps, not these
    return engine
_HF: dict[str, object] = {}


def _run_plan(workloads: list[str], concurrencies: list[int], modes: list[str], k: int, max_tokens: int,
              peers: list[str], prompts_per_slot: int, seed: int, dtype: str, repeat: int,
              kv_cache_memory_gb: float = 1.0, sustained: bool = False, min_requests: int = 4,
              interleave: int = 0, fresh_prompts: bool = False, untimed_waves: int = 1) -> list[list[BenchRow]]:
    from transformers import AutoModelForCausalLM

    engines = {m: _ENGINES.get((m, k, dtype)) or _ENGINES.setdefault(
        (m, k, dtype), _warmed(LLMEngine(EngineConfig(dtype=dtype, kv_cache_memory_gb=kv_cache_memory_gb,
                                                      spec=_spec(m, k))), max_tokens, seed))
        for m in modes}
    any_engine = next(iter(engines.values()))
    tok = any_engine.tokenizer
    hf = None
    if peers:
        from workers.model_store import resolve_model

        if "hf" not in _HF:
            _HF["hf"] = AutoModelForCausalLM.from_pretrained(str(resolve_model(None)),
                                                             dtype=any_engine.model.dtype).eval()
        hf = _HF["hf"]
    plan = [(w, c) for w in workloads for c in concurrencies]
    runs: list[list[BenchRow]] = [[] for _ in range(repeat)]
    total = len(plan) * (len(modes) + len(peers)) * repeat
    with tqdm(total=total, desc="bench", unit="config") as bar:
        for w, c in plan:
            n = max(prompts_per_slot * c, min_requests)
            warm, count = sustained_plan(c, n, untimed_waves) if sustained else (0, n)
            for rep in range(repeat):
                if rep == 0 or fresh_prompts:
                    prompts, lengths = point_sample(any_engine, w, count, max_tokens, seed + rep if fresh_prompts
                                                    else seed, sustained)
                rows = runs[rep]
                loops = {}
                for m, eng in engines.items():
                    run_ours(eng, prompts[:2], 2, 4)  # warm-up
                    if interleave:
                        loops[m] = ClosedLoop(eng, prompts, c, lengths, admit=count if sustained else None, untimed=warm)
                together = dict(zip(loops, run_interleaved(list(loops.values()), interleave))) if interleave else {}
                for m, eng in engines.items():
                    r = together.get(m) or run_ours(eng, prompts, c, lengths, admit=count if sustained else None,
                                                    untimed=warm)
                    spec = eng.config.spec
                    mode = spec.method + (f"-{spec.verify}" if spec.method != "off" and spec.verify != "fixed" else "")
                    rows.append(BenchRow("specfleet", mode, eng.k, None, w, c, **r))
                    bar.set_postfix_str(f"{w} c={c} ours-{m}: {r['output_tokens_per_s']:.1f} tok/s")
                    bar.update()
                for p in peers:
                    rows.append(_run_peer(p, rows, hf, tok, prompts[:n], w, c, k, max_tokens, prompts_per_slot,
                                          min(concurrencies)))
                    bar.set_postfix_str(f"{w} c={c} {p}: {rows[-1].output_tokens_per_s:.1f} tok/s")
                    bar.update()
    return runs


def _run_peer(p: str, rows: list[BenchRow], hf, tok, prompts, w: str, c: int, k: int, max_tokens: int,
              prompts_per_slot: int, c_min: int) -> BenchRow:
    lookup = k if p == "hf-pld" else 0
    if lookup and c > 1:  # batch-1 only: the c=1 figure applies to every concurrency
        prev = next(x for x in rows if x.engine == "hf" and x.mode == "ngram" and x.workload == w
                    and x.concurrency == c_min)
        return BenchRow(**{**asdict(prev), "concurrency": c,
                           "note": "HF assisted generation runs batch 1 only; measured at c=1"})
    r = run_hf(hf, tok, prompts if not lookup else prompts[:max(4, prompts_per_slot)], c, max_tokens, lookup)
    return BenchRow("hf", "ngram" if lookup else "off", lookup, None, w, c,
                    len(prompts) if not lookup else max(4, prompts_per_slot), **r)


def _write(out: Path, rows: list[BenchRow], max_tokens: int, seed: int, dtype: str, repeat: int,
           sustained: bool = False, fresh_prompts: bool = False) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"dtype": str(next(iter(_ENGINES.values())).model.dtype), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "machine": platform.machine(), "max_tokens": max_tokens, "seed": seed,
            "repeat": repeat, "statistic": "median tokens/s over repeats", "sustained": sustained,
            "fresh_prompts": fresh_prompts,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))


def format_table(rows: list[BenchRow]) -> str:
    lines = ["| workload | c | engine | mode | k | tok/s | mean acc. len | TTFT p50 ms | ITL p50 ms | ITL p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r.workload} | {r.concurrency} | {r.engine} | {r.mode} | {r.k} | {r.output_tokens_per_s:.1f} "
                     f"| {f(r.mean_acceptance_length, 2)} | {f(r.ttft_p50_ms)} | {f(r.itl_p50_ms)} | {f(r.itl_p99_ms)} |")
    return "\n".join(lines)
