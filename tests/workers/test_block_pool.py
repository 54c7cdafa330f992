import pytest

from workers.block_pool import BlockPool, NoFreeBlocksError


def test_allocate_free_roundtrip():
    pool = BlockPool(4, 2)
    a = pool.allocate(3)
    assert pool.num_free == 1
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    pool.free(a)
    assert pool.num_free == 4 and pool.num_used == 0


def test_prefix_hit_shares_blocks_and_counts_references():
    pool = BlockPool(8, 2)
    toks = [5, 6, 7, 8, 9]
    blocks = pool.allocate(3)
    k0 = pool.register_full_block(blocks[0], None, toks[0:2])
    pool.register_full_block(blocks[1], k0, toks[2:4])
    hits = pool.lookup_prefix(toks, 2)
    assert hits == blocks[:2]
    assert pool.ref_count[blocks[0]] == 2
    pool.free(blocks)
    pool.free(hits)
    assert pool.num_used == 0
    # still cached after both owners are gone, until evicted
    assert pool.lookup_prefix(toks, 2) == blocks[:2]


def test_prefix_must_match_from_the_start():
    pool = BlockPool(8, 2)
    b = pool.allocate(2)
    k0 = pool.register_full_block(b[0], None, [1, 2])
    pool.register_full_block(b[1], k0, [3, 4])
    assert pool.lookup_prefix([9, 9, 3, 4], 2) == []  # same second block, other parent
    assert pool.lookup_prefix([1, 2, 4, 4], 2) == [b[0]]


def test_lru_eviction_reuses_cached_blocks():
    pool = BlockPool(2, 2)
    b = pool.allocate(2)
    k = pool.register_full_block(b[0], None, [1, 2])
    pool.register_full_block(b[1], k, [3, 4])
    pool.free(b)
    assert pool.num_free == 2
    fresh = pool.allocate(1)  # evicts the least recently freed-first: the tail block
    assert fresh == [b[1]]
    assert pool.lookup_prefix([1, 2, 3, 4], 2) == [b[0]]
