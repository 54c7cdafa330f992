"""GPU check of the engine (no Ray, no network), in stages; each writes its part of $OUT/gpu_check_<stages>.json.

  env     torch, CUDA, the device
  gemm    do SmolLM2's bf16 GEMM rows on this GPU depend on the row count M <= 32 (the batch-invariant
          verify path needs them not to)? Per weight shape: rows that differ from the row computed alone
  model   the embedded default from its GGUF (scripts/gpu_check.sh joins the parts)
  workers tests/workers on CUDA but the default model's (tiny random models; the tokenizer from .gpu/)
  ragged  benchmarks/ragged_groups.py on CUDA (SmolLM2's shape, random weights: call 1 can run it): ragged
          steps' forward under the attention's group prices, 12 (the CPUs') against 4096 (CUDA's)
  lossless the default model's tests on CUDA: greedy output with n-gram, the trained draft and adaptive
          verification equal to no speculation, token for token
  bench   BENCH_METHOD (draft) on BENCH_WORKLOAD (sharegpt) prompts, sustained closed loop, concurrency
          BENCH_CONCURRENCY (8, 32, 128; c=1 took 3.8 min on the H200 at one token a step): no speculation,
          fixed k in BENCH_FIXED (2, 4, 7), adaptive (k <= 7), interleaved, 2 repeats, adaptive's stats (what
          its probes cost) and every engine's step times (forward, drafter, policy, other host work);
          a new point starts only before BENCH_UNTIL; BENCH_PROBE_LOG=1 adds scripts/probe_log.py's log
          (each probe as priced and as run, the drafter's forwards timed apart)
Usage (see scripts/gpu_check.sh): python3 scripts/gpu_check.py env gemm workers ragged | model lossless bench
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT") or "/tmp/gpu_check_out")
# SmolLM2-135M's weight shapes (in, out): qkv, o, gate_up, down, the 49,152-word head
SHAPES = {"qkv": (576, 960), "o": (576, 576), "gate_up": (576, 3072), "down": (1536, 576), "lm_head": (576, 49152)}


def env() -> dict:
    ok = torch.cuda.is_available()
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "available": ok,
            "device": torch.cuda.get_device_name() if ok else None, "python": sys.version.split()[0]}


def gemm() -> dict:
    """Per shape: differing rows of a plain bf16 GEMM against each row alone, for M = 2..32, and what the
    engine's start-up check (invariant_pieces) would choose here."""
    import torch.nn.functional as F

    from workers.gemm_invariance import invariant_pieces

    out = {}
    for name, (k, n) in SHAPES.items():
        g = torch.Generator().manual_seed(0)
        w = torch.randn(n, k, generator=g).to("cuda", torch.bfloat16)
        x = torch.randn(32, k, generator=g).to("cuda", torch.bfloat16)
        alone = torch.cat([F.linear(x[r:r + 1], w) for r in range(32)])
        bad = {m: int((F.linear(x[:m], w) != alone[:m]).any(1).sum()) for m in range(2, 33)}
        t = time.perf_counter()
        pieces = invariant_pieces(torch.bfloat16, k, n, device="cuda")
        out[name] = {"in": k, "out": n, "differing_rows_by_m": {m: b for m, b in bad.items() if b},
                     "invariant_pieces": pieces, "check_s": round(time.perf_counter() - t, 2)}
        print(name, out[name], flush=True)
    return out


def model() -> dict:
    from workers.model_store import prepare_default_model

    from gpu_assets import first_turns_digest  # same folder: this runs as a script
    from workers.workloads import _sharegpt_first_turns

    t = time.perf_counter()
    folder = prepare_default_model()
    want = (ROOT / ".gpu" / "first_turns.sha256").read_text().strip()
    turns = first_turns_digest(_sharegpt_first_turns())
    if turns != want:
        raise RuntimeError("the ShareGPT first turns here differ from the ones the assets were built from")
    return {"folder": str(folder), "prepare_s": round(time.perf_counter() - t, 1), "first_turns_sha256": turns}


def _pytest(args: list[str], timeout: float, log: str, threads: int | None = None) -> dict:
    """`threads`: torch's CPU threads per pytest process (xdist workers each take all cores otherwise)."""
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEx", *args]
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    (OUT / log).write_text(text)
    tail = text.strip().splitlines()[-25:]
    print("\n".join(tail), flush=True)
    return {"args": args, "rc": rc, "seconds": round(time.perf_counter() - t, 1), "tail": tail}


def lossless() -> dict:
    return _pytest(["tests/workers/test_default_model.py", "--durations=8"], 200, "pytest_model.log")


def workers() -> dict:
    # -v: each test's verdict as it ends, so a run cut by the timeout still names its failures (the first
    # run printed only dots: 2 failures of unknown name when 150 s cut it before the summary). 2 threads a
    # worker: with all 16 cores each, the simulator's test (4 s on 2 cores) ran past the 90 s timeout there
    return _pytest(["tests/workers", "-m", "not model", "-n", "8", "-v", "--timeout", "90"], 240, "pytest_workers.log",
                   threads=max(1, (os.cpu_count() or 8) // 8))


def ragged() -> dict:
    out = OUT / "ragged_groups.json"
    cmd = [sys.executable, "benchmarks/ragged_groups.py", "--random-weights", "--device", "cuda", "--contexts",
           "256,1024", "--requests", "32,128", "--settings", "12,4096", "--repeats", "3", "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    print(r.stdout[-3000:] + r.stderr[-2000:], flush=True)
    return {"command": " ".join(cmd[1:]), "rc": r.returncode,
            "result": json.loads(out.read_text()) if out.exists() else None}


def bench() -> dict:
    from dataclasses import asdict

    from workers.bench import _ENGINES, run_bench  # _ENGINES: the engines run_bench keeps (warmed, across points)

    until = float(os.environ.get("BENCH_UNTIL", time.time() + 180))
    method, workload = os.environ.get("BENCH_METHOD", "draft"), os.environ.get("BENCH_WORKLOAD", "sharegpt")
    fixed = [int(k) for k in os.environ.get("BENCH_FIXED", "2,4,7").split(",") if k]
    modes = ["off"] + [f"{method}:{k}" for k in fixed] + [f"{method}:7:adaptive"]
    rows, done, before = [], [], {}
    if os.environ.get("BENCH_PROBE_LOG"):
        import probe_log  # same folder: this runs as a script

        probe_log.install()
    for c in [int(x) for x in os.environ.get("BENCH_CONCURRENCY", "8,32,128").split(",")]:
        if time.time() > until:
            break
        t = time.perf_counter()
        got = run_bench([workload], [c], modes, 7, 48, [], 2, 0, "auto", None, repeat=2, sustained=True,
                        kv_cache_memory_gb=float(os.environ.get("BENCH_KV_GB", 8)), min_requests=16, interleave=1)
        rows += [asdict(r) for r in got]
        done.append({"concurrency": c, "seconds": round(time.perf_counter() - t, 1)})
        print(f"c={c}: " + ", ".join(f"{r.mode}:{r.k} {r.output_tokens_per_s:.0f}" for r in got), flush=True)
        # adaptive's counters so far (cumulative), and where this point's steps went in every engine
        done[-1]["adaptive_stats"] = {m: e.stats()["adaptive"] for (m, _, _), e in _ENGINES.items()
                                      if e.adaptive is not None}
        done[-1]["step_times"] = {m: _since(e.step_times, before.get(m)) for (m, _, _), e in _ENGINES.items()}
        before = {m: asdict(e.step_times) for (m, _, _), e in _ENGINES.items()}
        if os.environ.get("BENCH_PROBE_LOG"):
            done[-1]["probe_log"] = probe_log.take()
        print("step times (ms per step):", json.dumps(done[-1]["step_times"]), flush=True)
        _save({"bench": {"points": done, "rows": rows}}, "bench_partial")
    tables = OUT / "cost_tables"
    src = Path(os.environ.get("SPECFLEET_CACHE", Path.home() / ".cache" / "specfleet")) / "cost_tables"
    if src.exists():
        shutil.copytree(src, tables, dirs_exist_ok=True)
    return {"points": done, "rows": rows}


def _since(times, then: dict | None) -> dict:
    """An engine's `StepTimes` over one point: its sums now less those at the point's start."""
    from dataclasses import asdict, fields

    from workers.metrics import StepTimes

    now, then = asdict(times), then or {}

    def less(name: str):
        if isinstance(now[name], dict):  # policy_calls: seconds by call
            return {k: v - then.get(name, {}).get(k, 0.0) for k, v in now[name].items()}
        return now[name] - then.get(name, 0)

    return StepTimes(**{f.name: less(f.name) for f in fields(StepTimes)}).to_dict()


def _save(report: dict, tag: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"gpu_check_{tag}.json").write_text(json.dumps(report, indent=1, default=str))


def main() -> None:
    stages = sys.argv[1:] or ["env", "gemm"]
    tag = "_".join(stages)
    report: dict = {"stages": stages, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name in stages:
        t = time.perf_counter()
        try:
            report[name] = globals()[name]()
        except Exception as e:  # one stage's failure is reported; the next stages still run
            report[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"stage {name} failed: {e!r}", flush=True)
        print(f"== {name}: {time.perf_counter() - t:.1f} s", flush=True)
        _save(report, tag)


if __name__ == "__main__":
    main()
