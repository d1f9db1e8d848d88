"""Quiet steady passes are skipped, and only those: any input that could change what a pass does runs it.

The shell runs against the in-process simulator with a shared list snapshot on a fake clock; the
object's resourceVersion moves with every status write, as on the API server.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner_operator import outcomes, reconciling, resource
from runner_operator.cadence import Cadence
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.runners import Runners
from runner_operator.quiet import QuietPasses, fingerprint
from runner_operator.simulator.server import RunningServer
from tests.clock import FakeClock
from tests.unit.builders import metadata

CLUSTER = "00000000-0000-4000-8000-000000000001"
LIST_AGE = 30.0


class Object:
    """A ManagedRunner on a fake API server: each status change is written and bumps resourceVersion."""

    def __init__(self, server: RunningServer, cloud: CloudClient) -> None:
        self.body: dict[str, Any] = {
            "metadata": metadata(resourceVersion="1"),
            "spec": {"runnerId": "steady", "clusterId": CLUSTER, "zone": "us-east-04a", "policy": {}},
            "status": {},
        }
        self.clock = FakeClock(0.0)
        self.cache = RunnerCache(cloud, clock=self.clock)
        self.quiet = QuietPasses()
        self.start = datetime.fromtimestamp(server.simulator.now(), UTC)
        self.ctx: dict[str, Any] = {"credential": "c"}

    async def step(self, seconds: float = 1.0) -> reconciling.Outcome:
        self.clock.tick(seconds)
        res = resource.ManagedRunnerResource.from_body(self.body)
        ctx = reconciling.Context(
            now=self.start + timedelta(seconds=self.clock()), deletion_timeout=600, **self.ctx
        )
        outcome = await reconciling.reconcile(
            res, Runners(self.cache.client, self.cache, LIST_AGE), ctx, self.quiet
        )
        written = outcome.status.to_patch()
        if any(self.body["status"].get(k) != v for k, v in written.items()):
            self.body["status"] = {**self.body["status"], **written}
            self.edit()
        return outcome

    def edit(self, **spec: Any) -> None:
        self.body["spec"].update(spec)
        self.body["metadata"]["resourceVersion"] = str(int(self.body["metadata"]["resourceVersion"]) + 1)

    async def steady(self) -> None:
        for _ in range(6):
            await asyncio.sleep(0.12)  # the simulator installs in 0.1 s of real time
            if (await self.step(LIST_AGE + 1)).quiet(self.body["status"]) and len(self.quiet):
                return
        raise AssertionError(f"never steady: {self.body['status']}")


OTHER_INPUTS = pytest.mark.parametrize(
    "change",
    [
        {"claimed_by": "ns/other"},
        {"bound_here": "steady"},
        {"credential": "another"},
        {"credentials_secret": "coreweave-api"},
        {"secrets": {("runner-extra", "token"): "rotated"}},
    ],
    ids=["claimed-by-another", "bound-here", "credential", "credentials-secret", "secret-value"],
)
"""Every input of a steady pass besides the object and its list entry."""


@pytest.fixture
async def obj(server: RunningServer, cloud: CloudClient) -> Object:
    found = Object(server, cloud)
    await found.steady()
    return found


async def test_a_steady_pass_with_the_same_inputs_is_skipped(obj: Object) -> None:
    skipped = await obj.step()
    assert skipped.unchanged
    assert skipped.status.to_patch() == {}, "nothing to write"
    assert skipped.cadence == Cadence.SLOW


async def test_an_out_of_band_edit_is_seen_at_the_next_list(server: RunningServer, obj: Object) -> None:
    server.simulator.edit_out_of_band("steady", {"displayName": "edited in the console"})
    assert (await obj.step()).unchanged, "the snapshot has not been refreshed yet"
    corrected = await obj.step(LIST_AGE)
    assert not corrected.unchanged
    assert corrected.calls == ("update",)
    assert server.simulator.get("steady").get("displayName", "") != "edited in the console"


async def test_an_edit_to_the_object_runs_the_pass(obj: Object) -> None:
    obj.edit(displayName="new name")
    changed = await obj.step()
    assert changed.calls == ("update",)


@OTHER_INPUTS
async def test_any_other_input_runs_the_pass(obj: Object, change: dict[str, Any]) -> None:
    obj.ctx.update(change)
    assert not (await obj.step()).unchanged


async def test_stamps_are_refreshed_when_due(obj: Object) -> None:
    stamp = obj.body["status"]["lastObservedTime"]
    due = outcomes.stamps_due(obj.body["status"])
    assert due is not None
    left = (due - (obj.start + timedelta(seconds=obj.clock()))).total_seconds()
    refreshed = await obj.step(left + 1)
    assert not refreshed.unchanged
    assert refreshed.status.to_patch()["lastObservedTime"] != stamp


async def test_a_pass_that_wrote_is_not_remembered(obj: Object) -> None:
    obj.edit(displayName="new name")
    await obj.step()  # an update and a status write
    assert not len(obj.quiet)


def test_fingerprints_tell_unset_from_empty_and_keep_order() -> None:
    assert fingerprint(None) != fingerprint("")
    assert fingerprint("a", "b") != fingerprint("b", "a")
    assert fingerprint("ab", "c") != fingerprint("a", "bc")
    assert fingerprint(b"x") == fingerprint("x")


def test_quiet_passes_expire_at_their_due_time() -> None:
    quiet = QuietPasses()
    due = datetime(2026, 12, 2, 12, 15, tzinfo=UTC)
    quiet.remember("u", b"k", due)
    assert quiet.still("u", b"k", due - timedelta(seconds=1))
    assert not quiet.still("u", b"k", due)
    assert not quiet.still("u", b"other", due - timedelta(seconds=1))
    quiet.forget("u")
    assert not quiet.still("u", b"k", due - timedelta(seconds=1))


async def test_a_status_write_that_did_not_land_is_tried_again(server: RunningServer, obj: Object) -> None:
    """A pass that only changes status (no call) and whose write is lost must run again, not be skipped."""
    server.simulator.disconnect("steady")
    res = resource.ManagedRunnerResource.from_body(obj.body)
    obj.clock.tick(LIST_AGE + 1)
    ctx = reconciling.Context(
        now=obj.start + timedelta(seconds=obj.clock()), deletion_timeout=600, credential="c"
    )
    cloud = Runners(obj.cache.client, obj.cache, LIST_AGE)
    lost = await reconciling.reconcile(res, cloud, ctx, obj.quiet)
    assert lost.status.to_patch()["phase"] != obj.body["status"]["phase"], "the disconnect shows"
    assert not lost.calls
    again = await reconciling.reconcile(res, cloud, ctx, obj.quiet)  # the same body: the write was lost
    assert not again.unchanged
    assert again.status.to_patch()["phase"] == lost.status.to_patch()["phase"]


async def test_a_failing_list_is_reported_like_any_pass(server: RunningServer, obj: Object) -> None:
    server.simulator.set_bare404(enabled=True)
    failed = await obj.step(LIST_AGE + 1)
    synced = failed.status.condition("Synced")
    assert synced is not None
    assert (synced.status, synced.reason) == ("False", "EndpointMisrouted")


async def test_a_heartbeat_alone_does_not_run_the_pass(obj: Object) -> None:
    """The simulator's runner heartbeats every 0.05 s: each list refresh sees a new lastHeartbeatTime."""
    await asyncio.sleep(0.2)
    refreshed = await obj.step(LIST_AGE + 1)  # a new list, in which only the heartbeat moved
    assert refreshed.unchanged


async def test_the_end_of_a_maintenance_exclusion_runs_the_pass(server: RunningServer, obj: Object) -> None:
    """WhenAvailable waits out an exclusion; the exclusion ending is an input, so the skipped steady
    passes do not hide the update until the stamps fall due."""
    now = obj.start + timedelta(seconds=obj.clock())
    until = now + timedelta(seconds=300)  # outlasts the steps below but ends before the stamps are due
    exclusion = {"startTime": "2026-01-01T00:00:00Z", "endTime": until.strftime("%Y-%m-%dT%H:%M:%SZ")}
    obj.edit(updates={"apply": "WhenAvailable"}, maintenancePolicy={"exclusions": [exclusion]})
    await obj.steady()  # the exclusion is sent (an update) and rolled out
    server.simulator.publish_release()
    held = await obj.step(LIST_AGE + 1)  # a fresh list shows the update; the exclusion holds it
    assert held.calls == ()
    assert not (await obj.step()).calls  # status moved (updateAvailableSince): one full, quiet pass
    assert (await obj.step()).unchanged
    left = (until - (obj.start + timedelta(seconds=obj.clock()))).total_seconds()
    assert 0 < left < 300
    applied = await obj.step(left + 1)  # just past the exclusion's end: no other input changed
    assert applied.calls == ("applyAvailableUpdate",)


# --- the same decision without parsing the object (reconciling.unchanged_since) ---------------------


async def quick(obj: Object, seconds: float = 1.0) -> bool:
    """What the scheduler's fast path decides: the recipe, the object's resourceVersion and the context."""
    obj.clock.tick(seconds)
    ctx = reconciling.Context(now=obj.start + timedelta(seconds=obj.clock()), deletion_timeout=600, **obj.ctx)
    version = obj.body["metadata"]["resourceVersion"]
    cloud = Runners(obj.cache.client, obj.cache, LIST_AGE)
    return await reconciling.unchanged_since(obj.quiet, "u-1", version, cloud, ctx)


async def test_a_quiet_pass_leaves_a_recipe_that_recognises_the_next_one(obj: Object) -> None:
    recipe = obj.quiet.recipe("u-1")
    assert isinstance(recipe, reconciling.Recipe)
    assert (recipe.version, recipe.runner_id, recipe.frozen) == (
        obj.body["metadata"]["resourceVersion"],
        "steady",
        False,
    )
    assert recipe.cadence == Cadence.SLOW
    assert await quick(obj)


@OTHER_INPUTS
async def test_the_fast_path_and_the_full_pass_agree_on_every_input(
    obj: Object, change: dict[str, Any]
) -> None:
    assert await quick(obj, 0)
    obj.ctx.update(change)
    assert not await quick(obj, 0)
    assert not (await obj.step(0)).unchanged


async def test_an_edit_to_the_object_is_never_judged_from_the_recipe(obj: Object) -> None:
    obj.edit(displayName="new name")
    assert not await quick(obj)


async def test_a_drifted_list_entry_is_never_judged_from_the_recipe(
    server: RunningServer, obj: Object
) -> None:
    server.simulator.edit_out_of_band("steady", {"displayName": "edited in the console"})
    assert await quick(obj), "the snapshot has not been refreshed yet"
    assert not await quick(obj, LIST_AGE), "the refreshed list shows the edit"
    corrected = await obj.step(0)
    assert corrected.calls == ("update",)


async def test_without_a_recipe_or_after_its_due_time_the_pass_runs(obj: Object) -> None:
    due = outcomes.stamps_due(obj.body["status"])
    assert due is not None
    left = (due - (obj.start + timedelta(seconds=obj.clock()))).total_seconds()
    assert not await quick(obj, left + 1)
    obj.quiet.forget("u-1")
    assert not await quick(obj, 0)


async def test_a_recipe_expires_at_the_next_exclusion_boundary(obj: Object) -> None:
    """Whether now is inside an exclusion is taken from the recipe, so it must not outlive a boundary."""
    now = obj.start + timedelta(seconds=obj.clock())
    starts = now + timedelta(seconds=200)
    exclusion = {
        "startTime": starts.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "endTime": (starts + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    obj.edit(maintenancePolicy={"exclusions": [exclusion]})
    await obj.steady()
    recipe = obj.quiet.recipe("u-1")
    assert isinstance(recipe, reconciling.Recipe)
    assert not recipe.frozen
    assert await quick(obj, 0)
    left = (starts - (obj.start + timedelta(seconds=obj.clock()))).total_seconds()
    assert 0 < left < 200
    assert not await quick(obj, left + 1), "past the exclusion's start the recipe no longer holds"


def test_the_next_exclusion_boundary() -> None:
    policy = resource.MaintenancePolicy.model_validate(
        {
            "exclusions": [
                {"startTime": "2026-12-20T00:00:00Z", "endTime": "2027-01-04T00:00:00Z"},
                {"startTime": "not a time", "endTime": "2026-12-25T00:00:00Z"},
            ]
        }
    )
    at = datetime(2026, 12, 1, tzinfo=UTC)
    assert policy.next_change(at) == datetime(2026, 12, 20, tzinfo=UTC)
    assert policy.next_change(datetime(2026, 12, 21, tzinfo=UTC)) == datetime(2026, 12, 25, tzinfo=UTC)
    assert policy.next_change(datetime(2026, 12, 26, tzinfo=UTC)) == datetime(2027, 1, 4, tzinfo=UTC)
    assert policy.next_change(datetime(2027, 2, 1, tzinfo=UTC)) is None
