"""The warm-up cost tables (workers/warmup_tables.py): which request counts the warm-up measures."""
from types import SimpleNamespace

from workers.block_pool import BlockPool
from workers.warmup_tables import requests_that_fit


def test_the_warm_up_measures_only_request_counts_whose_steps_fit_in_the_kv_pool(caplog, tmp_path):
    """A pool of 100 blocks of 16 tokens holds 5 requests at the warm-up's context (17 blocks each): the
    counts above are left out, with a warning, instead of failing the engine's start. A table already on
    disk is not measured, so nothing is checked or said."""
    runner = SimpleNamespace(pool=BlockPool(100, 16))
    with caplog.at_level("WARNING"):
        assert requests_that_fit(runner, (1, 2, 4, 8, 16), 9) == (1, 2, 4)
    assert "up to 4 requests" in caplog.text
    assert requests_that_fit(SimpleNamespace(pool=BlockPool(400, 16)), (1, 2, 4, 8, 16), 9) \
        == (1, 2, 4, 8, 16)
    # the row block is timed on 33 sequences (17 blocks each) where the 32-request cells are measured
    assert requests_that_fit(SimpleNamespace(pool=BlockPool(550, 16)), (16, 32), 9, block_at=32) == (16,)
    assert requests_that_fit(SimpleNamespace(pool=BlockPool(561, 16)), (16, 32), 9, block_at=32) == (16, 32)
    table = tmp_path / "table.json"
    table.write_text("{}")
    caplog.clear()
    assert requests_that_fit(runner, (1, 2, 4, 8, 16), 9, table) == (1, 2, 4, 8, 16)
    assert requests_that_fit(None, (1, 2, 4, 8, 16), 9) == (1, 2, 4, 8, 16)  # a remote drafter
    assert not caplog.text
