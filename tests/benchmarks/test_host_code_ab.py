"""benchmarks/host_code_ab.py's parts that need no timing: loading a module as it was at a commit, and the table."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from host_code_ab import module_at, table  # noqa: E402

from workers import attention  # noqa: E402


def test_a_module_at_a_commit_loads_beside_this_trees_and_builds_the_same_metadata():
    old = module_at("HEAD", "workers/attention.py")
    assert old is not attention and old.build_metadata is not attention.build_metadata
    spans = [attention.SeqSpan(0, 1, 40, [3, 1, 2]), attention.SeqSpan(1, 2, 17, [5, 4])]
    a = old.build_metadata([old.SeqSpan(s.query_start, s.query_len, s.start_pos, s.block_table) for s in spans],
                           16, torch.device("cpu"), 10, 3, False)
    b = attention.build_metadata(spans, 16, torch.device("cpu"), 10, 3, False)
    assert torch.equal(a.slot_mapping, b.slot_mapping)
    assert all(torch.equal(x.kv_index, y.kv_index) for x, y in zip(a.tiled, b.tiled))


def test_the_table_has_a_row_per_part_with_both_commits_times():
    result = {"base": "abc", "this": "def", "rows": [
        {"part": "draft propose", "requests": 8, "depth": 2, "base_ms": 12.0, "this_ms": 9.0, "ratio": 0.75},
        {"part": "attention metadata", "requests": 8, "depth": 0, "base_ms": 0.8, "this_ms": 0.4, "ratio": 0.5}]}
    lines = table(result).splitlines()
    assert lines[0] == "| part | requests | depth | abc ms | def ms | ratio |"
    assert lines[2] == "| draft propose | 8 | 2 | 12.00 | 9.00 | 0.750 |"
    assert lines[3] == "| attention metadata | 8 | - | 0.80 | 0.40 | 0.500 |"
