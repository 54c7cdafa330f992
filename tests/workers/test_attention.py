"""The paged attention's kernels: any grouping of a step's sequences (workers/attention_groups.py) and any rows
beside a query give it the logits it gets alone; the tile's mask, its key gathering and its row blocks."""
import pytest
import torch

import workers.attention as attention
import workers.attention_groups as attention_groups
from workers.attention import SeqSpan


def _groups(lengths: list[int]) -> int:
    """How many query-length groups the attention makes of a step whose sequences compute these rows."""
    spans = [(SeqSpan(sum(lengths[:i]), n, 64, [0]), torch.zeros(1, dtype=torch.long)) for i, n in enumerate(lengths)]
    return len(attention_groups.group_by_length(spans))


@pytest.mark.model
def test_any_grouping_gives_the_same_logits(default_model_dir, monkeypatch):
    """A ragged step (13 x 1 + 1 x 2 + 1 x 4 + 1 x 8 rows after a 64-token prefill each) computed with every
    length its own group and with one padded group: identical logits (padding adds exact zeros)."""
    from workers.config import EngineConfig
    from workers.engine import LLMEngine
    from workers.model_runner import StepChunk

    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.25))
    if attention.fixed_tile_needed(engine.model.dtype):
        pytest.skip(f"{engine.model.dtype} pads every sequence to one fixed tile: there is no grouping")
    runner = engine.runner
    rows = [1] * 13 + [2, 4, 8]
    per = -(-(64 + max(rows)) // runner.block_size)
    blocks = runner.pool.allocate(len(rows) * per)
    tables = [blocks[i * per:(i + 1) * per] for i in range(len(rows))]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 10000, (64,), generator=gen).tolist() for _ in rows]
    runner.run([StepChunk(p, 0, t, 0) for p, t in zip(prompts, tables)])
    step = [StepChunk([(17 * i + j) % 5000 + 100 for j in range(n)], 64, t, n)
            for i, (n, t) in enumerate(zip(rows, tables))]
    out = {}
    for setting in (0, 10 ** 6):
        monkeypatch.setattr(attention_groups, "GROUP_COST_ROWS", setting)
        assert _groups(rows) == (4 if setting == 0 else 1)
        out[setting] = runner.run(step)
    runner.pool.free(blocks)
    assert bool(out[0].isfinite().all()) and torch.equal(out[0], out[10 ** 6])


@pytest.mark.model
def test_rows_at_long_context_attend_as_each_sequence_alone(default_model_dir):
    """A mixed decode/verify step at contexts 700-1030 (default grouping, so some sequences share a padded
    tile) gives every row the logits of its sequence run alone, and a 5-row verify those of its tokens
    decoded one by one. With `.sum(2)` across key blocks (before 2026-12-04) the cross-block order depended
    on the tile's rows: on the bf16 Xeon with AMX the steps at 777 and 900 differed from their sequences alone."""
    from workers.bench import prefilled_step
    from workers.config import EngineConfig
    from workers.engine import LLMEngine
    from workers.model_runner import StepChunk

    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5))
    if attention.fixed_tile_needed(engine.model.dtype):
        pytest.skip(f"{engine.model.dtype} pads every sequence to one fixed tile")
    runner, rows, failures = engine.runner, [1, 1, 2, 3, 1, 5], []
    for ctx in (700, 777, 900, 1030):
        step, blocks = prefilled_step(runner, rows, ctx, torch.Generator().manual_seed(ctx))
        together, alone = runner.run(step), torch.cat([runner.run([c]) for c in step])
        last = step[-1]
        singles = torch.cat([runner.run([StepChunk([tok], ctx + j, last.block_table, 1)])
                             for j, tok in enumerate(last.token_ids)])
        runner.pool.free(blocks)
        if not torch.equal(together, alone):
            failures.append((ctx, "step"))
        if not torch.equal(alone[-len(last.token_ids):], singles):
            failures.append((ctx, "verify"))
    assert not failures


def test_the_tiles_sums_across_key_blocks_do_not_depend_on_the_rows_beside_them():
    """The two reductions of `_tiled_attention` across key blocks (`_across_blocks`), on [KVH, B, blocks, rows,
    ...] as it lays them out: each row's softmax denominator (a scan in block order) and its output (`.sum(2)`
    over 64 values per element) give the same row's result alone, for 1-16 blocks and 1-10 query rows per
    head. A plain `.sum(2)` of the denominators is the check's counter-example: its order across blocks
    depends on the rows, and it differs from the row alone at about half of these rows (bf16 Xeon with AMX,
    2026-12-04)."""
    from workers.model_runner import cpu_has_fast_bf16

    if not cpu_has_fast_bf16():  # the model runs fp32 there, padded to one fixed tile: rows never vary
        pytest.skip("fp32 pads every sequence to one fixed tile")
    gen = torch.Generator().manual_seed(0)
    kvh, group, hd = 3, 3, 64  # the default model's KV heads, query heads per KV head, head size
    plain_sum_differs = 0
    for blocks in range(1, 17):
        for q_tile in range(1, 11):
            rows = group * q_tile
            e = torch.rand(kvh, 2, blocks, rows, attention.KEY_BLOCK, generator=gen).to(torch.bfloat16).float()
            pv = torch.randn(kvh, 2, blocks, rows, hd, generator=gen).to(torch.bfloat16).float()
            out, plain = attention._across_blocks(e, pv), e.sum(-1, keepdim=True).sum(2)
            for r in range(rows):
                alone_e, alone_pv = e[:, :, :, r:r + 1], pv[:, :, :, r:r + 1]
                assert torch.equal(out[:, :, r:r + 1], attention._across_blocks(alone_e, alone_pv))
                plain_sum_differs += not torch.equal(plain[:, :, r:r + 1], alone_e.sum(-1, keepdim=True).sum(2))
    assert plain_sum_differs > 0, "the counter-example no longer differs: the check may have lost its teeth"


def test_prefill_segments_on_cuda_keep_off_cudnn_attention():
    """Steps with prefill segments run SDPA without the cuDNN backend on CUDA (it builds a graph at every new
    length: 60 ms each on an H200), and as they are elsewhere or without segments."""
    from workers.attention import build_metadata, segment_backends

    def meta(query_len: int):
        return build_metadata([SeqSpan(0, query_len, 64, list(range(8)))], 16, torch.device("cpu"), 10, 3, False)

    with_segments, tiled_only = meta(40), meta(4)
    assert with_segments.segments and not tiled_only.segments
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with segment_backends(torch.device("cuda"), with_segments):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    for device, m in ((torch.device("cpu"), with_segments), (torch.device("cuda"), tiled_only)):
        with segment_backends(device, m):
            assert torch.backends.cuda.cudnn_sdp_enabled()


def test_the_tiles_mask_is_causal_for_real_rows_and_lets_padding_rows_see_one_key():
    """`_tiled_group` builds its additive mask on the step's device from [B, q_tile] limits: a real row j of a
    sequence starting at position p sees keys 0..p + j, a padding row key 0 only (finite, then discarded)."""
    spans = [(SeqSpan(0, 1, 5, [0]), torch.zeros(1, dtype=torch.long)),
             (SeqSpan(1, 3, 130, [0] * 9), torch.zeros(9, dtype=torch.long))]
    g = attention._tiled_group(spans, 16, torch.device("cpu"), q_tile=3, group_size=2)
    nb = g.bias.shape[1]
    # [B, nb, G * q_tile, KB] -> [B, G, q_tile, keys]: the G copies of each row are equal
    allowed = (g.bias == 0).view(2, nb, 2, 3, attention.KEY_BLOCK).permute(0, 2, 3, 1, 4).reshape(2, 2, 3, -1)
    assert torch.equal(allowed[:, 0], allowed[:, 1])
    keys = torch.arange(nb * attention.KEY_BLOCK)
    want = torch.stack([torch.stack([keys <= 5, keys == 0, keys == 0]),
                        torch.stack([keys <= 130, keys <= 131, keys <= 132])])
    assert torch.equal(allowed[:, 0], want)
    assert set(g.bias.unique().tolist()) == {0.0, float("-inf")}


def test_a_group_gathers_every_sequences_keys_padded_to_its_longest_context():
    """What `ModelRunner` reports of a step (`tiled_seqs`, `key_slots`; benchmarks/profile_steps.py checks the
    cost table with them): B x the group's longest context in whole key blocks."""
    spans = [(SeqSpan(0, 1, 5, [0]), torch.zeros(1, dtype=torch.long)),
             (SeqSpan(1, 1, 300, [0] * 19), torch.zeros(19, dtype=torch.long))]
    g = attention._tiled_group(spans, 16, torch.device("cpu"), q_tile=3, group_size=2)
    assert g.kv_index.shape == (2, attention.padded_key_slots(301)) and attention.padded_key_slots(301) == 384
    assert attention.padded_key_slots(384) == 384 and attention.padded_key_slots(385) == 512


@pytest.mark.model
def test_a_step_split_by_context_gives_every_row_the_logits_of_its_sequence_alone(default_model_dir, monkeypatch):
    """Sequences at contexts 90-1030 in one step, split into groups by context or not: every row's logits
    are those of its sequence run alone (each gathered over its own context only)."""
    from workers.config import EngineConfig
    from workers.engine import LLMEngine
    from workers.model_runner import StepChunk

    engine = LLMEngine(EngineConfig(kv_cache_memory_gb=0.5))
    runner, gen = engine.runner, torch.Generator().manual_seed(3)
    contexts, rows = [90, 100, 260, 700, 1030, 95], [1, 2, 1, 1, 3, 1]
    tables = []
    for ctx, n in zip(contexts, rows):
        t = runner.pool.allocate(-(-(ctx + n) // runner.block_size))
        runner.run([StepChunk(torch.randint(100, 10000, (ctx,), generator=gen).tolist(), 0, t, 0)])
        tables.append(t)
    step = [StepChunk(torch.randint(100, 10000, (n,), generator=gen).tolist(), ctx, t, n)
            for ctx, n, t in zip(contexts, rows, tables)]
    alone = torch.cat([runner.run([c]) for c in step])
    out, splits = {}, {}
    for setting in (attention_groups.GROUP_COST_SLOTS, 10 ** 9):
        monkeypatch.setattr(attention_groups, "GROUP_COST_SLOTS", setting)
        out[setting], splits[setting] = runner.run(step), runner.context_splits
    for t in tables:
        runner.pool.free(t)
    assert splits[10 ** 9] == 0 and splits[min(splits)] > 0
    assert all(torch.equal(o, alone) for o in out.values())


def test_small_rows_fill_whole_row_blocks_across_sequences():
    """32 sequences of 3 rows (fixed k=2 at c=32) take 3 linear-layer blocks, not 4: a sequence's rows may be
    split between two blocks. A long prefill segment still gets its own GEMM padded to PREFILL_SEGMENT rows."""
    def blocks(lengths: list[int]) -> list[tuple[int, int, int]]:
        spans, row = [], 0
        for n in lengths:
            spans.append(SeqSpan(row, n, 0 if n > attention.SMALL_ROWS else 64, list(range(16))))
            row += n
        meta = attention.build_metadata(spans, 16, torch.device("cpu"), 10, 3, False)
        return [(s.start, s.stop, pad) for s, pad in meta.row_blocks]

    assert blocks([3] * 32) == [(0, 32, 0), (32, 64, 0), (64, 96, 0)]
    assert blocks([1] * 5 + [100] + [3, 3]) == [(0, 5, 0), (5, 105, attention.PREFILL_SEGMENT), (105, 111, 0)]


@pytest.mark.model
def test_a_sequence_split_between_row_blocks_gets_the_logits_it_gets_alone(default_model_dir):
    """11 sequences verifying 2 drafts each (33 rows): the 11th sequence's rows fall in two 32-row blocks,
    and every row's logits equal those of its sequence run alone."""
    from workers.bench import prefilled_step
    from workers.config import EngineConfig
    from workers.engine import LLMEngine

    runner = LLMEngine(EngineConfig(kv_cache_memory_gb=0.25)).runner
    step, blocks = prefilled_step(runner, [3] * 11, 100, torch.Generator().manual_seed(0))
    together, alone = runner.run(step), torch.cat([runner.run([c]) for c in step])
    runner.pool.free(blocks)
    assert together.shape[0] == 33 and torch.equal(together, alone)
