"""The shell side of the ownership rules: `reconciling` against the in-process simulator over HTTP.

Each test feeds every pass's status back into the body, as the kopf layer does, and checks the
calls made and what status and Events say. docs/safety.md cites them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

from runner_operator import reconciling, resource
from runner_operator.cloud import budget
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.errors import Unauthenticated
from runner_operator.cloud.runners import Runners
from runner_operator.simulator.server import RunningServer
from tests.unit.builders import metadata
from tests.unit.core.conftest import OTHER

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CLUSTER = "00000000-0000-4000-8000-000000000001"


@pytest.fixture
async def other(server: RunningServer) -> AsyncIterator[CloudClient]:
    async with CloudClient(server.url, OTHER, budget=budget.RequestBudget(1000, 1000)) as c:
        yield c


class Object:
    """A ManagedRunner body whose status takes each pass's patch."""

    def __init__(self, **spec: Any) -> None:
        self.body: dict[str, Any] = {
            "metadata": metadata(),
            "spec": {"runnerId": "owned", "clusterId": CLUSTER, "zone": "us-east-04a", "policy": {}, **spec},
            "status": {},
        }
        self.seconds = 0.0

    async def step(self, cloud: CloudClient, credential: str = "cred-a") -> reconciling.Outcome:
        self.seconds += 1
        res = resource.ManagedRunnerResource.from_body(self.body)
        ctx = reconciling.Context(
            now=T0 + timedelta(seconds=self.seconds), deletion_timeout=600, credential=credential
        )
        outcome = await reconciling.reconcile(res, Runners(cloud), ctx)
        self.body["status"] = {**self.body["status"], **outcome.status.to_patch()}
        return outcome

    async def bound(self, cloud: CloudClient) -> None:
        for _ in range(5):
            await self.step(cloud)
            if self.body["status"].get("runnerId"):
                return
        raise AssertionError(f"never bound: {self.body['status']}")

    def cond(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.body["status"]["conditions"] if c["type"] == type_)

    def delete(self) -> None:
        self.body["metadata"]["deletionTimestamp"] = "2026-12-02T12:05:00Z"


def writes(server: RunningServer) -> list[str]:
    endpoints = ("create", "update", "delete")
    return [e.endpoint for e in server.simulator.log.entries if e.endpoint in endpoints and e.status == 200]


async def test_bare_404_while_bound_or_deleting_is_reported_never_acted_on(
    server: RunningServer, cloud: CloudClient
) -> None:
    obj = Object()
    await obj.bound(cloud)
    server.simulator.set_bare404("/v1/sandbox/managedRunners", True)
    before = len(writes(server))
    outcome = await obj.step(cloud)
    assert (obj.cond("Synced")["reason"], obj.cond("Stalled")["status"]) == ("EndpointMisrouted", "True")
    assert obj.cond("Ready")["status"] == "False"
    assert obj.body["status"]["runnerId"] == "owned"
    obj.delete()
    outcome = await obj.step(cloud)
    assert not outcome.release
    assert writes(server)[before:] == []
    server.simulator.set_bare404("/v1/sandbox/managedRunners", False)
    for _ in range(5):
        outcome = await obj.step(cloud)
        if outcome.release:
            break
        await asyncio.sleep(0.1)  # the simulator finishes the decommission
    assert outcome.release
    assert "delete" in writes(server)[before:]


async def test_not_found_with_another_credential_is_not_acted_on(
    server: RunningServer, cloud: CloudClient, other: CloudClient
) -> None:
    obj = Object()
    await obj.bound(cloud)
    before = len(writes(server))
    outcome = await obj.step(other, credential="cred-b")
    assert obj.cond("Synced")["reason"] == "RunnerNotVisible"
    assert outcome.terminal
    obj.delete()
    assert not (await obj.step(other, credential="cred-b")).release
    assert writes(server)[before:] == []
    assert server.simulator.runner_ids() == ["owned"]


async def test_out_of_band_deletion_seen_with_the_same_credential_is_recreated(
    server: RunningServer, cloud: CloudClient
) -> None:
    obj = Object()
    await obj.bound(cloud)
    server.simulator.delete_out_of_band("owned")
    outcome = await obj.step(cloud)
    assert [e.reason for e in outcome.events] == ["RecreatingDeletedRunner"]


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        pytest.param(timedelta(seconds=30), "CreateConfirmed", id="created-after-reservation-is-ours"),
        pytest.param(-timedelta(days=1), "RunnerIdTaken", id="created-before-reservation-is-not"),
    ],
)
async def test_a_refused_replay_decides_on_the_creation_time(
    server: RunningServer, cloud: CloudClient, created: timedelta, expected: str
) -> None:
    obj = Object(displayName="edited after the lost create")
    reserved = datetime.fromtimestamp(server.simulator.now(), UTC) - created
    obj.body["status"] = {
        "createRequestId": "key-1",
        "createRequestedTime": reserved.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "credentialFingerprint": "cred-a",
    }
    # The first create (old body) landed with our key; its response was lost.
    server.simulator.create(
        {"identity": {"runnerId": "owned", "clusterId": CLUSTER, "zone": "us-east-04a"}, "policy": {}},
        request_id="key-1",
    )
    outcome = await obj.step(cloud)  # the replay carries the edited body: INVALID_ARGUMENT
    reasons = [e.reason for e in outcome.events]
    assert expected in reasons
    if expected == "CreateConfirmed":
        assert obj.body["status"]["runnerId"] == "owned"
        await obj.step(cloud)
        runner = server.simulator.get("owned")
        assert runner["displayName"] == "edited after the lost create"
    else:
        assert not obj.body["status"].get("runnerId")
        assert obj.body["status"]["createRequestId"] is None


def test_a_person_fixable_failure_says_ready_false_and_stalled() -> None:
    res = resource.ManagedRunnerResource.from_body(Object().body)
    ctx = reconciling.Context(now=T0, deletion_timeout=600)
    outcome = reconciling.failed(res, ctx, Unauthenticated("bad token", code="UNAUTHENTICATED"))
    conds = {c.type: (c.status, c.reason) for c in outcome.status.conditions or ()}
    assert conds == {
        "Ready": ("False", "CredentialsRejected"),
        "Synced": ("False", "CredentialsRejected"),
        "Stalled": ("True", "CredentialsRejected"),
    }
    assert outcome.status.phase == "CredentialsRejected"


def test_an_unreadable_spec_is_reported_once() -> None:
    body = Object(futureField="x").body
    try:
        resource.ManagedRunnerResource.from_body(body)
    except pydantic.ValidationError as exc:
        error = exc
    first = reconciling.unreadable(body, T0, error)
    assert [e.reason for e in first.events] == ["InvalidSpec"]
    assert "spec.futureField" in first.status.to_patch()["conditions"][0]["message"]
    body["status"] = first.status.to_patch()
    again = reconciling.unreadable(body, T0 + timedelta(minutes=5), error)
    assert again.events == ()
    assert again.status.to_patch() == body["status"], "nothing changed: no status write"


def test_identity_is_enough_to_delete_an_unreadable_spec() -> None:
    body = Object(futureField="x", deletionPolicy="Orphan").body
    body["metadata"]["deletionTimestamp"] = "2026-12-02T12:05:00Z"
    found = resource.ManagedRunnerResource.identity_only(body)
    assert found is not None
    assert (found.spec.runner_id, found.spec.deletion_policy, found.deleting) == ("owned", "Orphan", True)


async def test_the_reservation_time_keeps_sub_second_precision(cloud: CloudClient) -> None:
    """A runner someone created earlier in the same second must not look created after our key."""
    obj = Object()
    obj.seconds = 0.25
    await obj.step(cloud)
    assert obj.body["status"]["createRequestedTime"] == "2026-12-02T12:00:01.250000Z"
