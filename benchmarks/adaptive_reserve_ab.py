"""A/B of the scheduler's draft-budget reservation for adaptive verification (n-gram, k<=7): the current rule
(reserve one more draft than each request verified last step while prompts wait) against reserving k, with
no speculation and fixed k=2 alongside; 3 repeats back to back per point, medians.
Usage: python benchmarks/adaptive_reserve_ab.py"""
import statistics as st, json
from workers.engine import LLMEngine
from workers.config import EngineConfig, SpecConfig
from workers.bench import run_ours, _warmed, workload_prompts
mk = lambda spec: LLMEngine(EngineConfig(kv_cache_memory_gb=0.5, spec=spec))
engs = {"off": mk(SpecConfig()), "ngram2": mk(SpecConfig(method="ngram", k=2)),
        "ada_new": _warmed(mk(SpecConfig(method="ngram", k=7, verify="adaptive")), 48, 0),
        "ada_old": _warmed(mk(SpecConfig(method="ngram", k=7, verify="adaptive")), 48, 0)}
old = engs["ada_old"].scheduler.schedule
engs["ada_old"].scheduler.schedule = lambda k, adaptive_drafts=False: old(k)
for w, c in (("sharegpt", 32), ("repetitive", 32), ("sharegpt", 16)):
    ps = [engs["off"].encode_prompt(t, chat=True) for t in workload_prompts(w, c, 0)]
    res = {n: [] for n in engs}
    for rep in range(3):
        for n, e in engs.items():
            res[n].append(round(run_ours(e, ps, c, 48)["output_tokens_per_s"], 1))
    print(w, c, json.dumps({n: (st.median(v), v) for n, v in res.items()}), flush=True)
