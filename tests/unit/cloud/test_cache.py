"""The batched-read cache: one list serves many runners, writes and absences are re-read directly."""

from __future__ import annotations

import asyncio
import gc
import math
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import pytest

from runner_operator import jsoncodec
from runner_operator.cloud import budget, errors
from runner_operator.cloud import cache as cache_module
from runner_operator.cloud import client as client_module
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import parse_runner
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve
from tests.clock import FakeClock
from tests.unit.cloud.fakes import BASE_URL, TOKEN, Body, FakeApi, list_page, runner_json


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
    clock = FakeClock(100.0)
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
    clock = FakeClock(100.0)
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
    cache = RunnerCache(cloud, clock=FakeClock(100.0))
    server.simulator.log.clear()
    assert await cache.find("never-created", max_age=5) is None
    assert calls(server, "list") == 1
    assert calls(server, "get") == 1


async def test_concurrent_passes_share_one_list(server: RunningServer, cloud: CloudClient) -> None:
    ids = await seed(cloud, 20)
    server.simulator.log.clear()
    server.simulator.set_latency("list", 0.2)
    cache = RunnerCache(cloud, clock=FakeClock(100.0))
    found = await asyncio.gather(*(cache.find(r, max_age=5) for r in ids))
    assert all(found)
    assert calls(server, "list") == 1


async def test_max_age_zero_always_reads_directly(server: RunningServer, cloud: CloudClient) -> None:
    ids = await seed(cloud, 2)
    cache = RunnerCache(cloud, clock=FakeClock(100.0))
    server.simulator.log.clear()
    await cache.find(ids[0], max_age=0)
    assert calls(server, "list") == 0
    assert calls(server, "get") == 1


async def test_a_written_runner_is_served_from_the_next_list_again(
    server: RunningServer, cloud: CloudClient
) -> None:
    ids = await seed(cloud, 3)
    clock = FakeClock(100.0)
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
    clock = FakeClock(100.0)
    cache = RunnerCache(cloud, clock=clock)
    queue = cloud.budget.acquire

    async def slow_turn(
        sleep: budget.Sleep = asyncio.sleep, *, max_wait: float = float("inf"), horizon: float | None = None
    ) -> None:
        clock.now += 5
        cache.note_write(ids[0])  # answered while the list was still queued
        clock.now += 5
        await queue(sleep, max_wait=max_wait, horizon=horizon)

    monkeypatch.setattr(cloud.budget, "acquire", slow_turn)
    await cache.find(ids[1], max_age=30)
    monkeypatch.undo()
    cache.note_write(ids[2])  # answered after the list left: must be read again
    server.simulator.log.clear()
    assert (await cache.find(ids[0], max_age=30)) is not None
    assert calls(server, "get") == 0
    assert (await cache.find(ids[2], max_age=30)) is not None
    assert calls(server, "get") == 1


# --- compact snapshot ---------------------------------------------------------------------------


class Pages:
    """FakeApi behind a handler that can refuse list pages after the first (a list that breaks off)."""

    def __init__(self) -> None:
        self.api = FakeApi()
        self.break_after_first_page = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.break_after_first_page and request.url.params.get("pageToken"):
            return httpx.Response(400, json={"code": 3, "message": "injected", "details": []})
        return self.api.handle(request)


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> Pages:
    monkeypatch.setattr(cache_module, "PAGE_SIZE", 2)
    found = Pages()
    for i in range(5):
        found.api.runners[f"r-{i}"] = runner_json(f"r-{i}") | {"displayName": "v1"}
    return found


@pytest.fixture
async def paged(pages: Pages) -> AsyncIterator[CloudClient]:
    unlimited = budget.RequestBudget(1000, 1000)
    transport = httpx.MockTransport(pages.handle)
    async with CloudClient(BASE_URL, TOKEN, transport=transport, budget=unlimited) as client:
        yield client


async def test_a_listed_runner_reads_as_its_direct_get_does() -> None:
    # Simulated time stands still: an install step between the list and the GET (50 ms with the
    # instant timings, less than a loaded CI machine takes between two requests) would differ.
    frozen = SimulatorConfig(timings=Timings.instant(), clock=FakeClock(1_000_000.0))
    async with (
        await serve(frozen) as srv,
        CloudClient(srv.url, DEV_ADMIN_TOKEN, budget=budget.RequestBudget(1000, 1000)) as cloud,
    ):
        ids = await seed(cloud, 3)
        cache = RunnerCache(cloud, clock=FakeClock(100.0))
        for runner_id in ids:
            assert await cache.find(runner_id, max_age=5) == await cloud.get(runner_id)


async def test_the_snapshot_keeps_runners_compactly(
    pages: Pages, paged: CloudClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "PAGE_SIZE", 1000)  # one request: the fake keeps every request
    for i in range(5, 40):
        pages.api.runners[f"r-{i}"] = runner_json(f"r-{i}")
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    await cache.find("r-0", max_age=5)  # warm the client up outside the measurement
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        await cache.find("r-0", max_age=5)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
        as_models = [parse_runner(body) for body in pages.api.runners.values()]
        models = tracemalloc.get_traced_memory()[0] - base - held
    finally:
        tracemalloc.stop()
    assert len(as_models) == 40
    assert held * 4 < models, f"snapshot {held} bytes, the same runners as models {models} bytes"


async def test_a_list_that_breaks_off_keeps_the_earlier_entries(pages: Pages, paged: CloudClient) -> None:
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    assert await cache.find("r-4", max_age=5) is not None
    for runner in pages.api.runners.values():
        runner["displayName"] = "v2"
    pages.break_after_first_page = True
    clock.now += 10
    with pytest.raises(errors.InvalidArgument):
        await cache.find("r-0", max_age=5)
    requests = len(pages.api.requests)
    first = await cache.find("r-0", max_age=60)
    later = await cache.find("r-4", max_age=60, trust_absence=True)
    assert first is not None
    assert first.display_name == "v2", "the page that arrived replaced its entries"
    assert later is not None
    assert later.display_name == "v1", "the page that never came is no absence"
    assert len(pages.api.requests) == requests


async def test_a_runner_missing_from_a_complete_list_is_dropped(pages: Pages, paged: CloudClient) -> None:
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    await cache.find("r-0", max_age=5)
    del pages.api.runners["r-3"]
    clock.now += 10
    assert await cache.find("r-3", max_age=5, trust_absence=True) is None
    assert cache.stats.direct_gets == 0
    assert await cache.find("r-3", max_age=5) is None
    assert cache.stats.direct_gets == 1, "absence without trust_absence is still confirmed with a GET"


async def test_a_pass_during_a_refresh_reads_the_entries_already_listed_or_kept(
    pages: Pages, paged: CloudClient
) -> None:
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    await cache.find("r-0", max_age=5)
    release = asyncio.Event()
    listing = paged.budget.acquire

    async def slow_second_page(*args: object, **kwargs: object) -> None:
        if sum(1 for r in pages.api.requests if r.method == "GET") >= 4:
            await release.wait()
        await listing(*args, **kwargs)  # type: ignore[arg-type]

    paged.budget.acquire = slow_second_page  # type: ignore[method-assign]
    clock.now += 10
    refresh = asyncio.create_task(cache.find("r-0", max_age=5))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not refresh.done()
    assert [await cache.find(f"r-{i}", max_age=60, trust_absence=True) for i in range(5)] == [
        parse_runner(pages.api.runners[f"r-{i}"]) for i in range(5)
    ]
    release.set()
    assert await refresh is not None


async def test_an_unreadable_entry_fails_only_its_own_runner(pages: Pages, paged: CloudClient) -> None:
    del pages.api.runners["r-2"]["spec"]
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    assert await cache.find("r-1", max_age=5) is not None
    with pytest.raises(errors.IncompatibleServer, match="no spec"):
        await cache.find("r-2", max_age=5)


async def test_an_unreadable_identity_fails_the_list(pages: Pages, paged: CloudClient) -> None:
    pages.api.runners["r-2"]["identity"]["clusterId"] = 7
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    with pytest.raises(errors.IncompatibleServer, match=r"identity\.clusterId"):
        await cache.find("r-1", max_age=5)


async def test_identities_name_every_runner_and_its_cluster_from_a_list_taken_now(
    pages: Pages, paged: CloudClient
) -> None:
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    await cache.find("r-0", max_age=5)
    pages.api.runners["r-9"] = runner_json("r-9") | {"identity": {"runnerId": "r-9", "clusterId": "c-9"}}
    found = await cache.identities(0)
    assert cache.stats.lists == 2
    assert {(i.runner_id, i.cluster_id) for i in found} == {
        *((f"r-{i}", "00000000-0000-4000-8000-000000000001") for i in range(5)),
        ("r-9", "c-9"),
    }


async def test_close_stops_a_refresh_in_flight(pages: Pages, paged: CloudClient) -> None:
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    stuck = asyncio.Event()

    async def never(*args: object, **kwargs: object) -> None:
        await stuck.wait()

    paged.budget.acquire = never  # type: ignore[method-assign]
    finding = asyncio.create_task(cache.find("r-0", max_age=5))
    await asyncio.sleep(0)
    await cache.close()
    with pytest.raises(asyncio.CancelledError):
        await finding


async def test_a_refresh_that_fails_on_an_entry_closes_the_list_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The response is closed as the failure leaves the refresh, not when the collector finds it."""
    data = list_page(*(f"r-{i}" for i in range(600)))
    assert len(data) > 2 * client_module.TEXT_CHUNK  # the failure comes before the body was all read
    body = Body(data, size=4096)

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=body)

    unlimited = budget.RequestBudget(1000, 1000)
    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(serve), budget=unlimited) as cloud:
        cache = RunnerCache(cloud, clock=FakeClock(100.0))
        kept: list[bytes] = []

        def compress(raw: bytes) -> bytes:
            if kept:
                raise RuntimeError("cannot keep this entry")
            kept.append(raw)
            return raw

        monkeypatch.setattr(cache._packer, "compress", compress)
        with pytest.raises(RuntimeError, match="cannot keep"):
            await cache.find("r-0", max_age=5)
        assert body.closed


async def test_a_heartbeat_alone_keeps_the_entry_and_is_still_read(
    cloud: CloudClient, server: RunningServer
) -> None:
    """The entry (a quiet pass's fingerprint) leaves the heartbeat out; a find still returns it."""
    [runner_id] = await seed(cloud, 1)
    await asyncio.sleep(0.3)  # installed and connected: heartbeats every 0.05 s
    clock = FakeClock(0.0)
    cache = RunnerCache(cloud, clock=clock)
    first = await cache.entry(runner_id, max_age=1)
    found = await cache.find(runner_id, max_age=1)
    assert found is not None
    beat = found.last_heartbeat_time
    assert beat is not None
    await asyncio.sleep(0.2)
    clock.tick(2)
    second = await cache.entry(runner_id, max_age=1)
    found = await cache.find(runner_id, max_age=1)
    assert found is not None
    later = found.last_heartbeat_time
    assert later is not None
    assert later > beat, "a new list, a newer heartbeat"
    assert first is not None
    assert second == first, "nothing but the heartbeat moved: the same entry"
    assert server.simulator.get(runner_id)["lastHeartbeatTime"] is not None


# --- changes seen by the list -------------------------------------------------------------------


async def test_a_complete_list_reports_runners_that_changed_or_vanished(
    pages: Pages, paged: CloudClient
) -> None:
    """Drift at list cadence: what changed since the last list (heartbeat aside) is named, nothing else."""
    clock = FakeClock(100.0)
    told: list[frozenset[str]] = []
    cache = RunnerCache(paged, clock=clock, on_change=told.append)
    await cache.find("r-0", max_age=5)
    assert told == [], "the first list has nothing to compare with"
    pages.api.runners["r-1"]["displayName"] = "edited in the console"
    pages.api.runners["r-2"]["lastHeartbeatTime"] = "2026-12-05T00:00:09Z"
    del pages.api.runners["r-3"]
    clock.now += 10
    await cache.find("r-0", max_age=5)
    assert told == [frozenset({"r-1", "r-3"})]
    clock.now += 10
    await cache.find("r-0", max_age=5)
    assert len(told) == 1, "an unchanged list names nothing"


async def test_a_list_that_breaks_off_reports_nothing(pages: Pages, paged: CloudClient) -> None:
    clock = FakeClock(100.0)
    told: list[frozenset[str]] = []
    cache = RunnerCache(paged, clock=clock, on_change=told.append)
    await cache.find("r-0", max_age=5)
    pages.api.runners["r-0"]["displayName"] = "v2"
    pages.break_after_first_page = True
    clock.now += 10
    with pytest.raises(errors.InvalidArgument):
        await cache.find("r-0", max_age=5)
    assert told == [], "only a complete list is compared"


# --- what a list costs ----------------------------------------------------------------------------


async def test_a_list_is_not_taken_more_often_than_its_pages_allow(pages: Pages, paged: CloudClient) -> None:
    """Three pages (PAGE_SIZE 2, five runners): at most one list per 4 s, whatever age a pass asks for."""
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    await cache.find("r-0", max_age=1)
    assert cache.stats.lists == 1
    clock.now += 3
    await cache.find("r-1", max_age=1)
    assert cache.stats.lists == 1, "3 s after a 3-page list: the same list"
    clock.now += 2
    await cache.find("r-1", max_age=1)
    assert cache.stats.lists == 2
    assert await cache.find("r-1", max_age=0) is not None
    assert cache.stats.direct_gets == 1, "max_age 0 still reads now"
    assert len(await cache.identities(0)) == 5
    assert cache.stats.lists == 3, "identities(0) still lists now"


async def test_the_send_of_a_reserved_key_does_not_wait_for_a_fresher_list(
    pages: Pages, paged: CloudClient
) -> None:
    """`absence_age` infinite (the create of a key already reserved) takes the last complete list's
    absence however old it is: the API refuses the create for a runner that exists. What that list
    shows, what this process wrote since, and an absence that may reserve a key are read fresh."""
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    await cache.find("r-0", max_age=1)
    pages.api.runners["r-new"] = runner_json("r-new")  # made after the list
    clock.now += 600
    assert await cache.find("r-new", max_age=1, trust_absence=True, absence_age=math.inf) is None
    assert (cache.stats.lists, cache.stats.direct_gets) == (1, 0), "no list, no GET for the absence"
    assert await cache.find("r-3", max_age=1, trust_absence=True, absence_age=math.inf) is not None
    assert cache.stats.lists == 2, "a runner the old list shows is listed again (it may be gone)"
    clock.now += 600
    cache.note_write("r-gone")
    assert await cache.find("r-gone", max_age=1, trust_absence=True, absence_age=math.inf) is None
    assert cache.stats.lists == 3, "a runner this process wrote since the list is not taken from it"
    gets = cache.stats.direct_gets
    clock.now += 600
    del pages.api.runners["r-new"]
    pages.api.runners["r-newer"] = runner_json("r-newer")
    assert await cache.find("r-newer", max_age=1, trust_absence=True) is not None
    assert (cache.stats.lists, cache.stats.direct_gets) == (4, gets), "no absence_age: listed again"
    clock.now += 600
    assert await cache.find("r-newest", max_age=1, trust_absence=True, absence_age=601) is None
    assert cache.stats.lists == 4, "a list 600 s old will do for an absence up to 601 s old"
    assert await cache.find("r-newest", max_age=1, trust_absence=True, absence_age=599) is None
    assert cache.stats.lists == 5, "not for one up to 599 s old"
    clock.now += 600
    assert await cache.find("r-unknown", max_age=1, absence_age=math.inf) is None
    assert (cache.stats.lists, cache.stats.direct_gets) == (6, gets + 1), (
        "absence_age without trust_absence: listed again, and the absence read directly"
    )


async def test_an_absence_is_never_older_than_absence_age_even_between_slow_lists(pages: Pages) -> None:
    """A slow budget spaces lists 60 s apart and a slow pass asks for 150 s; a reservation's absence
    (absence_age 30 s) is still listed again once the list is older than 30 s."""
    clock = FakeClock(100.0)
    slow = budget.RequestBudget(1, 1000, clock=clock)
    transport = httpx.MockTransport(pages.handle)
    async with CloudClient(BASE_URL, TOKEN, transport=transport, budget=slow) as cloud:
        cache = RunnerCache(cloud, clock=clock)
        await cache.find("r-0", max_age=150)
        clock.now += 29
        assert await cache.find("r-new", max_age=150, trust_absence=True, absence_age=30) is None
        assert cache.stats.lists == 1
        clock.now += 2
        assert await cache.find("r-new", max_age=150, trust_absence=True, absence_age=30) is None
        assert cache.stats.lists == 2
        clock.now += 31
        assert await cache.find("r-0", max_age=150, trust_absence=True, absence_age=30) is not None
        assert cache.stats.lists == 2, "presence is as fresh as the pass asks"


async def test_a_cache_that_never_completed_a_list_lists_before_trusting_an_absence(
    pages: Pages, paged: CloudClient
) -> None:
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    assert await cache.find("r-2", max_age=1, trust_absence=True, absence_age=math.inf) is not None
    assert cache.stats.lists == 1


async def test_lists_take_at_most_their_share_of_the_request_budget(pages: Pages) -> None:
    """Three pages at 1 req/s: one list per 3 / (1 x LIST_SHARE) = 60 s at most, whatever age a pass asks."""
    clock = FakeClock(100.0)
    slow = budget.RequestBudget(1, 1000, clock=clock)
    async with CloudClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(pages.handle), budget=slow
    ) as cloud:
        cache = RunnerCache(cloud, clock=clock)
        await cache.find("r-0", max_age=1)
        clock.now += 3 / cache_module.LIST_SHARE - 1
        await cache.find("r-0", max_age=1)
        assert cache.stats.lists == 1
        clock.now += 2
        await cache.find("r-0", max_age=1)
        assert cache.stats.lists == 2


async def test_our_write_answers_for_the_runner_as_long_as_a_list_would(
    pages: Pages, paged: CloudClient
) -> None:
    """Between lists a written runner is served by its write's response, not by a GET per pass."""
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    written = await cache.find("r-0", max_age=1)
    assert written is not None
    clock.now += 0.5
    cache.note_write("r-0", written)
    clock.now += 3  # the response is 3 s old: older than asked for, younger than the 4 s between lists
    assert await cache.find("r-0", max_age=1) is written
    assert cache.stats.direct_gets == 0
    assert cache.stats.lists == 1


async def test_a_refresh_compresses_only_the_entries_that_changed(
    pages: Pages, paged: CloudClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(100.0)
    cache = RunnerCache(paged, clock=clock)
    kept = {rid: await cache.entry(rid, max_age=5) for rid in pages.api.runners}
    compressed: list[bytes] = []
    real = jsoncodec.Packer.compress

    def counting(packer: jsoncodec.Packer, data: bytes) -> bytes:
        compressed.append(data)
        return real(packer, data)

    monkeypatch.setattr(jsoncodec.Packer, "compress", counting)
    pages.api.runners["r-1"]["displayName"] = "edited"
    clock.now += 10
    again = {rid: await cache.entry(rid, max_age=5) for rid in pages.api.runners}
    assert len(compressed) == 1
    assert b"edited" in compressed[0]
    assert all(again[rid] is kept[rid] for rid in kept if rid != "r-1"), "unchanged: the same bytes"
    assert again["r-1"] != kept["r-1"]
    found = await cache.find("r-1", max_age=5)
    assert found is not None
    assert found.display_name == "edited"


async def test_an_entry_with_a_number_past_64_bits_is_kept(pages: Pages, paged: CloudClient) -> None:
    pages.api.runners["r-0"]["someCounter"] = 2**70  # valid JSON that orjson refuses to write
    cache = RunnerCache(paged, clock=FakeClock(100.0))
    assert await cache.find("r-0", max_age=5) is not None
    assert cache.stats.direct_gets == 0
