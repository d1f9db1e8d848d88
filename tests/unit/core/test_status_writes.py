"""Status writes while polling: an unchanged observation is no write; a change is written at once.

Runs `reconciling.reconcile` against the in-process simulator over HTTP, feeding each pass's
status back as the next pass's body, as the kopf layer does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner_operator import outcomes, reconciling, resource
from runner_operator.cloud import budget
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.runners import Runners
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve
from tests.unit.builders import metadata

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    timings = Timings(install_seconds=0.6, provision_seconds=600, heartbeat_seconds=600)
    async with await serve(SimulatorConfig(timings=timings)) as srv:
        yield srv


class Object:
    """A ManagedRunner body whose status takes each pass's patch."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {
            "metadata": metadata(),
            "spec": {
                "runnerId": "status-writes",
                "clusterId": "00000000-0000-4000-8000-000000000001",
                "zone": "us-east-04a",
                "policy": {},
            },
            "status": {},
        }

    async def pass_at(self, cloud: CloudClient, seconds: float) -> dict[str, Any]:
        res = resource.ManagedRunnerResource.from_body(self.body)
        ctx = reconciling.Context(now=T0 + timedelta(seconds=seconds), deletion_timeout=60)
        outcome = await reconciling.reconcile(res, Runners(cloud), ctx)
        written = outcome.status.to_patch()
        self.body["status"] = {**self.body["status"], **written}
        return written


async def test_an_unchanged_observation_keeps_its_stamp_until_it_is_due(cloud: CloudClient) -> None:
    obj = Object()
    await obj.pass_at(cloud, 0)  # reserves the request ID
    created = await obj.pass_at(cloud, 1)
    assert created["phase"] == "Pending"
    assert created["lastObservedTime"] == "2026-12-02T12:00:01Z"

    before = dict(obj.body["status"])
    polled = await obj.pass_at(cloud, 3)
    assert polled
    assert all(before.get(k) == v for k, v in polled.items()), (
        "same observation: every field equals what is stored, so nothing is written"
    )

    still = await obj.pass_at(cloud, outcomes.STAMP_REFRESH.total_seconds())  # one second short of due
    assert still["lastObservedTime"] == "2026-12-02T12:00:01Z"
    refreshed = await obj.pass_at(cloud, 1 + outcomes.STAMP_REFRESH.total_seconds())
    assert refreshed["lastObservedTime"] == "2026-12-02T12:15:01Z"
    assert all(created.get(k) == v for k, v in refreshed.items() if k != "lastObservedTime")


async def test_a_changed_observation_is_stamped_at_once(cloud: CloudClient) -> None:
    obj = Object()
    await obj.pass_at(cloud, 0)
    created = await obj.pass_at(cloud, 1)
    await asyncio.sleep(1.0)  # the simulator moves the runner to PROVISIONING after 0.6 s
    changed = await obj.pass_at(cloud, 3)
    assert changed["installStatus"] != created["installStatus"]
    assert changed["lastObservedTime"] == "2026-12-02T12:00:03Z"


async def test_a_stamp_from_the_future_or_unreadable_is_replaced(cloud: CloudClient) -> None:
    obj = Object()
    await obj.pass_at(cloud, 0)
    await obj.pass_at(cloud, 1)
    obj.body["status"]["lastObservedTime"] = "2026-12-02T13:00:00Z"
    assert (await obj.pass_at(cloud, 3))["lastObservedTime"] == "2026-12-02T12:00:03Z"
    obj.body["status"]["lastObservedTime"] = "yesterday"
    assert (await obj.pass_at(cloud, 4))["lastObservedTime"] == "2026-12-02T12:00:04Z"


async def test_a_heartbeat_alone_is_no_write_until_the_stamp_is_due() -> None:
    """The cloud's lastHeartbeatTime advances every few seconds on a healthy runner: mirrored on every
    read, it would be a status write per runner per resync (measured: 10 writes/s at 1,000 runners)."""
    timings = Timings(install_seconds=0.1, provision_seconds=0.1, heartbeat_seconds=0.2)
    async with (
        await serve(SimulatorConfig(timings=timings)) as srv,
        CloudClient(srv.url, DEV_ADMIN_TOKEN, budget=budget.RequestBudget(1000, 1000)) as cloud,
    ):
        obj = Object()
        await obj.pass_at(cloud, 0)
        await obj.pass_at(cloud, 1)
        await asyncio.sleep(0.5)
        connected = await obj.pass_at(cloud, 2)
        assert connected["phase"] == "Ready", connected
        first_beat = connected["lastHeartbeatTime"]
        await asyncio.sleep(0.5)  # two or more heartbeats later

        before = dict(obj.body["status"])
        polled = await obj.pass_at(cloud, 3)
        assert all(before.get(k) == v for k, v in polled.items()), "only the heartbeat moved: no write"

        refreshed = await obj.pass_at(cloud, 2 + outcomes.STAMP_REFRESH.total_seconds())
        assert refreshed["lastObservedTime"] != connected["lastObservedTime"]
        assert refreshed["lastHeartbeatTime"] > first_beat, "refreshed together with the observation stamp"
