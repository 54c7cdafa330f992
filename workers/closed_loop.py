"""A closed-loop load on one engine, one step at a time, and several such loops interleaved step by step.

`bench.run_ours` runs one loop to its end. `run_interleaved` steps several engines' loops in turn (each
round in its own order) and times each engine by its own steps only, so a slow period of a noisy machine
falls on every engine of the comparison alike instead of on whichever ran then. Latencies are not reported
there: a request's wall-clock time includes the other engines' steps. An engine's step after another
engine's costs what one after its own does (0-1% more, benchmarks/interleave_penalty.py), so interleaving
does not charge the configuration with the most steps for the others; after a speculating engine's it read
0.5-2% more, so no engine keeps one predecessor.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable

from workers.config import SamplingParams
from workers.metrics import LatencyStats, SpecStats


class ClosedLoop:
    """See bench.run_ours for the arguments. `tick` admits into free slots and runs one engine step.
    `on_clock_start` is called when the untimed warm-up wave is over and the clock starts (a profiler resets
    its own counts there, so they cover the timed steps only)."""

    def __init__(self, engine, prompts: list[list[int]], concurrency: int, max_tokens: int | list[int],
                 stop_after_tokens: int | None = None, admit: int | None = None, untimed: int = 0,
                 on_clock_start: Callable[[], None] | None = None) -> None:
        if admit is not None and not untimed < admit <= len(prompts):
            raise ValueError(f"admit={admit} needs {untimed + 1}..{len(prompts)} prompts")
        self.engine, self.concurrency = engine, concurrency
        self.stop_after_tokens, self.admit, self.untimed = stop_after_tokens, admit, untimed
        self.on_clock_start = on_clock_start
        engine.spec_stats, engine.latency = SpecStats(), LatencyStats()
        engine.runner.pool.reset_prefix_cache()
        lengths = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
        self.supply = [(p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
                       for p, n in zip(prompts, lengths)]
        self.todo = list(self.supply[:admit])
        self.active: set[str] = set()
        self.out_tokens = self.served = self.prompt_tokens = 0
        self.busy = 0.0  # seconds of this loop's own ticks since the clock started

    def done(self) -> bool:
        if self.admit is not None and self.served == self.admit and len(self.active) < self.concurrency:
            return True
        running = bool(self.todo or self.active)
        return not running or (self.stop_after_tokens is not None and self.out_tokens >= self.stop_after_tokens)

    def tick(self) -> None:
        t = time.perf_counter()
        e = self.engine
        while self.todo and len(self.active) < self.concurrency:
            if self.served == self.untimed > 0:  # the warm-up wave is in and a slot is free: the clock starts here
                e.spec_stats, e.latency = SpecStats(), LatencyStats()
                self.out_tokens = self.prompt_tokens = 0
                if self.on_clock_start is not None:
                    self.on_clock_start()
                self.busy, t = 0.0, time.perf_counter()
            prompt, sp = self.todo.pop(0)
            self.active.add(e.add_request(prompt, sp))
            self.served += 1
            self.prompt_tokens += len(prompt)
            if self.stop_after_tokens is not None and not self.todo:
                self.todo = list(self.supply)
        for o in e.step():
            self.out_tokens += len(o.new_token_ids)
            if o.finished:
                self.active.discard(o.req_id)
        self.busy += time.perf_counter() - t

    def finish(self, latencies: bool = True) -> dict:
        e = self.engine
        for req_id in self.active:  # a sustained run ends with every slot busy
            e.abort(req_id)
        e.step()  # collects the aborted requests
        s, lat = e.spec_stats, e.latency.to_dict()
        spec = e.proposer is not None
        dt = self.busy
        return dict(output_tokens=self.out_tokens, seconds=dt, output_tokens_per_s=self.out_tokens / dt,
                    num_requests=self.served - self.untimed, prompt_tokens=self.prompt_tokens,
                    mean_acceptance_length=round(s.mean_acceptance_length, 4) if spec else None,
                    acceptance_per_position=[round(x, 4) for x in s.acceptance_per_position] if spec else None,
                    tokens_per_computed_position=round(s.tokens_per_computed_position, 4),
                    ttft_p50_ms=lat["ttft_p50_ms"] if latencies else None,
                    itl_p50_ms=lat["itl_p50_ms"] if latencies else None,
                    itl_p99_ms=lat["itl_p99_ms"] if latencies else None)


def run_interleaved(loops: list[ClosedLoop], steps_per_turn: int = 1,
                    on_tick: Callable[[ClosedLoop, bool, float], None] | None = None, seed: int = 0) -> list[dict]:
    """Step every loop in turn, `steps_per_turn` steps a turn, until all are done; each result's time is its
    own engine's steps only. Each round runs the live loops in its own order (a shuffle seeded by `seed`), so
    every engine follows every other about equally often: a step right after a speculating engine's read
    0.5-2% slower (docs/performance.md, the variant slot), which a fixed cyclic order charged to one engine
    every round. `on_tick(loop, after_another, seconds)` sees every tick: `after_another` when the tick
    followed another engine's."""
    order = random.Random(seed)
    previous = None
    while True:
        live = [loop for loop in loops if not loop.done()]
        if not live:
            return [loop.finish(latencies=False) for loop in loops]
        order.shuffle(live)
        for loop in live:
            for _ in range(steps_per_turn):
                if loop.done():
                    break
                t = time.perf_counter()
                loop.tick()
                if on_tick is not None:
                    on_tick(loop, previous is not None and previous is not loop, time.perf_counter() - t)
                previous = loop
