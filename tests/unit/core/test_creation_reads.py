"""What a creation costs, and what a list's absence may decide (`planning.absence_needs_proof`).

Rule: a list's absence may reserve a create key and send the create, because the API arbitrates a
create (ALREADY_EXISTS, then a direct read); it never releases, forgets or recreates a runner. The
shell runs against the in-process simulator with a shared list snapshot, as the operator does, and
counts the calls.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner_operator import planning, reconciling, resource
from runner_operator.cloud import errors
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.runners import Runners
from runner_operator.resource import FINALIZER
from runner_operator.simulator.server import RunningServer
from runner_operator.unsent import UnsentKeys
from tests.clock import FakeClock
from tests.unit.builders import metadata

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CLUSTER = "00000000-0000-4000-8000-000000000001"
IDENTITY = {"runnerId": "owned", "clusterId": CLUSTER, "zone": "us-east-04a"}


class Object:
    """A ManagedRunner whose status takes each pass's patch; passes share one list snapshot."""

    def __init__(self, cloud: CloudClient, start: datetime = T0, **spec: Any) -> None:
        self.body: dict[str, Any] = {
            "metadata": metadata(),
            "spec": {**IDENTITY, "policy": {}, **spec},
            "status": {},
        }
        self.cache = RunnerCache(cloud)
        self.cloud = cloud
        self.start = start
        self.seconds = 0.0
        self.unsent = UnsentKeys()  # the operator process's record of keys it has not sent
        self.max_age = 60.0  # how fresh a list each pass asks for

    def restart(self) -> None:
        """A new operator process: it knows nothing of the keys the last one had not sent."""
        self.unsent = UnsentKeys()

    async def step(self, *, deleting: bool = False) -> reconciling.Outcome:
        self.seconds += 1
        if deleting:
            self.body["metadata"]["deletionTimestamp"] = "2026-12-02T12:05:00Z"
        res = resource.ManagedRunnerResource.from_body(self.body)
        ctx = reconciling.Context(
            now=self.start + timedelta(seconds=self.seconds),
            deletion_timeout=600,
            credential="c",
            unsent=self.unsent,
        )
        outcome = await reconciling.reconcile(res, Runners(self.cloud, self.cache, max_age=self.max_age), ctx)
        self.body["status"] = {**self.body["status"], **outcome.status.to_patch()}
        return outcome


def calls(server: RunningServer) -> Counter[str]:
    return Counter(e.endpoint for e in server.simulator.log.entries)


@pytest.mark.parametrize(
    ("deleting", "bound", "credential_changed", "stale_key", "replacing", "needs_proof"),
    [
        (False, False, False, False, False, False),  # reserve and create: the API arbitrates
        (False, False, False, True, False, True),  # a key reserved for another runner ID
        (False, True, False, False, False, True),  # gone while bound: it would be recreated
        (True, False, False, False, False, True),  # deleting: it would be released
        (True, True, False, False, False, True),
        (False, False, True, False, False, True),  # another credential's NOT_FOUND proves nothing
        (False, False, False, False, True, True),  # a free new ID lets a replacement delete the old runner
    ],
)
def test_which_absence_needs_the_apis_own_not_found(
    deleting: bool, bound: bool, credential_changed: bool, stale_key: bool, replacing: bool, needs_proof: bool
) -> None:
    got = planning.absence_needs_proof(
        deleting=deleting,
        bound=bound,
        credential_changed=credential_changed,
        stale_key=stale_key,
        replacing=replacing,
    )
    assert got == needs_proof


async def test_nothing_is_created_before_the_finalizer_is_on_the_resource(
    server: RunningServer, cloud: CloudClient
) -> None:
    """kopf starts the first pass in the cycle that adds the finalizer; a resource deleted before the
    finalizer lands would go at once, so a runner created meanwhile would be left behind."""
    obj = Object(cloud)
    obj.body["metadata"]["finalizers"] = []
    await obj.step()
    assert obj.body["status"]["createRequestId"]  # reserving the key is only a status write
    for _ in range(3):
        waited = await obj.step()
        assert waited.calls == ()
        ready = waited.status.condition("Ready")
        assert ready is not None
        assert ready.reason == "AwaitingFinalizer"
    assert calls(server)["create"] == 0
    obj.body["metadata"]["finalizers"] = [FINALIZER]
    assert (await obj.step()).calls == ("create",)


async def test_a_creation_costs_a_create_and_a_share_of_a_list(
    server: RunningServer, cloud: CloudClient
) -> None:
    obj = Object(cloud)
    reserved = await obj.step()
    assert reserved.calls == ()
    assert obj.body["status"]["createRequestId"]
    created = await obj.step()
    assert created.calls == ("create",)
    assert calls(server) == {"list": 1, "create": 1}, (
        "the key was reserved and the create sent on the list's absence"
    )


@pytest.mark.parametrize(
    ("needs_proof", "key_reserved", "seconds"),
    [
        (False, True, math.inf),  # the send of a reserved key: the API arbitrates it
        (False, False, planning.RESERVATION_LIST_SECONDS),  # the reservation: a bounded age
        (True, True, 0.0),  # a stale key, or anything that needs the API's own NOT_FOUND
        (True, False, 0.0),
    ],
)
def test_how_old_a_lists_absence_may_be(needs_proof: bool, key_reserved: bool, seconds: float) -> None:
    assert planning.absence_age(needs_proof=needs_proof, key_reserved=key_reserved) == seconds


async def test_a_creation_waits_for_a_list_only_when_its_reservation_would_rest_on_an_old_one(
    server: RunningServer, cloud: CloudClient
) -> None:
    """The reservation takes a list's absence up to RESERVATION_LIST_SECONDS old (its age bounds how
    long before our key a runner it missed can have been made); the create that follows takes the
    last list's absence however old."""
    obj = Object(cloud)
    obj.max_age = 2.0
    clock = FakeClock(100.0)
    obj.cache = RunnerCache(cloud, clock=clock)
    await obj.cache.identities(0)
    clock.now += planning.RESERVATION_LIST_SECONDS + 1
    assert (await obj.step()).calls == ()
    assert calls(server) == {"list": 2}, "the reservation listed again"
    clock.now += 3600
    assert (await obj.step()).calls == ("create",)
    assert calls(server) == {"list": 2, "create": 1}, "the create went out on the last list's absence"
    fresh = Object(cloud, runnerId="another")
    fresh.cache, fresh.max_age = obj.cache, 2.0
    await obj.cache.identities(0)
    clock.now += planning.RESERVATION_LIST_SECONDS - 1
    assert (await fresh.step()).calls == ()
    assert fresh.body["status"]["createRequestId"]
    assert calls(server) == {"list": 3, "create": 1}, "a list younger than the bound will do"


def sim_time(server: RunningServer) -> datetime:
    return datetime.fromtimestamp(server.simulator.now(), UTC)


@pytest.mark.parametrize(
    ("made_before_the_key", "adopt", "restart", "reason", "key_kept"),
    [
        # Refused on the key's first send: our key made nothing, so the runner is someone else's.
        (timedelta(seconds=20), False, False, "RunnerIdTaken", False),
        # ... even when the API's clock runs ahead of ours and dates it after our key.
        (-timedelta(seconds=3), False, False, "RunnerIdTaken", False),
        (timedelta(seconds=20), True, False, "Adopted", True),  # spec.adopt: managed from here either way
        # A restart between the reservation and the create: creation times decide.
        (timedelta(minutes=10), False, True, "RunnerIdTaken", False),  # well before the key
        (timedelta(seconds=20), False, True, "OwnershipUnknown", True),  # too close: a person decides
    ],
)
async def test_a_runner_the_list_missed_before_the_reservation_is_never_taken_for_ours(
    server: RunningServer,
    cloud: CloudClient,
    made_before_the_key: timedelta,
    adopt: bool,
    restart: bool,
    reason: str,
    key_kept: bool,
) -> None:
    """Made by someone else after the list was read and before our key: the create is refused, the
    runner read directly and never bound as ours nor deleted."""
    spec = {"adopt": True} if adopt else {}
    obj = Object(cloud, sim_time(server) + made_before_the_key - timedelta(seconds=1), **spec)
    await obj.cache.identities(0)  # a snapshot taken just before someone else made the runner
    server.simulator.create({"identity": IDENTITY, "policy": {}}, request_id="someone-else")
    assert (await obj.step()).calls == (), "the key is reserved on the list's absence"
    if restart:
        obj.restart()
    outcome = await obj.step()
    # Refused with ALREADY_EXISTS (no write went through), then read directly.
    assert calls(server) == {"list": 1, "create": 1, "get": 1}
    assert [e.reason for e in outcome.events] == [reason], outcome.events
    if not adopt:
        assert bool(obj.body["status"].get("createRequestId")) is key_kept
        assert not obj.body["status"].get("runnerId"), "not bound"
    for _ in range(2):
        later = await obj.step()
        assert "delete" not in later.calls
    assert server.simulator.get("owned") is not None


@pytest.mark.parametrize("restart", [False, True])
async def test_a_resource_deleted_before_its_create_went_out_leaves_the_runner_it_found(
    server: RunningServer, cloud: CloudClient, restart: bool
) -> None:
    """Deleted between the reservation and the create while someone else's runner has the ID: a key
    that never went out made nothing, so the resource goes with no create and no delete. After a
    restart that is unknown: the replay is refused, and creation times leave it to a person."""
    obj = Object(cloud, sim_time(server) + timedelta(seconds=5))
    await obj.cache.identities(0)
    server.simulator.create({"identity": IDENTITY, "policy": {}}, request_id="someone-else")
    await obj.step()
    assert obj.body["status"]["createRequestId"]
    if restart:
        obj.restart()
    outcome = await obj.step(deleting=True)
    assert "delete" not in outcome.calls
    assert server.simulator.get("owned") is not None
    if restart:
        assert calls(server)["create"] == 1, "the replay: had the last process's create landed, it would say"
        assert [e.reason for e in outcome.events] == ["OwnershipUnknown"], outcome.events
        assert not outcome.release
    else:
        assert calls(server)["create"] == 0
        assert outcome.release


async def test_a_create_refused_on_a_retry_may_be_answering_our_own_first_attempt(
    server: RunningServer, cloud: CloudClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt landed but its answer was lost; the client's retry is refused (a server
    whose replays say ALREADY_EXISTS; the contract leaves replays INFERRED). The refusal is not the
    key's one send, so it proves nothing: creation times decide, and the runner is found ours."""
    obj = Object(cloud, sim_time(server) - timedelta(seconds=1))
    await obj.step()
    send = CloudClient.create

    async def landed_then_refused(
        self: CloudClient, runner: Any, request_id: str, *, on_send: Callable[[], None] | None = None
    ) -> Any:
        assert on_send is not None
        on_send()
        await send(self, runner, request_id)  # served; its answer never arrives
        on_send()
        raise errors.AlreadyExists("managed runner 'owned' already exists", code="ALREADY_EXISTS")

    monkeypatch.setattr(CloudClient, "create", landed_then_refused)
    outcome = await obj.step()
    assert [e.reason for e in outcome.events] == ["CreateConfirmed"], outcome.events
    assert obj.body["status"]["runnerId"] == "owned"


async def test_a_runner_the_list_missed_after_the_reservation_is_read_before_deciding(
    server: RunningServer, cloud: CloudClient
) -> None:
    obj = Object(cloud, sim_time(server) - timedelta(minutes=10))
    await obj.step()  # reserved (ten minutes ago, by the object's clock) on the list's absence
    await obj.cache.identities(0)
    server.simulator.create({"identity": IDENTITY, "policy": {}}, request_id="someone-else")
    obj.restart()  # a new process cannot know whether the last one sent the create
    outcome = await obj.step()  # the snapshot misses it: the create is refused, then read directly
    assert calls(server)["get"] == 1, "the read after the refusal"
    # Read directly, the runner is one made after the key was reserved: what a direct read before
    # the create would have concluded too (rule "A lost create is recognised").
    assert [e.reason for e in outcome.events] == ["CreateConfirmed"], outcome.events


async def bound_then_missed_by_the_list(cloud: CloudClient) -> Object:
    """A bound resource whose next snapshot misses its runner (pagination under change)."""
    obj = Object(cloud)
    for _ in range(3):
        await obj.step()
    assert obj.body["status"]["runnerId"] == "owned"
    obj.cache = RunnerCache(cloud)
    await obj.cache.identities(0)
    obj.cache._snapshot.clear()
    return obj


async def test_a_bound_runner_missing_from_the_list_is_read_directly(
    server: RunningServer, cloud: CloudClient
) -> None:
    obj = await bound_then_missed_by_the_list(cloud)
    before = calls(server)["get"]
    outcome = await obj.step()
    assert calls(server)["get"] == before + 1
    assert outcome.calls == (), "present after all: nothing recreated"
    assert obj.body["status"]["runnerId"] == "owned"


async def test_a_deleting_resource_missing_from_the_list_is_read_directly(cloud: CloudClient) -> None:
    obj = await bound_then_missed_by_the_list(cloud)
    outcome = await obj.step(deleting=True)
    assert outcome.calls == ("delete",), "read directly, found, and decommissioned: never released on a list"
    assert not outcome.release


async def test_a_replacement_target_the_list_missed_keeps_the_old_runner(
    server: RunningServer, cloud: CloudClient
) -> None:
    """The key in status is the old runner's: it is no reservation for the new ID, whose absence is read."""
    obj = Object(cloud, replacementPolicy="Replace")
    for _ in range(3):
        await obj.step()
    assert obj.body["status"]["runnerId"] == "owned"
    await obj.cache.identities(0)  # a snapshot taken just before someone else made the target
    other_cluster = "00000000-0000-4000-8000-000000000002"
    target = {"runnerId": "moved", "clusterId": other_cluster, "zone": "us-east-04a"}
    server.simulator.create({"identity": target, "policy": {}}, request_id="someone-else")
    obj.body["spec"]["runnerId"] = "moved"
    outcome = await obj.step()
    assert "delete" not in outcome.calls
    assert [e.reason for e in outcome.events] == ["ReplacementTargetTaken"], outcome.events
    assert server.simulator.get("owned") is not None
