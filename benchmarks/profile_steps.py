"""Where an engine step's time goes at c=32 (ShareGPT): fixed n-gram k=2 vs adaptive k<=7, per step: forward,
proposer, adaptive trim, verification, tokens and verified positions. Usage: python benchmarks/profile_steps.py"""
import time, statistics as st
from workers.engine import LLMEngine
from workers.config import EngineConfig, SpecConfig
from workers.bench import run_ours, _warmed, workload_prompts
mk = lambda spec: LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=spec))
engs = {"ngram2": mk(SpecConfig(method="ngram", k=2)), "ada": _warmed(mk(SpecConfig(method="ngram", k=7, verify="adaptive")), 48, 0)}
ps = [engs["ngram2"].encode_prompt(t, chat=True) for t in workload_prompts("sharegpt", 32, 0)]
for n, e in engs.items():
    T = {"fwd": 0, "prop": 0, "step": 0, "trim": 0, "verify": 0, "steps": 0, "tok": 0, "vpos": 0}
    rr, pp, vv = e.runner.run, e._propose, e._verify
    def run(chunks, **kw):
        t = time.perf_counter(); o = rr(chunks, **kw); T["fwd"] += time.perf_counter() - t; T["tok"] += sum(len(c.token_ids) for c in chunks); return o
    def prop(d):
        t = time.perf_counter(); o = pp(d); T["prop"] += time.perf_counter() - t; return o
    def ver(*a):
        t = time.perf_counter(); o = vv(*a); T["verify"] += time.perf_counter() - t; return o
    e.runner.run, e._propose, e._verify = run, prop, ver
    if e.adaptive:
        tr = e.adaptive.trim
        def trim(p, plan):
            t = time.perf_counter(); tr(p, plan); T["trim"] += time.perf_counter() - t; T["vpos"] += int(p.num_drafts.sum())
        e.adaptive.trim = trim
    st_ = e.step
    def step():
        t = time.perf_counter(); o = st_(); T["step"] += time.perf_counter() - t; T["steps"] += 1; return o
    e.step = step
    r = run_ours(e, ps, 32, 48)
    k = T["steps"]
    print(n, round(r["output_tokens_per_s"], 1), "steps", k, {x: round(T[x] / k * 1e3, 1) for x in ("step", "fwd", "prop", "trim", "verify")}, "tok/step", round(T["tok"] / k, 1), "vpos/step", round(T["vpos"] / k, 1), "MAL", r["mean_acceptance_length"])
