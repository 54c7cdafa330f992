import ctypes
import ctypes.util
import time

import psutil
import pytest

from workers.heap import HeapTrimmer


def test_disabled_never_trims():
    h = HeapTrimmer(0)
    assert not h.available and not h.maybe_trim() and h.trims == 0


def test_trims_at_most_once_per_interval():
    h = HeapTrimmer(0.2)
    if not h.available:
        pytest.skip("not glibc")
    assert not h.maybe_trim()  # the interval counts from construction
    time.sleep(0.25)
    assert h.maybe_trim() and not h.maybe_trim()
    assert h.trims == 1 and h.seconds >= 0


def test_returns_freed_heap_pages_to_the_os():
    """The engine's case: small blocks freed below a live one stay mapped until trimmed."""
    h = HeapTrimmer(1e-9)
    if not h.available:
        pytest.skip("not glibc")
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    blocks = [libc.malloc(4096) for _ in range(40_000)]  # 160 MB of heap (below the mmap threshold)
    for b in blocks:
        libc.memset(b, 1, 4096)
    pin = libc.malloc(4096)  # a live block above them keeps the heap top from shrinking on free
    for b in blocks:
        libc.free(b)
    before = psutil.Process().memory_info().rss
    assert h.maybe_trim()
    after = psutil.Process().memory_info().rss
    libc.free(pin)
    assert before - after > 100 * 2**20, (before, after)
