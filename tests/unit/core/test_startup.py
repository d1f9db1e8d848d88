"""The start waits for discovery to list ManagedRunners, and fails visibly when it never does."""

from __future__ import annotations

import asyncio

import kopf
import pytest

from runner_operator import handlers


def test_waits_through_empty_and_failing_discovery_then_starts() -> None:
    answers: list[object] = [False, RuntimeError("connection refused"), False, True]
    calls = []

    def served() -> bool:
        calls.append(1)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    asyncio.run(handlers.wait_until_served(served, within=5, interval=0.01))
    assert len(calls) == 4
    assert answers == []


def test_gives_up_with_a_clear_error_when_never_served() -> None:
    with pytest.raises(kopf.PermanentError, match=r"managedrunners\.sandbox\.coreweave\.com.*CRD installed"):
        asyncio.run(handlers.wait_until_served(lambda: False, within=0.05, interval=0.01))


def test_returns_at_once_when_served() -> None:
    calls: list[int] = []

    def served() -> bool:
        calls.append(1)
        return True

    asyncio.run(handlers.wait_until_served(served, within=0.05, interval=10))
    assert calls == [1]


def test_kubernetes_requests_are_retried_through_a_control_plane_upgrade() -> None:
    """kopf's own writes (after spec changes and deletions, and Events) outlast a control-plane upgrade."""
    total = sum(handlers.KUBE_RETRY_BACKOFFS)
    assert total >= 5 * 60, f"retries span {total}s: shorter than a control-plane upgrade"
    assert max(handlers.KUBE_RETRY_BACKOFFS) <= 60, "no single wait longer than a minute"
    default = kopf.OperatorSettings().networking.error_backoffs
    assert isinstance(default, tuple)
    assert sum(default) < total, "kopf's default is what this widens"
