"""Fixtures for the simulator unit tests: a manual clock and a simulator driven by it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.server import RunningServer, serve
from tests.clock import FakeClock

ADMIN = {"Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def timings() -> Timings:
    return Timings(
        install_seconds=2, provision_seconds=5, rollout_seconds=3, delete_seconds=5, heartbeat_seconds=10
    )


@pytest.fixture
def sim(clock: FakeClock, timings: Timings) -> Simulator:
    return Simulator(SimulatorConfig(clock=clock, timings=timings, log_requests=False))


def runner(
    runner_id: str = "prod-east", cluster: str = "11111111-0000-4000-8000-000000000001", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "identity": {"runnerId": runner_id, "zone": "us-east-04a", "clusterId": cluster},
        "policy": {},
    }
    body.update(extra)
    return body


@pytest.fixture
async def server(clock: FakeClock) -> AsyncIterator[RunningServer]:
    async with await serve(SimulatorConfig(clock=clock, timings=Timings(), log_requests=False)) as running:
        yield running


@pytest.fixture
async def http(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN, timeout=5.0) as client:
        yield client
