"""Fixtures wiring the real CloudClient to the in-memory API and a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from runner_operator.cloud.client import CloudClient
from tests.unit.cloud.fakes import BASE_URL, TOKEN, FakeApi, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
async def cloud(api: FakeApi, clock: FakeClock) -> AsyncIterator[CloudClient]:
    client = CloudClient(
        BASE_URL,
        TOKEN,
        transport=httpx.MockTransport(api.handle),
        sleep=clock.sleep,
        clock=clock,
        jitter=lambda: 0.5,
    )
    async with client:
        yield client
