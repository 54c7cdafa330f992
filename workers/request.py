"""Per-request state held by the engine."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from workers.block_pool import BlockKey
from workers.config import SamplingParams
from workers.detokenizer import IncrementalDetokenizer
from workers.metrics import SpecStats


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True)
class Request:
    req_id: str
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    stop_ids: frozenset[int]
    max_tokens: int  # params.max_tokens clipped to the context limit
    detok: IncrementalDetokenizer
    tokens: list[int] = field(default_factory=list)  # prompt + output
    num_computed: int = 0  # tokens whose KV is in the cache
    blocks: list[int] = field(default_factory=list)
    block_keys: list[BlockKey] = field(default_factory=list)  # keys of this request's full, final blocks
    status: Status = Status.WAITING
    finish_reason: str | None = None
    proposer_synced: int = 0  # tokens the proposer's mirror holds
    text: str = ""  # detokenized output, cut at a stop string
    sent_text_len: int = 0
    sent_tokens: int = 0
    arrival: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    last_token_time: float | None = None
    itl: list[float] = field(default_factory=list)
    spec: SpecStats = field(default_factory=SpecStats)
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    num_preemptions: int = 0
    last_verified: int = 0  # drafts verified in its last decode step (the scheduler's draft reservation)
    last_cut: bool = False  # the trim verified fewer drafts than it drafted in that step

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = list(self.prompt_ids)

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.num_prompt:]

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.num_prompt

    @property
    def is_decoding(self) -> bool:
        """All tokens but the last are in the KV cache: the next step computes the last one (+ drafts)."""
        return self.num_computed == len(self.tokens) - 1

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def append_output(self, new: list[int], now: float) -> tuple[str | None, list[float]]:
        """Append a step's accepted tokens, up to a stop id or max_tokens, and feed the detokenizer (stop
        strings). Returns the finish reason (None: not finished) and the inter-token gaps of the tokens kept
        (none for the first token: its time to first token is `now - arrival`)."""
        reason, kept = None, []
        for t in new:
            kept.append(t)
            if t in self.stop_ids:
                reason = "stop"
                break
            if self.num_output + len(kept) >= self.max_tokens:
                reason = "length"
                break
        self.tokens.extend(kept)
        gaps: list[float] = []
        if self.first_token_time is None:
            self.first_token_time = now
        elif self.last_token_time is not None:
            gaps = [(now - self.last_token_time) / len(kept)] * len(kept)
            self.itl.extend(gaps)
        self.last_token_time = now
        if self.detok.push(kept):
            reason = "stop"
        self.text = self.detok.text
        return reason, gaps
