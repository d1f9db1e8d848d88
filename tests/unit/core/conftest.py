"""The in-process simulator (instant installs) and a client of it, for tests of the shell."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runner_operator.cloud import budget
from runner_operator.cloud.client import CloudClient
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve

OTHER = "CW-SECRET-other-organization"
"""A token of another organization: it sees none of the default organization's runners."""


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    config = SimulatorConfig(timings=Timings.instant(), organizations={OTHER: "other"}, log_requests=False)
    async with await serve(config) as srv:
        yield srv


@pytest.fixture
async def cloud(server: RunningServer) -> AsyncIterator[CloudClient]:
    async with CloudClient(server.url, DEV_ADMIN_TOKEN, budget=budget.RequestBudget(1000, 1000)) as c:
        yield c
