"""Prometheus text exposition of an engine's stats (vLLM's metric names where one exists)."""
from __future__ import annotations


def prometheus_text(stats: dict, prefix: str = "specfleet") -> str:
    lines: list[str] = []

    def put(name: str, value, kind: str = "gauge", help_: str = "", labels: str = "") -> None:
        if value is None:
            return
        if not any(line.startswith(f"# TYPE {prefix}:{name} ") for line in lines):
            lines.append(f"# HELP {prefix}:{name} {help_}")
            lines.append(f"# TYPE {prefix}:{name} {kind}")
        lines.append(f"{prefix}:{name}{labels} {float(value)}")

    spec = stats.get("spec_decode") or {}
    put("spec_decode_num_drafts", spec.get("num_drafts"), "counter", "verification steps with drafts")
    put("spec_decode_num_draft_tokens", spec.get("num_draft_tokens"), "counter", "draft tokens verified")
    put("spec_decode_num_accepted_tokens", spec.get("num_accepted_tokens"), "counter", "draft tokens accepted")
    put("spec_decode_mean_acceptance_length", spec.get("mean_acceptance_length"), help_="1 + accepted / drafts")
    for i, v in enumerate(spec.get("acceptance_per_position") or []):
        put("spec_decode_acceptance_per_position", v, help_="fraction of steps accepted up to position",
            labels=f'{{position="{i}"}}')
    put("num_requests_running", stats.get("running"), help_="requests running")
    put("num_requests_waiting", stats.get("waiting"), help_="requests waiting")
    used, total = stats.get("kv_blocks_used"), stats.get("kv_blocks_total")
    if used is not None and total:
        put("kv_cache_usage_perc", used / total, help_="fraction of KV blocks in use")
    put("prefix_cache_hit_rate", stats.get("prefix_cache_hit_rate"), help_="prefix cache hits / queries")
    put("heap_trims", stats.get("heap_trims"), "counter", "times freed heap memory was returned to the OS")
    put("replicas_unreachable", stats.get("replicas_unreachable"), help_="replicas that did not report (cluster)")
    lat = stats.get("latency") or {}
    for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"):
        put(key, lat.get(key), help_=key.replace("_", " "))
    return "\n".join(lines) + "\n"
