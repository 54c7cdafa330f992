"""KV-cache block pool with automatic prefix caching.

A block holds `block_size` consecutive tokens of one sequence. Full blocks whose tokens are final get a key
(the parent block's key + their token ids) and stay findable after their sequence ends: a later request with
the same prefix reuses them instead of prefilling again. Blocks are reference-counted; unreferenced cached
blocks are evicted least-recently-used only when a fresh block is needed.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BlockKey = tuple[int, tuple[int, ...]]  # (parent key hash, token ids of the block)


class NoFreeBlocksError(RuntimeError):
    """Raised when an allocation cannot be met; the scheduler queues or preempts instead."""


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_count = [0] * num_blocks
        self.key_of: list[BlockKey | None] = [None] * num_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # never cached, or evicted
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced, LRU first
        self._cached: dict[BlockKey, int] = {}
        self.hits = 0
        self.queries = 0

    # ---- accounting -------------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks an allocation can take now (free + evictable cached)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    # ---- allocation -------------------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise NoFreeBlocksError(f"need {n} KV blocks, {self.num_free} free")
        out = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            else:
                b, _ = self._evictable.popitem(last=False)
                key = self.key_of[b]
                if key is not None and self._cached.get(key) == b:
                    del self._cached[key]
                self.key_of[b] = None
            self.ref_count[b] = 1
            out.append(b)
        return out

    def free(self, blocks: Sequence[int]) -> None:
        # Freed in reverse so a sequence's tail (least reusable) is evicted before its head.
        for b in reversed(blocks):
            self.ref_count[b] -= 1
            assert self.ref_count[b] >= 0, f"block {b} freed twice"
            if self.ref_count[b] == 0:
                if self.key_of[b] is not None:
                    self._evictable[b] = None
                else:
                    self._free.append(b)

    # ---- prefix caching ---------------------------------------------------------------------------------
    @staticmethod
    def block_key(parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
        return (hash(parent) if parent is not None else 0, tuple(tokens))

    def lookup_prefix(self, tokens: Sequence[int], max_blocks: int, unit: int = 1) -> list[int]:
        """Longest run of cached full blocks that prefixes `tokens`, in whole multiples of `unit` blocks;
        takes a reference on each."""
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        hits: list[int] = []
        parent: BlockKey | None = None
        for i in range(max_blocks):
            key = self.block_key(parent, tokens[i * bs:(i + 1) * bs])
            b = self._cached.get(key)
            if b is None:
                break
            hits.append(b)
            parent = key
        del hits[len(hits) - len(hits) % unit:]
        self.queries += max_blocks
        self.hits += len(hits)
        for b in hits:
            if self.ref_count[b] == 0:
                self._evictable.pop(b, None)
            self.ref_count[b] += 1
        return hits

    def register_full_block(self, block: int, parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
        """Make a full block of final tokens findable; returns its key (the next block's parent)."""
        key = self.block_key(parent, tokens)
        if self.enable_prefix_caching and self.key_of[block] is None and key not in self._cached:
            self._cached[key] = block
            self.key_of[block] = key
        return key

    def reset_prefix_cache(self) -> None:
        for key, b in list(self._cached.items()):
            if self.ref_count[b] == 0:
                self._evictable.pop(b, None)
                self._free.append(b)
            self.key_of[b] = None
        self._cached.clear()
