import random

import pytest
from transformers import AutoTokenizer

from workers.detokenizer import IncrementalDetokenizer

pytestmark = pytest.mark.model


def test_incremental_text_equals_full_decode(default_model_dir):
    tok = AutoTokenizer.from_pretrained(str(default_model_dir))
    rng = random.Random(0)
    text = "Grüße aus Köln! 東京 🚀 def f(x):\n    return x ** 2  # naïve café"
    ids = tok.encode(text) + [rng.randrange(tok.vocab_size) for _ in range(200)]
    d = IncrementalDetokenizer(tok, [], frozenset())
    i = 0
    while i < len(ids):
        n = rng.randint(1, 5)  # speculative steps emit several tokens at once
        d.push(ids[i:i + n])
        i += n
    full = tok.decode(ids, skip_special_tokens=True)
    assert full.startswith(d.text) and len(full) - len(d.text) <= 4  # only an unfinished tail held back


def test_stop_string_cut_across_pushes(default_model_dir):
    tok = AutoTokenizer.from_pretrained(str(default_model_dir))
    d = IncrementalDetokenizer(tok, ["STOP here"], frozenset())
    ids = tok.encode("some words then STOP here and more")
    hit = False
    for t in ids:
        hit = d.push([t]) or hit
        if hit:
            break
    assert hit and d.text == "some words then "
