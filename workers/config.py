"""User-facing configuration, validated with pydantic (bad values are clear errors)."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SpecMethod = Literal["off", "ngram", "draft"]
VerifyMode = Literal["fixed", "adaptive", "adaptive-global"]
PlanCalibrationMode = Literal["off", "time", "time+survival"]
DType = Literal["auto", "float32", "bfloat16", "float16"]

MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 256


class SamplingParams(BaseModel):
    """Per-request sampling parameters (OpenAI-compatible meanings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int = Field(16, ge=1, le=1_000_000, description="Maximum number of tokens to generate.")
    temperature: float = Field(1.0, ge=0.0, le=100.0, description="0 means greedy (argmax) decoding.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling: keep the smallest set with mass >= top_p.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 disables.")
    seed: int | None = Field(None, ge=0, lt=2**63, description="Makes sampling reproducible for this request.")
    stop: list[str] = Field(default_factory=list, description="Stop strings; not included in the output.")
    stop_token_ids: list[int] = Field(default_factory=list, description="Extra token ids that end generation.")
    ignore_eos: bool = Field(False, description="Keep generating past the end-of-sequence token.")

    @field_validator("temperature", "top_p")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("stop")
    @classmethod
    def _stop_limits(cls, v: list[str]) -> list[str]:
        if len(v) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(v)}")
        for s in v:
            if not s:
                raise ValueError("stop strings must not be empty")
            if len(s) > MAX_STOP_STRING_CHARS:
                raise ValueError(f"a stop string may have at most {MAX_STOP_STRING_CHARS} characters")
        return v

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# k when none is given: what the adaptive grid measured (benchmarks/adaptive_engine.py). Adaptive verification
# verifies only what pays, so it drafts deep: n-gram drafts cost nothing (15, bounded under load by
# `k_under_load`), the trained draft's cost drafter time (7). n-gram at 1-8 requests, adaptive k=4 read 0.93-0.99x
# of adaptive k=7 and k=15 0.99-1.03x (docs/performance.md, "twentieth session"). Fixed k verifies every draft: 4.
DEFAULT_K = 4
ADAPTIVE_DEFAULT_K = {"ngram": 15, "draft": 7}


def default_k(method: str, verify: str) -> int:
    """The draft depth a configuration gets when it names none."""
    return DEFAULT_K if verify == "fixed" else ADAPTIVE_DEFAULT_K.get(method, DEFAULT_K)


class SpecConfig(BaseModel):
    """Speculative decoding: which proposer and how many draft tokens per step."""

    model_config = ConfigDict(extra="forbid")

    method: SpecMethod = Field("off", description="off | ngram (prompt lookup) | draft (a small causal LM).")
    k: int = Field(DEFAULT_K, ge=1, le=32, description="Draft tokens proposed per request per step; when not "
                   "given: 15 for n-gram and 7 for a draft model with adaptive verification, 4 with fixed k.")
    ngram_min: int = Field(2, ge=1, le=16, description="Shortest suffix the n-gram proposer tries to match "
                           "(1-token matches measured poor: 0.59 vs 0.78 tokens per computed position).")
    ngram_max: int = Field(4, ge=1, le=16, description="Longest suffix the n-gram proposer tries to match.")
    draft_model: str | None = Field(None, description="Draft model: a local HF folder with the target's tokenizer, "
                                    "or a shipped draft's name; default: the draft trained for the embedded "
                                    "default (workers/assets/smollm2-135m-draft).")
    draft_top_k: int = Field(32, ge=1, le=1024, description="Support of the draft's sampling distribution (exactly sparse).")
    verify: VerifyMode = Field("fixed", description="fixed: verify every draft; adaptive: verify the positions "
                               "whose expected tokens per second pay off (estimators + warm-up cost table), "
                               "decided by each engine; adaptive-global: the same, with draft capacity of "
                               "drafters shared by several replicas allocated by the cluster's budget actor "
                               "(an engine outside a cluster plans locally).")
    k_under_load: int = Field(7, ge=0, le=32, description="Adaptive: with k above this, a request drafts more "
                              "than this only in pure decode steps whose decoding requests fit deep_draft_rows "
                              "rows at that depth (k+1 rows each); in steps that also prefill, and at higher "
                              "load, at most this. n-gram k=15 measured +2.8% over k=7 at 2 requests and 1-2% "
                              "under it at 8-32 (docs/performance.md).")
    deep_draft_rows: int = Field(32, ge=1, description="Adaptive: the rows that all decoding requests' drafts "
                                 "deeper than k_under_load must fit in (32: one row block of the CPU's "
                                 "batch-invariant path: depth 15 at 1-2 requests, 9 at 3).")
    k_waiting: int | None = Field(4, ge=0, le=32, description="Adaptive: in steps that also prefill, drafts deeper "
                                  "than this only while every decoding request's rows fit deep_draft_rows (7 at "
                                  "1-4 requests, 5 at 5, 4 from 6; None: no bound). n-gram at repetitive c=32 measured "
                                  "+3-7% over 7 there, c=8-32 otherwise within 0.5% (docs/performance.md).")
    cost_table_budget_s: float = Field(60.0, gt=0, description="Time bound of the warm-up cost measurement.")
    calibrate_plan: PlanCalibrationMode = Field(
        "time", description="Adaptive, draft model: scale the draft-depth plan by how its "
        "predictions fared on the steps it chose (workers/plan_calibration.py). time: the step times of "
        "drafting and of not drafting (pure decode steps), and in steps that also prefill each position's "
        "survival; time+survival: also each position's survival in pure decode steps; "
        "off: none of these. true/false read as time+survival/off. See docs/performance.md for the A/Bs "
        "behind the default.")

    @model_validator(mode="before")
    @classmethod
    def _default_k(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("k") is None:
            data = {**data, "k": default_k(data.get("method", "off"), data.get("verify", "fixed"))}
        return data

    @field_validator("calibrate_plan", mode="before")
    @classmethod
    def _calibrate_plan_bool(cls, v: object) -> object:  # the switch was a bool before the time-only mode
        return ("time+survival" if v else "off") if isinstance(v, bool) else v

    @model_validator(mode="after")
    def _check(self) -> "SpecConfig":
        if self.ngram_min > self.ngram_max:
            raise ValueError("ngram_min must be <= ngram_max")
        return self


class EngineConfig(BaseModel):
    """Engine sizing: model, dtype, KV-cache budget and the scheduler's limits."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("smollm2-135m-instruct", description="'smollm2-135m-instruct' or a local HF folder.")
    dtype: DType = Field("auto", description="auto = bfloat16 on CUDA and on CPUs with AMX/AVX512-BF16, else float32.")
    batch_invariant: bool = Field(True, description="Compute linear layers in row blocks whose results do not "
                                  "depend on the batch, so speculation cannot change greedy output (costs "
                                  "throughput on steps above 32 tokens).")
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N")
    block_size: int = Field(16, ge=1, le=256, description="Tokens per KV-cache block.")
    kv_cache_memory_gb: float = Field(1.0, gt=0, description="Memory for the KV cache (sizes the block pool).")
    max_num_seqs: int = Field(64, ge=1, le=4096, description="Cap on sequences running at once.")
    max_num_batched_tokens: int = Field(512, ge=16, description="Per-step token budget (chunked prefill).")
    max_model_len: int | None = Field(None, ge=16, description="Context limit; default the model's.")
    enable_prefix_caching: bool = Field(True, description="Share full KV blocks by a hash of their prefix.")
    num_threads: int | None = Field(None, ge=1, description="torch CPU threads; default all cores.")
    heap_trim_interval_s: float = Field(10.0, ge=0, description="Return freed heap memory to the OS (glibc "
                                        "malloc_trim) at most this often; 0 disables. Without it resident "
                                        "memory creeps up under mixed load.")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="Target shards per replica (tensor parallel, "
                                      "one GPU each). Above 1 the engine needs its peer shards: the cluster "
                                      "starts them as Ray actors in the replica's placement group.")
    spec: SpecConfig = Field(default_factory=SpecConfig)
