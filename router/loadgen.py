"""A closed-loop load generator for the OpenAI-compatible API (`specfleet loadgen`).

`concurrency` clients each hold multi-turn chat conversations: the first user turn is a ShareGPT prompt (or,
with probability `long_fraction`, a long prompt of about `long_prompt_tokens` tokens), later turns append the
reply and another ShareGPT prompt, up to `turns`. Each request streams with probability `stream_fraction`;
a streaming one disconnects after a few chunks with probability `disconnect_fraction`. Bounded by time and
count, seeded, with a progress bar. Every request is recorded (start, end, outcome, TTFT, tokens), so the
report can give latency before / during / after a fault.
"""
from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import asdict, dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class LoadgenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field("http://127.0.0.1:8000", description="Server base URL (without /v1).")
    model: str = Field("smollm2-135m-instruct", description="Model name sent in requests.")
    concurrency: int = Field(8, ge=1, le=4096, description="Clients, each with one request in flight.")
    duration_s: float = Field(60.0, gt=0, description="Stop starting requests after this long.")
    max_requests: int = Field(1_000_000, ge=1, description="Stop after this many requests.")
    seed: int = Field(0, description="Seeds prompts and every random choice.")
    max_tokens: tuple[int, int] = Field((16, 96), description="max_tokens drawn uniformly from this range.")
    turns: int = Field(3, ge=1, description="Turns per conversation.")
    stream_fraction: float = Field(0.5, ge=0, le=1)
    disconnect_fraction: float = Field(0.0, ge=0, le=1, description="Of streaming requests: hang up early.")
    long_fraction: float = Field(0.0, ge=0, le=1, description="Conversations opening with a long prompt.")
    long_prompt_tokens: int = Field(1500, ge=16, description="About this many tokens (4 characters each).")
    api_key: str | None = Field(None, description="Sent as 'Authorization: Bearer ...'.")
    timeout_s: float = Field(300.0, gt=0, description="A request taking longer counts as hung.")


@dataclass(slots=True)
class Record:
    start: float
    end: float = 0.0
    outcome: str = "ok"  # ok | disconnected | http_<code> | stream_error_<type> | timeout | <exception name>
    stream: bool = False
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    completion_tokens: int = 0


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def summarise(records: list[Record], wall_s: float) -> dict:
    done = [r for r in records if r.outcome == "ok"]
    kinds: dict[str, int] = {}
    for r in records:
        kinds[r.outcome] = kinds.get(r.outcome, 0) + 1
    lat = [r.end - r.start for r in done]
    ttft = [r.ttft for r in done if r.ttft is not None]
    itl = [g for r in done for g in r.itl]
    return {"requests": len(records), "outcomes": kinds, "wall_s": round(wall_s, 2),
            "output_tokens_per_s": round(sum(r.completion_tokens for r in done) / wall_s, 2) if wall_s else 0.0,
            "latency_p50": percentile(lat, 0.5), "latency_p99": percentile(lat, 0.99), "ttft_p50": percentile(ttft, 0.5),
            "ttft_p99": percentile(ttft, 0.99), "itl_p50": percentile(itl, 0.5), "itl_p99": percentile(itl, 0.99),
            "latency_mean": round(statistics.fmean(lat), 4) if lat else None}


class Loadgen:
    def __init__(self, cfg: LoadgenConfig, prompts: list[str]) -> None:
        self.cfg, self.prompts = cfg, prompts
        self.rng = random.Random(cfg.seed)
        self.records: list[Record] = []
        self._started = 0

    def _long_prompt(self) -> str:
        text, want = "", self.cfg.long_prompt_tokens * 4
        while len(text) < want:
            text += self.rng.choice(self.prompts) + "\n\n"
        return "Summarise the following notes.\n\n" + text[:want]

    async def _request(self, client, messages: list[dict]) -> str:
        cfg = self.cfg
        stream = self.rng.random() < cfg.stream_fraction
        hang_up = stream and self.rng.random() < cfg.disconnect_fraction
        body = {"model": cfg.model, "messages": messages, "max_tokens": self.rng.randint(*cfg.max_tokens),
                "temperature": self.rng.choice([0.0, 0.7]), "seed": self.rng.randrange(2**31), "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        rec = Record(time.monotonic(), stream=stream)
        self.records.append(rec)
        text = ""
        try:
            async with asyncio.timeout(cfg.timeout_s):
                if not stream:
                    r = await client.post("/v1/chat/completions", json=body)
                    if r.status_code != 200:
                        rec.outcome = f"http_{r.status_code}"
                        return ""
                    data = r.json()
                    rec.ttft = time.monotonic() - rec.start
                    rec.completion_tokens = data["usage"]["completion_tokens"]
                    return data["choices"][0]["message"]["content"]
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        await r.aread()
                        rec.outcome = f"http_{r.status_code}"
                        return ""
                    last, chunks = None, 0
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        data = json.loads(line[6:])
                        if data.get("error"):  # the server ended the stream with an error event
                            rec.outcome = f"stream_error_{data['error'].get('type', 'unknown')}"
                            return text
                        if data.get("usage"):
                            rec.completion_tokens = data["usage"]["completion_tokens"]
                        if not data.get("choices"):
                            continue
                        now = time.monotonic()
                        if last is None:
                            rec.ttft = now - rec.start
                        else:
                            rec.itl.append(now - last)
                        last, chunks = now, chunks + 1
                        text += data["choices"][0]["delta"].get("content") or ""
                        if hang_up and chunks >= 3:
                            rec.outcome = "disconnected"
                            return text
            return text
        except TimeoutError:
            rec.outcome = "timeout"
            return ""
        except Exception as exc:  # noqa: BLE001 - every failure is counted by kind
            rec.outcome = type(exc).__name__
            return ""
        finally:
            rec.end = time.monotonic()

    async def _client_loop(self, client, deadline: float, bar) -> None:
        cfg = self.cfg
        while time.monotonic() < deadline and self._started < cfg.max_requests:
            first = self._long_prompt() if self.rng.random() < cfg.long_fraction else self.rng.choice(self.prompts)
            messages = [{"role": "user", "content": first}]
            for _ in range(cfg.turns):
                if time.monotonic() >= deadline or self._started >= cfg.max_requests:
                    return
                self._started += 1
                reply = await self._request(client, messages)
                bar.update(1)
                if self.records[-1].outcome not in ("ok",):
                    break
                messages += [{"role": "assistant", "content": reply},
                             {"role": "user", "content": self.rng.choice(self.prompts)}]

    async def run(self) -> dict:
        import httpx
        from tqdm import tqdm

        cfg = self.cfg
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        limits = httpx.Limits(max_connections=cfg.concurrency + 4)
        t0 = time.monotonic()
        async with httpx.AsyncClient(base_url=cfg.url, headers=headers, timeout=cfg.timeout_s, limits=limits) as c:
            with tqdm(total=None, desc=f"loadgen c={cfg.concurrency}", unit="req") as bar:
                await asyncio.gather(*[self._client_loop(c, t0 + cfg.duration_s, bar) for _ in range(cfg.concurrency)])
        wall = time.monotonic() - t0
        return {"config": cfg.model_dump(mode="json", exclude={"api_key"}), "summary": summarise(self.records, wall),
                "records": [dict(asdict(r), start=round(r.start - t0, 4), end=round(r.end - t0, 4), itl=None)
                            for r in self.records]}


def run_loadgen(cfg: LoadgenConfig) -> dict:
    from workers.workloads import sharegpt_prompts

    return asyncio.run(Loadgen(cfg, sharegpt_prompts(2000, seed=cfg.seed)).run())
