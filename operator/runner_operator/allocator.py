"""Keep glibc's allocator from holding on to memory the operator has freed.

The Kubernetes client's calls run on the default thread pool, and glibc gives threads their own
arenas (up to eight per core): pages freed in one arena are not reused by another, and freed pages
below an arena's top are kept. So RSS stays near the high-water mark of every burst (a mass
creation, a list of thousands of runners, a mass deletion) long after it. Fewer arenas and a
periodic `malloc_trim` hand that memory back; their effect alone is measured with bench.steady_cpu's
`+RUNNER_OPERATOR_MALLOC_ARENAS=0` variant. On another C library (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

M_ARENA_MAX = -8  # mallopt parameter, from glibc's malloc.h


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


def limit_arenas(count: int) -> bool:
    """Cap glibc's arenas at `count` (0 leaves its default); call before threads start allocating."""
    libc = _glibc()
    if count <= 0 or libc is None:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


def trim() -> bool:
    """Return the free pages of every arena to the system; True if any memory was released."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
