"""The batched-read cache: one list serves many runners, writes and absences are re-read directly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from runner_operator.cloud import budget
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import parse_runner
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    async with await serve(SimulatorConfig(timings=Timings.instant())) as srv:
        yield srv


@pytest.fixture
async def cloud(server: RunningServer) -> AsyncIterator[CloudClient]:
    async with CloudClient(server.url, DEV_ADMIN_TOKEN, budget=budget.RequestBudget(1000, 1000)) as client:
        yield client


async def seed(cloud: CloudClient, count: int) -> list[str]:
    ids = [f"r-{i:03d}" for i in range(count)]
    for i, runner_id in enumerate(ids):
        body = parse_runner(
            {
                "identity": {
                    "runnerId": runner_id,
                    "zone": "us-east-04a",
                    "clusterId": f"00000000-0000-4000-8000-{i:012d}",
                },
                "policy": {},
            }
        )
        await cloud.create(body, request_id=f"key-{runner_id}")
    return ids


def calls(server: RunningServer, endpoint: str) -> int:
    return sum(1 for e in server.simulator.log.entries if e.endpoint == endpoint)


async def test_one_list_serves_every_runner_while_fresh(server: RunningServer, cloud: CloudClient) -> None:
    ids = await seed(cloud, 30)
    server.simulator.log.clear()
    clock = Clock()
    cache = RunnerCache(cloud, clock=clock)
    found = [await cache.find(runner_id, max_age=5) for runner_id in ids]
    assert [r.runner_id for r in found if r] == ids
    assert calls(server, "list") == 1
    assert calls(server, "get") == 0
    clock.now += 6
    await cache.find(ids[0], max_age=5)
    assert calls(server, "list") == 2
    assert cache.stats.hits == 31


async def test_a_runner_written_since_the_snapshot_is_read_directly(
    server: RunningServer, cloud: CloudClient
) -> None:
    ids = await seed(cloud, 3)
    clock = Clock()
    cache = RunnerCache(cloud, clock=clock)
    await cache.find(ids[0], max_age=5)
    cache.note_write(ids[1])
    server.simulator.log.clear()
    assert (await cache.find(ids[1], max_age=5)) is not None
    assert calls(server, "get") == 1
    assert (await cache.find(ids[2], max_age=5)) is not None
    assert calls(server, "get") == 1


async def test_absence_in_the_list_is_confirmed_with_a_get(server: RunningServer, cloud: CloudClient) -> None:
    await seed(cloud, 2)
    cache = RunnerCache(cloud, clock=Clock())
    server.simulator.log.clear()
    assert await cache.find("never-created", max_age=5) is None
    assert calls(server, "list") == 1
    assert calls(server, "get") == 1


async def test_concurrent_passes_share_one_list(server: RunningServer, cloud: CloudClient) -> None:
    ids = await seed(cloud, 20)
    server.simulator.log.clear()
    server.simulator.set_latency("list", 0.2)
    cache = RunnerCache(cloud, clock=Clock())
    found = await asyncio.gather(*(cache.find(r, max_age=5) for r in ids))
    assert all(found)
    assert calls(server, "list") == 1


async def test_max_age_zero_always_reads_directly(server: RunningServer, cloud: CloudClient) -> None:
    ids = await seed(cloud, 2)
    cache = RunnerCache(cloud, clock=Clock())
    server.simulator.log.clear()
    await cache.find(ids[0], max_age=0)
    assert calls(server, "list") == 0
    assert calls(server, "get") == 1


async def test_a_written_runner_is_served_from_the_next_list_again(
    server: RunningServer, cloud: CloudClient
) -> None:
    ids = await seed(cloud, 3)
    clock = Clock()
    cache = RunnerCache(cloud, clock=clock)
    await cache.find(ids[0], max_age=5)
    cache.note_write(ids[0])
    clock.now += 1
    server.simulator.log.clear()
    await cache.find(ids[0], max_age=5)
    assert calls(server, "get") == 1
    clock.now += 10
    await cache.find(ids[0], max_age=5)
    assert calls(server, "list") == 1
    assert calls(server, "get") == 1, "a list taken after the write serves the runner again"


async def test_a_list_is_as_recent_as_its_request_not_its_wait_in_the_queue(
    server: RunningServer, cloud: CloudClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes answered while the list waited for the request budget are in it: no extra GET for them."""
    ids = await seed(cloud, 3)
    clock = Clock()
    cache = RunnerCache(cloud, clock=clock)
    queue = cloud.budget.acquire

    async def slow_turn(sleep: budget.Sleep = asyncio.sleep, *, max_wait: float = float("inf")) -> None:
        clock.now += 5
        cache.note_write(ids[0])  # answered while the list was still queued
        clock.now += 5
        await queue(sleep, max_wait=max_wait)

    monkeypatch.setattr(cloud.budget, "acquire", slow_turn)
    await cache.find(ids[1], max_age=30)
    monkeypatch.undo()
    cache.note_write(ids[2])  # answered after the list left: must be read again
    server.simulator.log.clear()
    assert (await cache.find(ids[0], max_age=30)) is not None
    assert calls(server, "get") == 0
    assert (await cache.find(ids[2], max_age=30)) is not None
    assert calls(server, "get") == 1
