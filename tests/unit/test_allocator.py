"""The allocator knobs reach glibc when it is there, and are no-ops (never errors) when it is not."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator import allocator


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


def test_without_glibc_both_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert not allocator.limit_arenas(2)
    assert not allocator.trim()


def test_this_processs_libc_is_found() -> None:
    """The operator's image and CI are Debian (glibc): the knobs must reach it there."""
    assert allocator._glibc() is not None
    assert allocator.trim() in (True, False)
