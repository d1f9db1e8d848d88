"""Property-based checks of the planner: invariants that must hold for every combination of facts."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner_operator import planning
from runner_operator.cloud.models import parse_runner

STATUSES = st.sampled_from(
    [
        None,
        "RUNNER_INSTALL_STATUS_PENDING",
        "RUNNER_INSTALL_STATUS_PROVISIONING",
        "RUNNER_INSTALL_STATUS_READY",
        "RUNNER_INSTALL_STATUS_FAILED",
        "RUNNER_INSTALL_STATUS_DELETING",
        "RUNNER_INSTALL_STATUS_SOMETHING_NEW",
    ]
)
CLUSTERS = st.sampled_from(["00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"])


@st.composite
def runners(draw: st.DrawFn, runner_id: str = "r1") -> Any:
    body: dict[str, Any] = {
        "identity": {
            "runnerId": runner_id,
            "zone": draw(st.sampled_from(["us-east-04a", "us-west-01a"])),
            "clusterId": draw(CLUSTERS),
        },
        "displayName": draw(st.sampled_from([None, "a", "b"])),
        "spec": {
            "releaseChannel": draw(st.sampled_from(["RELEASE_CHANNEL_STABLE", "RELEASE_CHANNEL_RAPID"]))
        },
        "policy": draw(st.sampled_from([{}, {"displayName": "p"}])),
        "etag": "e1",
        "connectionStatus": draw(st.sampled_from([None, "RUNNER_CONNECTION_STATUS_CONNECTED"])),
        "createTime": draw(st.sampled_from([None, "2026-11-30T12:00:00Z", "2026-12-01T12:00:03Z"])),
        "activeRevision": draw(st.integers(0, 3)),
        "targetRevision": draw(st.integers(0, 3)),
    }
    status = draw(STATUSES)
    if status:
        body["installStatus"] = status
    return parse_runner({k: v for k, v in body.items() if v is not None})


@st.composite
def facts(draw: st.DrawFn) -> planning.Facts:
    held = draw(st.integers(0, 3)) == 0
    return planning.Facts(
        desired=draw(runners()),
        observed=draw(st.none() | runners()),
        deleting=draw(st.booleans()),
        paused=draw(st.booleans()),
        adopt=draw(st.booleans()),
        deletion_policy=draw(st.sampled_from(["Delete", "Orphan"])),
        bound=draw(st.booleans()),
        request_id=draw(st.sampled_from([None, "k1"])),
        new_request_id="k2",
        claimed_by=draw(st.sampled_from([None, None, None, "ns/other"])),
        replace=draw(st.booleans()),
        held_id="old" if held else None,
        held=draw(st.none() | runners("old")) if held else None,
        protected=draw(st.integers(0, 3)) > 0,
    )


@settings(max_examples=1500, deadline=None)
@given(facts())
def test_planner_invariants(f: planning.Facts) -> None:
    action = planning.plan(f)
    if f.deleting:
        # Deletion never creates a new runner, never updates, never adopts.
        assert not isinstance(action, (planning.Update, planning.Adopt, planning.ReserveRequestId))
        if f.deletion_policy == "Orphan":
            assert action == planning.Release(orphaned=True)
        if isinstance(action, planning.Create):
            assert action.request_id == f.request_id  # only a replay with the persisted key
    else:
        assert not isinstance(action, planning.Release)
    if isinstance(action, planning.Create):
        assert f.request_id, "a create always reuses a persisted key"
        assert not f.paused or f.deleting
    if isinstance(action, planning.Delete) and not f.deleting:
        assert action.replacing, "outside deletion only an opt-in replacement deletes"
        assert f.replace
    if isinstance(action, planning.Update):
        assert f.bound
        assert not f.paused
        assert f.observed is not None
        assert not any(
            p.startswith("identity.") and p != "identity.runnerGroupId" for p in action.change.mask
        )
        if "policy" in action.change.mask:
            assert action.change.etag == f.observed.etag
    if f.claimed_by and not f.deleting and not f.held_id:
        assert isinstance(action, planning.Conflict)
    if not f.protected and not f.deleting:
        # Nothing to leave behind: no runner is created, adopted or bound before the finalizer is on.
        assert not isinstance(action, planning.BINDS)


@settings(max_examples=300, deadline=None)
@given(runners())
def test_a_runner_in_sync_with_itself_needs_no_write(runner: Any) -> None:
    action = planning.plan(planning.Facts(desired=runner, observed=runner, bound=True))
    assert isinstance(action, (planning.Idle, planning.Wait))
