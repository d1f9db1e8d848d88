"""The cloud boundary a pass uses: it keeps the shared snapshot honest about its own writes."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator.cloud import diff, errors
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import CloudRunner, parse_runner
from runner_operator.cloud.runners import Runners
from tests.unit.cloud.fakes import FakeApi, FakeClock, runner_json

CLUSTER = "00000000-0000-4000-8000-000000000001"


def gets(api: FakeApi) -> int:
    return sum(1 for r in api.requests if r.method == "GET" and not r.url.path.endswith("managedRunners"))


def lists(api: FakeApi) -> int:
    return sum(1 for r in api.requests if r.method == "GET" and r.url.path.endswith("managedRunners"))


async def test_reads_come_from_the_snapshot_until_a_write_then_from_the_write(
    api: FakeApi, cloud: CloudClient, clock: FakeClock
) -> None:
    api.runners["kept"] = runner_json("kept", identity={**runner_json()["identity"], "runnerId": "kept"})
    runners = Runners(cloud, RunnerCache(cloud, clock=clock), max_age=10)
    assert (await runners.observe("kept")) is not None
    assert (lists(api), gets(api)) == (1, 0)
    created = await runners.create(parse_runner(runner_json("new")), "key-1")
    # The create's answer serves the next read: no GET, no new list.
    assert (await runners.observe("new")) == created
    assert (lists(api), gets(api)) == (1, 0)
    await runners.delete("new")
    # After a delete there is no answer to trust: the next read goes to the API.
    await runners.observe("new")
    assert gets(api) == 1


async def test_an_update_is_noted_like_a_create(api: FakeApi, cloud: CloudClient, clock: FakeClock) -> None:
    runners = Runners(cloud, RunnerCache(cloud, clock=clock), max_age=10)
    created = await runners.create(parse_runner(runner_json("r")), "key-1")
    change = diff.compute_update(parse_runner(runner_json("r", displayName="two")), created)
    assert change is not None
    updated = await runners.update("r", change)
    assert (await runners.observe("r")) == updated
    assert gets(api) == 0


async def test_without_a_snapshot_every_read_is_a_get(api: FakeApi, cloud: CloudClient) -> None:
    runners = Runners(cloud)
    await runners.create(parse_runner(runner_json("r")), "key-1")
    await runners.observe("r")
    await runners.observe("absent")
    assert (lists(api), gets(api)) == (0, 2)


async def test_cluster_holder_comes_from_a_list_taken_now(
    api: FakeApi, cloud: CloudClient, clock: FakeClock
) -> None:
    runners = Runners(cloud, RunnerCache(cloud, clock=clock), max_age=1000)
    assert await runners.cluster_holder(CLUSTER) is None
    await runners.create(parse_runner(runner_json("holder")), "key-1")
    # Even with a fresh snapshot, the holder is read from a new list: it may decide a delete.
    assert await runners.cluster_holder(CLUSTER.upper()) == "holder"
    assert lists(api) == 2
    assert await Runners(cloud).cluster_holder(CLUSTER) == "holder"


async def test_a_write_that_fails_is_noted_again_a_list_sent_while_it_waited_does_not_stand_for_it(
    api: FakeApi, cloud: CloudClient, clock: FakeClock
) -> None:
    """A list page may overtake a write waiting for the budget; if the write's answer is then lost,
    the list (sent before the write) must not be read as the runner's state."""
    cache = RunnerCache(cloud, clock=clock)
    runners = Runners(cloud, cache, max_age=10)
    send = cloud.create

    async def overtaken(*args: Any, **kwargs: Any) -> CloudRunner:
        clock.now += 1
        await cache.identities(0)  # a list sent while the create waited: it cannot show it
        clock.now += 1
        await send(*args, **kwargs)
        raise errors.Unavailable("answer lost")

    cloud.create = overtaken  # type: ignore[method-assign]
    with pytest.raises(errors.Unavailable):
        await runners.create(parse_runner(runner_json("new")), "key-1")
    assert await runners.observe("new", prove_absence=False) is not None
    assert gets(api) == 1, "read directly: the list does not stand for the lost write"
