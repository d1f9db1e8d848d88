"""The operator owns its finalizer: added before a pass can send anything, removed only by a pass that
released the runner, with writes that never overwrite another controller's finalizers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

import kopf
import pytest
from kubernetes.client import ApiException

from runner_operator import handlers
from runner_operator.indexing import Indexes, Startup
from runner_operator.outcomes import Outcome
from runner_operator.scheduling import Bodies
from runner_operator.status import StatusPatch
from runner_operator.unsent import UnsentKeys

FIN = handlers.FINALIZER


class FakeObjects:
    """CustomObjectsApi's two patch calls, recorded; `fail` holds exceptions to raise first."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, str]] = []
        self.fail: list[Exception] = []
        self.stored: dict[str, Any] = {}

    def _answer(self, kind: str, body: Any, content_type: str) -> dict[str, Any]:
        self.calls.append((kind, body, content_type))
        if self.fail:
            raise self.fail.pop(0)
        return self.stored

    def patch_namespaced_custom_object(self, *args: Any, _content_type: str, **_: Any) -> dict[str, Any]:
        return self._answer("object", args[5], _content_type)

    def patch_namespaced_custom_object_status(
        self, *args: Any, _content_type: str, **_: Any
    ) -> dict[str, Any]:
        return self._answer("status", args[5], _content_type)


def _body(finalizers: list[str], deleting: bool = False, rv: str = "7") -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": "u1", "namespace": "ns", "name": "r", "resourceVersion": rv}
    meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    return {"metadata": meta, "spec": {"runnerId": "r-1"}, "status": {}}


@pytest.fixture
def objects(monkeypatch: pytest.MonkeyPatch) -> FakeObjects:
    fake = FakeObjects()
    monkeypatch.setattr(handlers, "_objects", lambda: fake)
    monkeypatch.setattr(handlers, "STATUS_WRITE_BACKOFFS", (0, 0))
    return fake


def _memo(body: dict[str, Any]) -> kopf.Memo:
    memo = kopf.Memo()
    memo.bodies = Bodies()
    memo.bodies.put("u1", body)
    memo.indexes = Indexes()
    return memo


def _passing(outcome: Outcome, seen: list[dict[str, Any]]) -> Callable[..., Awaitable[Outcome]]:
    async def fake_pass(
        body: kopf.Body, patch: kopf.Patch, *_: Any, commit: Any, latest: Any, **__: Any
    ) -> Outcome:
        current = latest()
        seen.append(current)
        patch.status["phase"] = "Ready"
        await commit(patch, outcome)
        return outcome

    return fake_pass


async def test_the_finalizer_is_added_before_the_pass_and_never_over_another(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects.stored = _body(["other.io/keep", FIN], rv="8")
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch()), seen))
    await handlers._scheduled_pass(_memo(_body(["other.io/keep"])), "u1")
    kind, change, content_type = objects.calls[0]
    assert kind == "object"
    assert content_type == "application/merge-patch+json"
    assert change == {"metadata": {"finalizers": ["other.io/keep", FIN], "resourceVersion": "7"}}, (
        "the whole list as read, conditional on the version it was read at"
    )
    assert seen[0]["metadata"]["finalizers"] == ["other.io/keep", FIN], "the pass sees the finalizer"
    assert [c[0] for c in objects.calls] == ["object", "status"]


async def test_a_conflict_adding_the_finalizer_stops_the_pass_before_anything_is_sent(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects.fail = [ApiException(status=409, reason="Conflict")]
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch()), seen))
    with pytest.raises(ApiException):
        await handlers._scheduled_pass(_memo(_body([])), "u1")
    assert seen == [], "no pass ran: the scheduler retries from the newer body"
    assert len(objects.calls) == 1


async def test_a_released_runner_removes_only_our_finalizer_and_writes_no_status(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch(), release=True), seen))
    after = await handlers._scheduled_pass(_memo(_body(["a.io/x", FIN, "b.io/y"], deleting=True)), "u1")
    assert after is None, "released: never looked at again"
    assert objects.calls == [
        (
            "object",
            [
                {"op": "test", "path": "/metadata/finalizers/1", "value": FIN},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ],
            "application/json-patch+json",
        )
    ]


async def test_a_deletion_still_in_flight_keeps_the_finalizer(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch()), seen))
    after = await handlers._scheduled_pass(_memo(_body([FIN], deleting=True)), "u1")
    assert [c[0] for c in objects.calls] == ["status"]
    assert after is not None, "looked at again"
    assert after <= handlers.INTERVALS.medium, "a deletion never waits a full resync"


async def test_a_transient_failure_is_retried_and_a_gone_object_is_no_error(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch()), seen))
    objects.fail = [ApiException(status=503), ConnectionRefusedError()]
    await handlers._scheduled_pass(_memo(_body([FIN])), "u1")
    assert [c[0] for c in objects.calls] == ["status"] * 3
    objects.calls.clear()
    objects.fail = [ApiException(status=404)]
    await handlers._scheduled_pass(_memo(_body([FIN])), "u1")
    assert len(objects.calls) == 1


async def test_a_refused_write_says_which_grant_is_missing_in_one_line(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch()), seen))
    refused = ApiException(status=403, reason="Forbidden")
    message = (
        'managedrunners.sandbox.coreweave.com "r" is forbidden: cannot patch resource "managedrunners/status"'
    )
    refused.body = json.dumps({"kind": "Status", "message": message})
    objects.fail = [refused]
    with pytest.raises(ApiException):
        await handlers._scheduled_pass(_memo(_body([FIN])), "u1")
    assert len(objects.calls) == 1  # not retried: only a change of RBAC helps
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == [f"status write of ns/r refused: HTTP 403: {message}"]


async def test_an_object_deleting_without_our_finalizer_is_not_scheduled() -> None:
    class Sched:
        def __init__(self) -> None:
            self.added: list[str] = []
            self.forgotten: list[str] = []

        def start(self) -> None: ...

        def add(self, key: str, delay: float) -> None:
            self.added.append(key)

        def forget(self, key: str) -> None:
            self.forgotten.append(key)

    memo = kopf.Memo()
    memo.bodies, memo.indexes, memo.scheduler = Bodies(), Indexes(), Sched()
    memo.startup, memo.started = Startup(listed=True), asyncio.Event()
    memo.unsent = UnsentKeys()
    seen: Any = handlers.seen  # kopf's decorator types it as a handler taking every kwarg
    await seen(type="MODIFIED", body=kopf.Body(cast(Any, _body(["other.io/x"], deleting=True))), memo=memo)
    await seen(type="MODIFIED", body=kopf.Body(cast(Any, _body([FIN], deleting=True))), memo=memo)
    assert memo.scheduler.forgotten == ["u1"]
    assert memo.scheduler.added == ["u1"]


async def test_a_quiet_pass_on_a_ready_runner_looks_again_at_the_resync(
    objects: FakeObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet pass writes nothing: its empty patch must not read as "never looked at" (fast poll)."""
    body = _body([FIN])
    body["status"] = {
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]
    }
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "_pass", _passing(Outcome(StatusPatch(), unchanged=True), seen))
    after = await handlers._scheduled_pass(_memo(body), "u1")
    assert after == handlers.INTERVALS.resync
