"""A timer writes its status itself, so a failed write never stops kopf's timer for that object."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from runner_operator import handlers


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


BODY = kopf.Body({"metadata": {"namespace": "ns", "name": "r"}})


def run(patch: kopf.Patch, monkeypatch: pytest.MonkeyPatch, fails: int | None = None) -> list[Any]:
    written: list[Any] = []

    def patch_status(namespace: str, name: str, status: dict[str, Any]) -> None:
        if fails is not None:
            raise ApiError(fails)
        written.append((namespace, name, status))

    monkeypatch.setattr(handlers, "patch_status", patch_status)
    asyncio.run(handlers.write_status_here(BODY, patch))
    return written


def test_the_status_is_written_here_and_kopf_is_left_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = kopf.Patch()
    patch.status["phase"] = "Ready"
    patch.status["plan"] = None
    assert run(patch, monkeypatch) == [("ns", "r", {"phase": "Ready", "plan": None})]
    assert not patch


def test_nothing_to_write_is_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(kopf.Patch(), monkeypatch) == []


def test_a_failed_write_is_a_retry_of_the_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = kopf.Patch()
    patch.status["phase"] = "Ready"
    with pytest.raises(kopf.TemporaryError, match="status write failed"):
        run(patch, monkeypatch, fails=503)
    assert not patch  # kopf still has nothing to patch (and so nothing that could stop the timer)


def test_an_object_deleted_meanwhile_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = kopf.Patch()
    patch.status["phase"] = "Ready"
    assert run(patch, monkeypatch, fails=404) == []
