"""The allocator knobs reach glibc when it is there, and are no-ops (never errors) when it is not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner_operator import allocator

ROOT = Path(__file__).resolve().parents[2]


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> FakeLibc:
    fake = FakeLibc()
    monkeypatch.setattr(allocator, "_glibc", lambda: fake)
    return fake


def test_arenas_are_capped_through_mallopt(libc: FakeLibc) -> None:
    assert allocator.limit_arenas(2)
    assert libc.calls == [("mallopt", allocator.M_ARENA_MAX, 2)]


def test_zero_arenas_leaves_glibcs_default(libc: FakeLibc) -> None:
    assert not allocator.limit_arenas(0)
    assert libc.calls == []


def test_trim_releases_every_arena(libc: FakeLibc) -> None:
    assert allocator.trim()
    assert libc.calls == [("malloc_trim", 0)]


def test_without_glibc_every_knob_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert not allocator.limit_arenas(2)
    assert not allocator.fix_mmap_threshold(131072)
    assert not allocator.trim()


def test_this_processs_libc_is_found() -> None:
    """The operator's image and CI are Debian (glibc): the knobs must reach it there."""
    assert allocator._glibc() is not None
    assert allocator.trim() in (True, False)


def test_large_blocks_get_pages_of_their_own_through_mallopt(libc: FakeLibc) -> None:
    assert allocator.fix_mmap_threshold(131072)
    assert libc.calls == [("mallopt", allocator.M_MMAP_THRESHOLD, 131072)]


def test_zero_threshold_leaves_glibcs_rising_one(libc: FakeLibc) -> None:
    assert not allocator.fix_mmap_threshold(0)
    assert libc.calls == []


PROBE = """
import ctypes, sys
from runner_operator import allocator

class Info(ctypes.Structure):
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "fixed":
    assert allocator.fix_mmap_threshold(131072)
blocks = [bytes(300_000) for _ in range(3)]
del blocks  # glibc's own threshold rises past 300 KB here
blocks = [bytes(300_000) for _ in range(4)]
print(libc.mallinfo2().hblks)
"""


def test_a_fixed_threshold_keeps_large_blocks_out_of_the_heap() -> None:
    """In a fresh interpreter: with glibc's rising threshold the second round of 300 KB blocks comes
    from the heap; with the fixed one each is mapped on its own (and unmapped when freed). Like
    test_this_processs_libc_is_found, this needs glibc, which the image and CI have."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}

    def mapped(mode: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True
        )
        return int(run.stdout)

    assert mapped("fixed") >= 4 > mapped("default")
