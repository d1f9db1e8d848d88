"""Keep glibc's allocator from holding on to memory the operator has freed.

The Kubernetes client's calls run on the default thread pool, and glibc gives threads their own
arenas (up to eight per core): pages freed in one arena are not reused by another, and freed pages
below an arena's top are kept. So RSS stays near the high-water mark of every burst (a mass
creation, a list of thousands of runners, a mass deletion) long after it. Fewer arenas, large
buffers on pages of their own and a periodic `malloc_trim` hand that memory back (bench/RESULTS.md:
bench.steady_cpu's `+RUNNER_OPERATOR_MALLOC_ARENAS=0` variant; "Large blocks on pages of their
own"). On another C library (musl, macOS) all three are no-ops.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

M_ARENA_MAX = -8  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3


@functools.cache
def _glibc() -> Any | None:
    """The C library of this process if it is glibc (it has mallopt and malloc_trim), else None."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    return libc


def _mallopt(param: int, value: int) -> bool:
    """Set one of glibc's malloc parameters; a value of 0 or less, or another C library, leaves it."""
    libc = _glibc()
    if value <= 0 or libc is None:
        return False
    return bool(libc.mallopt(param, value))


def limit_arenas(count: int) -> bool:
    """Cap glibc's arenas at `count` (0 leaves its default); call before threads start allocating."""
    return _mallopt(M_ARENA_MAX, count)


def fix_mmap_threshold(size: int) -> bool:
    """Give every allocation of at least `size` bytes pages of its own, returned when it is freed (0
    leaves glibc's default). glibc's threshold starts at 128 KiB but rises, up to 32 MB, each time
    such a block is freed: after the first list page or large response, those buffers come from
    the heap, and the heap keeps their pages. A fixed threshold keeps them out of it."""
    return _mallopt(M_MMAP_THRESHOLD, size)


def trim() -> bool:
    """Return the free pages of every arena to the system; True if any memory was released."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
