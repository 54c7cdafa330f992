"""Request.append_output: stop ids, max_tokens, stop strings, latencies."""
import os

from transformers import AutoTokenizer

from workers.config import SamplingParams
from workers.detokenizer import IncrementalDetokenizer
from workers.model_store import resolve_model
from workers.request import Request

# the GPU machine has only the tokenizer files (tests/conftest.py)
TOKENIZER = AutoTokenizer.from_pretrained(os.environ.get("SPECFLEET_TOKENIZER_DIR") or str(resolve_model(None)))


def _request(max_tokens: int = 8, stop: list[str] | None = None, stop_ids: frozenset[int] = frozenset()) -> Request:
    return Request("r", [1, 2], SamplingParams(), seed=0, stop_ids=stop_ids, max_tokens=max_tokens,
                   detok=IncrementalDetokenizer(TOKENIZER, stop or [], stop_ids))


def test_tokens_stop_at_a_stop_id_and_keep_it() -> None:
    req = _request(stop_ids=frozenset({99}))
    assert req.append_output([10, 99, 11], now=1.0) == ("stop", [])
    assert req.output_ids == [10, 99]


def test_tokens_stop_at_max_tokens() -> None:
    req = _request(max_tokens=3)
    assert req.append_output([10, 11], now=1.0)[0] is None
    reason, _ = req.append_output([12, 13, 14], now=2.0)
    assert reason == "length" and req.output_ids == [10, 11, 12]


def test_latency_gaps_split_a_step_over_its_tokens() -> None:
    req = _request()
    assert req.append_output([10], now=1.0) == (None, [])  # the first token: its TTFT, no gap
    assert req.first_token_time == 1.0
    reason, gaps = req.append_output([11, 12, 13, 14], now=3.0)
    assert reason is None and gaps == [0.5] * 4 and req.itl == gaps and req.last_token_time == 3.0


def test_a_stop_string_finishes_the_request() -> None:
    req = _request(stop=["Berlin"])
    reason, _ = req.append_output(TOKENIZER.encode(" in Berlin today"), now=1.0)
    assert reason == "stop" and "Berlin" not in req.text
