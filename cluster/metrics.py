"""Replica metrics exported through `ray.util.metrics` (so they appear in the Ray dashboard and on each node's
Prometheus port), with vLLM's spec-decode names where one exists, plus per-GPU utilisation and memory from
NVML. Without a GPU (or NVML) the GPU metrics are omitted with one log line."""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)
LATENCY_BUCKETS = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]
GAUGES = {  # metric name -> (help, stats path)
    "num_requests_running": ("requests running", ("running",)),
    "num_requests_waiting": ("requests waiting (queue length)", ("waiting",)),
    "kv_cache_usage_perc": ("fraction of KV blocks in use", None),
    "spec_decode_num_drafts": ("verification steps with drafts", ("spec_decode", "num_drafts")),
    "spec_decode_num_draft_tokens": ("draft tokens verified", ("spec_decode", "num_draft_tokens")),
    "spec_decode_num_accepted_tokens": ("draft tokens accepted", ("spec_decode", "num_accepted_tokens")),
    "spec_decode_mean_acceptance_length": ("1 + accepted / drafts", ("spec_decode", "mean_acceptance_length")),
    "spec_decode_verify_tokens_per_step": ("draft positions verified per step", ("adaptive", "verified_per_step")),
    "budget_global_plans": ("draft-depth plans from the budget actor", ("budget", "global_plans")),
    "budget_local_plans": ("draft-depth plans made locally (actor late or gone)", ("budget", "local_plans")),
}


def _get(stats: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(stats, dict) or key not in stats:
            return None
        stats = stats[key]
    return stats


class ReplicaMetrics:
    def __init__(self, replica_id: str) -> None:
        from ray.util.metrics import Gauge, Histogram

        self.tags = {"replica": replica_id}
        keys = ("replica",)
        self.gauges = {n: Gauge(f"specfleet_{n}", description=h, tag_keys=keys) for n, (h, _) in GAUGES.items()}
        self.per_position = Gauge("specfleet_spec_decode_acceptance_per_position", tag_keys=("replica", "position"),
                                  description="fraction of verification steps accepted up to this position")
        self.ttft = Histogram("specfleet_time_to_first_token_seconds", boundaries=LATENCY_BUCKETS, tag_keys=keys,
                              description="time to first token")
        self.itl = Histogram("specfleet_inter_token_latency_seconds", boundaries=LATENCY_BUCKETS, tag_keys=keys,
                             description="inter-token latency")
        self.gpu = _GpuMetrics(self.tags)

    def observe_latency(self, ttft: float | None, itls: list[float]) -> None:
        if ttft is not None:
            self.ttft.observe(ttft, self.tags)
        for x in itls:
            self.itl.observe(x, self.tags)

    def update(self, stats: dict) -> None:
        for name, (_, path) in GAUGES.items():
            value = _get(stats, path) if path else (
                stats["kv_blocks_used"] / stats["kv_blocks_total"] if stats.get("kv_blocks_total") else None)
            if value is not None:
                self.gauges[name].set(float(value), self.tags)
        for i, v in enumerate(_get(stats, ("spec_decode", "acceptance_per_position")) or []):
            self.per_position.set(float(v), {**self.tags, "position": str(i)})
        self.gpu.update()

    def start(self, stats_fn, every_s: float = 5.0) -> threading.Event:
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                try:
                    self.update(stats_fn())
                except Exception as exc:  # metrics must never take a replica down
                    log.warning("metrics update failed: %r", exc)

        threading.Thread(target=loop, name="replica-metrics", daemon=True).start()
        return stop


class _GpuMetrics:
    def __init__(self, tags: dict) -> None:
        self.handles = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # pynvml.NVMLError_LibraryNotFound on machines without a GPU
            log.info("no NVIDIA GPU visible (%s): GPU utilisation and memory metrics are omitted",
                     type(exc).__name__)
            return
        from ray.util.metrics import Gauge

        self.tags = tags
        self.util = Gauge("specfleet_gpu_utilization_perc", tag_keys=("replica", "gpu"), description="GPU busy %")
        self.mem = Gauge("specfleet_gpu_memory_used_bytes", tag_keys=("replica", "gpu"), description="GPU memory used")

    def update(self) -> None:
        if not self.handles:
            return
        import pynvml

        for i, h in enumerate(self.handles):
            tags = {**self.tags, "gpu": str(i)}
            self.util.set(float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu), tags)
            self.mem.set(float(pynvml.nvmlDeviceGetMemoryInfo(h).used), tags)
