import json

import pytest

from workers.cli import main

pytestmark = pytest.mark.model


def test_generate_json(capsys):
    assert main(["generate", "--prompt", "The capital of Germany is", "--max-tokens", "6", "--spec", "ngram",
                 "--k", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "Berlin" in out["text"] and len(out["token_ids"]) == 6
    assert out["stats"]["output_tokens"] == 6 and "acceptance_per_position" in out["stats"]["spec_decode"]


def test_bad_sampling_value_is_a_clear_error(capsys):
    assert main(["generate", "--prompt", "x", "--temperature", "-1"]) == 2
    assert "temperature" in capsys.readouterr().err
