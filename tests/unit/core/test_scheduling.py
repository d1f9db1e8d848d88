"""The scheduler shell: bodies kept compressed, our own writes preferred until the watch catches up,
and due passes run, requeued from what they return, backed off when they raise."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from runner_operator.scheduling import CREATE, STEADY, Bodies, Scheduler
from runner_operator.workqueue import Backoff, Slot, WorkQueue
from tests.clock import FakeClock


def _body(
    rv: str, runner_id: str | None = None, secret: str | None = None, request_id: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"runnerId": "r", "policy": {"big": "x" * 5000}}
    if secret:
        spec["credentials"] = {"secretRef": {"name": secret}}
    return {
        "metadata": {
            "uid": "u",
            "namespace": "ns",
            "name": "n",
            "resourceVersion": rv,
            "managedFields": [{}],
        },
        "spec": spec,
        "status": {
            **({"runnerId": runner_id} if runner_id else {}),
            **({"createRequestId": request_id} if request_id else {}),
        },
    }


def test_bodies_are_kept_compressed_without_managed_fields() -> None:
    bodies = Bodies()
    assert bodies.put("u", _body("1"))
    assert not bodies.put("u", _body("2")), "seen before"
    got = bodies.get("u")
    assert got is not None
    assert got["metadata"]["resourceVersion"] == "2"
    assert "managedFields" not in got["metadata"]
    assert len(bodies._kept["u"].packed) < 1000, "5 KB of repetitive spec compresses well"


@pytest.mark.parametrize(
    ("runner_id", "secret", "request_id", "slot"),
    [
        (None, None, None, Slot(CREATE, "default")),
        (None, "team-token", None, Slot(CREATE, "ns/team-token")),
        (None, "team-token", "key-1", Slot(CREATE, "ns/team-token", first=True)),
        ("r-1", "team-token", None, Slot(STEADY, "ns/team-token")),
        ("r-1", "team-token", "key-1", Slot(STEADY, "ns/team-token")),
    ],
)
def test_lane_group_and_place_in_line_come_from_the_body(
    runner_id: str | None, secret: str | None, request_id: str | None, slot: Slot
) -> None:
    """A reserved create key puts the object first in its credential's line: its create is next."""
    bodies = Bodies()
    bodies.put("u", _body("1", runner_id, secret, request_id))
    assert bodies.slot("u") == slot
    assert bodies.slot("unknown") == Slot(STEADY)


def test_our_write_is_preferred_until_the_watch_shows_it() -> None:
    clock = FakeClock()
    bodies = Bodies(clock=clock)
    bodies.put("u", _body("5"))
    bodies.wrote("u", _body("7", runner_id="r-1"))
    assert bodies.get("u")["status"] == {"runnerId": "r-1"}  # type: ignore[index]
    assert bodies.slot("u")[0] == STEADY
    bodies.put("u", _body("6"))  # an older event still in flight
    assert bodies.get("u")["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    bodies.put("u", _body("8", runner_id="r-1"))  # the watch caught up (and beyond)
    assert bodies.get("u")["metadata"]["resourceVersion"] == "8"  # type: ignore[index]


def test_the_watch_wins_when_versions_do_not_compare_and_our_write_expires() -> None:
    clock = FakeClock()
    bodies = Bodies(clock=clock)
    bodies.put("u", _body("a"))
    bodies.wrote("u", _body("b", runner_id="r-1"))
    bodies.put("u", _body("c"))
    assert bodies.get("u")["metadata"]["resourceVersion"] == "c", "not comparable: the watch wins"  # type: ignore[index]
    bodies.wrote("u", _body("8"))
    bodies.put("u", _body("5"))  # older, and the watch never shows "8" (a relist skipped it)
    assert bodies.get("u")["metadata"]["resourceVersion"] == "8"  # type: ignore[index]
    clock.tick(61)
    assert bodies.get("u")["metadata"]["resourceVersion"] == "5"  # type: ignore[index]


def test_a_pass_unpacks_its_body_once_unless_a_newer_one_came() -> None:
    bodies = Bodies()
    bodies.put("u", _body("1"))
    read = bodies.get("u")
    assert read is not None
    assert bodies.unless_newer("u", read, "1") is read, "nothing newer: not unpacked again"
    bodies.wrote("u", _body("2", runner_id="r-1"))  # our own write came while the pass waited
    newer = bodies.unless_newer("u", read, "1")
    assert newer is not None
    assert newer["status"] == {"runnerId": "r-1"}
    assert bodies.unless_newer("u", read, None) is not read, "a version unknown when read proves nothing"
    bodies.forget("u")
    assert bodies.unless_newer("u", read, "2") is None, "gone"


def test_a_write_for_a_forgotten_object_is_not_kept() -> None:
    bodies = Bodies()
    bodies.put("u", _body("1"))
    bodies.forget("u")
    bodies.wrote("u", _body("2"))
    assert bodies.get("u") is None
    assert len(bodies) == 0
    assert "u" not in bodies


def _scheduler(run: Any, limits: dict[str, int] | None = None) -> Scheduler:
    return Scheduler(
        WorkQueue(limits=limits or {}, backoff=Backoff(base=0.02, cap=0.05)),
        run=run,
        slot=lambda key: Slot(CREATE, "g") if key.startswith("c") else Slot(STEADY),
        clock=asyncio.get_running_loop().time,
    )


async def test_due_passes_run_and_are_requeued_from_what_they_return() -> None:
    runs: list[str] = []

    async def run(key: str) -> float | None:
        runs.append(key)
        return 0.01 if runs.count(key) < 3 else None

    s = _scheduler(run)
    s.start()
    s.add("a", 0)
    s.add("b", 0.02)
    await asyncio.sleep(0.2)
    await s.stop()
    assert runs.count("a") == 3
    assert runs.count("b") == 3
    assert len(s.queue) == 0, "None: not looked at again until woken"


async def test_a_pass_that_raises_is_retried_after_a_backoff_and_never_stops() -> None:
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def run(key: str) -> float | None:
        runs.append(loop.time())
        if len(runs) < 4:
            raise RuntimeError("API server restarting")
        return None

    s = _scheduler(run)
    s.start()
    s.add("a", 0)
    await asyncio.sleep(0.4)
    await s.stop()
    assert len(runs) == 4, "three failures, then a pass that ends normally"
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.009 for gap in gaps), gaps


async def test_never_two_passes_at_once_for_one_key_and_wakes_are_not_lost() -> None:
    running, most, runs = 0, 0, 0
    release = asyncio.Event()

    async def run(key: str) -> float | None:
        nonlocal running, most, runs
        running += 1
        runs += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        return None

    s = _scheduler(run)
    s.start()
    s.add("a", 0)
    await asyncio.sleep(0.02)
    for _ in range(5):
        s.add("a", 0)  # watch events while the pass runs
    await asyncio.sleep(0.02)
    assert most == 1
    assert runs == 1
    release.set()
    await asyncio.sleep(0.05)
    await s.stop()
    assert runs == 2, "the wake-ups held during the pass give exactly one more pass"


async def test_a_limited_lane_runs_at_most_its_limit_per_group() -> None:
    running, most = 0, 0

    async def run(key: str) -> float | None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return None

    s = _scheduler(run, limits={CREATE: 2})
    s.start()
    for i in range(10):
        s.add(f"c{i}", 0)
    await asyncio.sleep(0.2)
    await s.stop()
    assert most == 2
    assert len(s.queue) == 0, "all ten ran"


async def test_forget_while_running_ends_without_another_pass() -> None:
    runs = 0

    async def run(key: str) -> float | None:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.02)
        return 0.01

    s = _scheduler(run)
    s.start()
    s.add("a", 0)
    await asyncio.sleep(0.005)
    s.forget("a")
    await asyncio.sleep(0.1)
    await s.stop()
    assert runs == 1
