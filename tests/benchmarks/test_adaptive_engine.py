"""Merging grid runs made in parts (the grid itself runs the real engine, not in CI)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from adaptive_engine import (acceptance_row, held_out_ratio, markdown_tables, merge_runs, plot,  # noqa: E402
                             pool_runs, pooled_table, rate, summarise)

SETTINGS = {"modes": ["off", "ngram:2", "ngram:7:adaptive"], "repeat": 3, "max_tokens": 48, "sustained": True,
            "min_requests": 8, "per_slot": 2}


def rows(c: int, adaptive: float) -> list[dict]:
    out = [{"mode": "off", "k": 0, "output_tokens_per_s": 100.0}]
    out += [{"mode": "ngram", "k": k, "output_tokens_per_s": 90.0 + k} for k in (2, 4, 7)]
    out += [{"mode": "ngram-adaptive", "k": 7, "output_tokens_per_s": adaptive}]
    return [{**r, "workload": "repetitive", "concurrency": c, "samples_tokens_per_s": [r["output_tokens_per_s"]] * 3}
            for r in out]


def test_parts_merge_into_one_grid():
    settings, data = merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "rows": rows(16, 105.0)}])
    # runs before the options (`seed`: False reads as the seed 0 they served)
    assert settings == {**SETTINGS, "interleave": False, "fresh_prompts": False, "seed": False, "machine": False,
                        "untimed_waves": 1}
    summary = {s["concurrency"]: s["adaptive_vs_best"] for s in summarise(data)}
    assert summary == {1: pytest.approx(0.99), 16: pytest.approx(1.05)}


def test_parts_that_differ_or_overlap_are_refused():
    with pytest.raises(SystemExit, match="repeat"):
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "repeat": 5, "rows": rows(16, 99.0)}])
    with pytest.raises(SystemExit, match="interleave"):
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "interleave": True, "rows": rows(16, 99.0)}])
    bf16 = {"cpu_capability": "AVX512", "dtype": "bfloat16", "cores": 2}
    with pytest.raises(SystemExit, match="machine"):  # another CPU: other step times, not one grid
        merge_runs([{**SETTINGS, "machine": bf16, "rows": rows(1, 99.0)},
                    {**SETTINGS, "machine": {**bf16, "cpu_capability": "AVX2", "dtype": "float32"},
                     "rows": rows(16, 99.0)}])
    with pytest.raises(SystemExit, match="seed"):  # other prompt samples: pool them (--pool), do not merge
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "seed": 2, "rows": rows(16, 99.0)}])
    assert merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "seed": 0, "rows": rows(16, 99.0)}])
    with pytest.raises(SystemExit, match="untimed_waves"):  # another window: not one grid
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "untimed_waves": 2, "rows": rows(16, 99.0)}])
    assert merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "untimed_waves": 1, "rows": rows(16, 99.0)}])
    with pytest.raises(SystemExit, match="twice"):
        merge_runs([{**SETTINGS, "rows": rows(1, 99.0)}, {**SETTINGS, "rows": rows(1, 99.0)}])


def test_two_samples_are_read_by_their_median_not_the_faster_one():
    data = rows(1, 99.0)
    for r in data:  # files before 2026-12-01 kept the faster of 2 samples as the row's tokens/s
        r["samples_tokens_per_s"] = [r["output_tokens_per_s"] - 10.0, r["output_tokens_per_s"]]
    assert rate(data[0]) == pytest.approx(95.0)
    assert summarise(data)[0]["adaptive_vs_best"] == pytest.approx(94.0 / 95.0, abs=1e-4)


def test_the_docs_tables_read_medians():
    data = rows(1, 99.0)
    for r in data:  # 2 cycles each; no spec 90 and 100: its median 95, not the faster 100
        r["samples_tokens_per_s"] = [r["output_tokens_per_s"] - 5.0, r["output_tokens_per_s"] + 5.0]
    data[0]["samples_tokens_per_s"] = [90.0, 100.0]
    table = markdown_tables({**SETTINGS, "rows": data})
    # held out: each cycle against k=7, the best of the other cycle (94 / 92, 104 / 102)
    assert "| repetitive | 1 | 95.0 | 92.0 | 94.0 | 97.0 | 99.0 | 1.02 | 1.02 | 1.02 | 1.02 |" in table
    assert "1 of 1 points >= 0.98 paired; 1 of 1 with the best chosen on the other cycles" in table


def test_the_held_out_ratio_chooses_the_peer_on_the_other_cycles():
    # two peers equal in truth, their noise alternating: whichever is faster in a cycle is its paired denominator
    a, b = [100.0, 90.0], [90.0, 100.0]
    assert held_out_ratio([95.0, 95.0], [a, b]) == pytest.approx(95.0 / 90.0, abs=1e-4)
    # a peer that is best in every cycle is chosen in every cycle: the ratio is the paired one's mean
    assert held_out_ratio([95.0, 99.0], [[100.0, 100.0], [90.0, 90.0]]) == pytest.approx(0.97)
    assert held_out_ratio([95.0], [[100.0], [90.0]]) is None  # one cycle: nothing to choose on
    assert held_out_ratio([95.0, 96.0, 97.0], [[100.0, 101.0, 99.0]]) == pytest.approx(
        (0.95 + 96 / 101 + 97 / 99) / 3, abs=1e-4)


def test_a_grid_without_concurrency_1_plots_acceptance_at_its_lowest(tmp_path):
    data = rows(2, 99.0) + rows(16, 99.0)
    for r in data:
        r["acceptance_per_position"] = [0.9 if r["concurrency"] == 2 else 0.5] * r["k"] or None
    assert acceptance_row(data, "ngram", "repetitive")["acceptance_per_position"] == [0.9] * 7
    assert acceptance_row(data, "draft", "repetitive") is None  # not in this grid: left out, not an error
    throughput, acceptance = tmp_path / "t.png", tmp_path / "a.png"
    plot(data, throughput, acceptance, "fp32")
    assert throughput.exists() and acceptance.exists()


def test_whole_runs_pool_their_cycles_per_point():
    bf16 = {"cpu_capability": "AVX512", "dtype": "bfloat16", "cores": 2}
    low = {**SETTINGS, "machine": bf16, "rows": rows(1, 99.0)}
    high = {**SETTINGS, "min_requests": 16, "machine": bf16, "rows": rows(1, 105.0)}  # windows may differ
    (point,) = pool_runs([low, high])
    assert point["each_run_paired"] == [pytest.approx(0.99), pytest.approx(1.05)]
    assert point["adaptive_vs_best_paired"] == pytest.approx(1.02)  # the median of 6 cycles: 3 at 0.99, 3 at 1.05
    assert point["adaptive_vs_best_held_out"] == pytest.approx(1.02)  # no spec the best whichever cycle is left out
    assert "1 of 1 points >= 0.98" in pooled_table([point])
    with pytest.raises(SystemExit, match="machines"):
        pool_runs([low, {**high, "machine": {**bf16, "dtype": "float32"}}])
    deeper = [{**r, "k": 15} if r["mode"] == "ngram-adaptive" else r for r in high["rows"]]
    with pytest.raises(SystemExit, match="configurations"):  # its adaptive cycles would pair with low's peers
        pool_runs([low, {**high, "rows": deeper}])
