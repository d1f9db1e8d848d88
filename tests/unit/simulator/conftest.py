"""Fixtures for the simulator unit tests: a manual clock and a simulator driven by it."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator.simulator.config import SimulatorConfig, Timings
from runner_operator.simulator.core import Simulator

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def timings() -> Timings:
    return Timings(
        install_seconds=2, provision_seconds=5, rollout_seconds=3, delete_seconds=5, heartbeat_seconds=10
    )


@pytest.fixture
def sim(clock: ManualClock, timings: Timings) -> Simulator:
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
