"""The in-use finalizer on credentials Secrets: added once per Secret, dropped only when nobody needs it."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from runner_operator import handlers, reconciling, resource
from runner_operator.credentials import TokenRegistry
from runner_operator.quiet import QuietPasses
from runner_operator.settings import Settings
from runner_operator.status import StatusPatch
from tests.unit.builders import metadata


class Guard:
    """Records (namespace, name, in_use) calls; answers `result` (False: the Secret could not be patched)."""

    def __init__(self, result: bool = True) -> None:
        self.calls: list[tuple[str, str, bool]] = []
        self.result = result

    def __call__(self, namespace: str, name: str, in_use: bool) -> bool:
        self.calls.append((namespace, name, in_use))
        return self.result


def credentials(guard: Guard) -> TokenRegistry:
    return TokenRegistry(Settings(), lambda _ns, _name: {"token": "t"}, guard=guard)


def res(secret: str, **status: Any) -> resource.ManagedRunnerResource:
    return resource.ManagedRunnerResource.from_body(
        {
            "metadata": metadata(uid="u1"),
            "spec": {
                "runnerId": "r1",
                "clusterId": "00000000-0000-4000-8000-000000000001",
                "zone": "us-east-04a",
                "policy": {},
                "credentials": {"secretRef": {"name": secret}},
            },
            "status": status,
        }
    )


async def test_a_protected_secret_is_patched_once_per_process() -> None:
    guard = Guard()
    creds = credentials(guard)
    await creds.protect("ns", "a")
    await creds.protect("ns", "a")
    assert guard.calls == [("ns", "a", True)]


async def test_a_secret_that_could_not_be_protected_is_tried_again() -> None:
    guard = Guard(result=False)  # gone, or already being deleted
    creds = credentials(guard)
    assert not await creds.protect("ns", "a")
    assert not await creds.protect("ns", "a")
    assert guard.calls == [("ns", "a", True), ("ns", "a", True)]


@pytest.mark.parametrize(
    ("status", "deleting", "creating", "sends"),
    [
        pytest.param({}, False, True, False, id="not-bound-yet-creates-nothing"),
        pytest.param({"createRequestId": "k"}, False, True, False, id="reserved-key-is-not-replayed"),
        pytest.param({"runnerId": "r1"}, False, False, True, id="bound-keeps-its-token"),
        pytest.param({"createRequestId": "k"}, True, True, True, id="deleting-keeps-its-token"),
    ],
)
async def test_nothing_is_created_with_a_secret_that_cannot_be_protected(
    status: dict[str, Any], deleting: bool, creating: bool, sends: bool
) -> None:
    """A token read a moment before its Secret was deleted (shared reads) must not create a runner:
    with no Secret left to keep, that runner's deletion could never be done."""
    target = res("a", **status)
    if deleting:
        target = target.model_copy(update={"deletion_timestamp": "2026-12-07T00:00:00Z"})
    ran: list[str] = []

    async def reconcile(*_: Any, **__: Any) -> reconciling.Outcome:
        ran.append("pass")
        return outcome()

    ctx = reconciling.Context(now=datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC), deletion_timeout=60)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reconciling, "reconcile", reconcile)
        got = await handlers._with_credentials(
            target, ctx, credentials(Guard(result=False)), creating=creating, max_age=1.0, quiet=QuietPasses()
        )
    assert bool(ran) == sends
    if not sends:
        assert got.status.conditions is not None
        assert "cannot outlive it" in str(got.status.to_patch())


def outcome(*, release: bool = False, **written: Any) -> reconciling.Outcome:
    return reconciling.Outcome(StatusPatch(**written), release=release)


async def test_switching_secrets_keeps_the_old_one_until_the_new_one_saw_the_runner() -> None:
    guard = Guard()
    switched = res("b", runnerId="r1", credentialsSecret="a")
    # The new Secret resolved but the runner was not seen with it (another organization?): keep `a`.
    await handlers._release_secrets(credentials(guard), switched, outcome(credentials_secret="b"), {})
    assert guard.calls == []
    # The runner was seen with the new credentials: `a` is no longer needed.
    seen = outcome(credentials_secret="b", install_status="RUNNER_INSTALL_STATUS_READY")
    await handlers._release_secrets(credentials(guard), switched, seen, {})
    assert guard.calls == [("ns", "a", False)]


async def test_release_drops_the_finalizer_only_when_no_other_resource_uses_the_secret() -> None:
    guard = Guard()
    gone = res("a", runnerId="r1", credentialsSecret="a")
    users = {"ns/a": [("u1", True), ("u2", False)]}
    await handlers._release_secrets(credentials(guard), gone, outcome(release=True), users)
    assert guard.calls == [], "u2 still uses it"
    await handlers._release_secrets(credentials(guard), gone, outcome(release=True), {"ns/a": [("u1", True)]})
    assert guard.calls == [("ns", "a", False)]


def test_never_sent_needs_no_credentials_to_delete() -> None:
    assert reconciling.never_sent(res("a"), None)
    assert not reconciling.never_sent(res("a", createRequestId="k"), None)
    assert not reconciling.never_sent(res("a"), "r1")
