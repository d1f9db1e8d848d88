"""The planner, one row per branch: the id says the behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator import planning
from runner_operator.cloud.models import CloudRunner, parse_runner
from runner_operator.reasons import Reason

IDENTITY = {"runnerId": "r1", "zone": "us-east-04a", "clusterId": "00000000-0000-4000-8000-000000000001"}


def runner(**extra: Any) -> CloudRunner:
    body: dict[str, Any] = {"identity": dict(IDENTITY), "spec": {}, "policy": {}}
    for key, value in extra.items():
        if key == "identity":
            body["identity"].update(value)
        else:
            body[key] = value
    return parse_runner(body)


READY = {
    "installStatus": "RUNNER_INSTALL_STATUS_READY",
    "connectionStatus": "RUNNER_CONNECTION_STATUS_CONNECTED",
    "activeRevision": 1,
    "targetRevision": 1,
    "etag": "e1",
}
DESIRED = runner()
PENDING_INSTALL = {**READY, "installStatus": "RUNNER_INSTALL_STATUS_PENDING"}


def facts(**kw: Any) -> planning.Facts:
    kw.setdefault("desired", DESIRED)
    kw.setdefault("new_request_id", "new-key")
    return planning.Facts(**kw)


UPDATE_DISPLAY_NAME = planning.plan(
    facts(desired=runner(displayName="new"), observed=runner(**READY), bound=True)
)
assert isinstance(UPDATE_DISPLAY_NAME, planning.Update)

CASES = [
    pytest.param(
        facts(observed=None, protected=False),
        planning.ReserveRequestId("new-key"),
        id="without-the-finalizer-a-key-may-be-reserved",
    ),
    pytest.param(
        facts(observed=None, request_id="k1", protected=False),
        planning.Wait(
            Reason.AWAITING_FINALIZER, "waiting for the finalizer to be on the resource before acting"
        ),
        id="without-the-finalizer-nothing-is-created",
    ),
    pytest.param(
        facts(observed=runner(**READY), adopt=True, protected=False),
        planning.Wait(
            Reason.AWAITING_FINALIZER, "waiting for the finalizer to be on the resource before acting"
        ),
        id="without-the-finalizer-nothing-is-adopted",
    ),
    pytest.param(
        facts(observed=runner(**READY), bound=True, protected=False, deleting=True),
        planning.Delete("r1"),
        id="a-deletion-does-not-wait-for-the-finalizer",
    ),
    pytest.param(
        facts(observed=None), planning.ReserveRequestId("new-key"), id="absent-reserves-a-key-first"
    ),
    pytest.param(
        facts(observed=None, request_id="k1"),
        planning.Create(DESIRED, "k1"),
        id="absent-with-key-creates-with-that-key",
    ),
    pytest.param(
        facts(observed=None, bound=True),
        planning.ReserveRequestId("new-key", recreate=True),
        id="bound-but-gone-is-recreated-with-a-new-key",
    ),
    pytest.param(
        facts(observed=None, paused=True), planning.Idle(Reason.PAUSED, "x"), id="paused-never-creates"
    ),
    pytest.param(
        facts(observed=runner(**READY)),
        planning.Conflict(Reason.RUNNER_ID_TAKEN, "x"),
        id="existing-foreign-runner-is-a-conflict",
    ),
    pytest.param(
        facts(observed=runner(**READY), request_id="k1"),
        planning.Create(DESIRED, "k1"),
        id="unbound-with-key-replays-create-to-prove-ownership",
    ),
    pytest.param(facts(observed=runner(**READY), adopt=True), planning.Adopt(), id="adopt-matching-runner"),
    pytest.param(
        facts(observed=runner(identity={"zone": "us-west-01a"}, **READY), adopt=True),
        planning.Conflict(Reason.ADOPTION_MISMATCH, "x"),
        id="adopt-refuses-other-zone",
    ),
    pytest.param(
        facts(observed=runner(**READY), bound=True), planning.Idle(), id="in-sync-and-ready-is-idle"
    ),
    pytest.param(
        facts(observed=runner(**READY), bound=True, claimed_by="ns/other"),
        planning.Conflict(Reason.DUPLICATE_RUNNER_ID, "x"),
        id="second-claimant-is-a-conflict",
    ),
    pytest.param(
        facts(
            observed=runner(identity={"clusterId": "00000000-0000-4000-8000-000000000009"}, **READY),
            bound=True,
        ),
        planning.Conflict(Reason.IMMUTABLE_FIELD_CHANGED, "x"),
        id="identity-drift-is-terminal",
    ),
    pytest.param(
        facts(observed=runner(installStatus="RUNNER_INSTALL_STATUS_PROVISIONING"), bound=True),
        planning.Wait(Reason.INSTALLING, "x"),
        id="provisioning-waits",
    ),
    pytest.param(
        facts(
            observed=runner(
                installStatus="RUNNER_INSTALL_STATUS_FAILED", installError={"reason": "X", "message": "boom"}
            ),
            bound=True,
        ),
        planning.Wait(Reason.INSTALL_FAILED, "x"),
        id="install-failure-waits-and-reports",
    ),
    pytest.param(
        facts(observed=runner(**{**READY, "targetRevision": 2, "rolloutInProgress": True}), bound=True),
        planning.Wait(Reason.ROLLING_OUT, "x"),
        id="rollout-waits",
    ),
    pytest.param(
        facts(
            observed=runner(**{**READY, "connectionStatus": "RUNNER_CONNECTION_STATUS_DISCONNECTED"}),
            bound=True,
        ),
        planning.Wait(Reason.DISCONNECTED, "x"),
        id="disconnected-waits",
    ),
    pytest.param(
        facts(observed=runner(installStatus="RUNNER_INSTALL_STATUS_DELETING"), bound=True),
        planning.Wait(Reason.DELETING_OUT_OF_BAND, "x"),
        id="out-of-band-deletion-waits-then-recreates",
    ),
    pytest.param(
        facts(observed=runner(displayName="old", **READY), bound=True, paused=True),
        planning.Idle(Reason.PAUSED, "x"),
        id="paused-sends-no-update",
    ),
    # channel updates (spec.updates)
    pytest.param(
        facts(observed=runner(**READY, updateAvailable=True), bound=True),
        planning.Idle(),
        id="manual-update-waits-for-a-request",
    ),
    pytest.param(
        facts(observed=runner(**READY, updateAvailable=True), bound=True, update_request="r"),
        planning.ApplyUpdate("r"),
        id="new-request-applies-the-available-update",
    ),
    pytest.param(
        facts(observed=runner(**READY), bound=True, update_request="r"),
        planning.DeclineUpdateRequest("r"),
        id="new-request-without-an-update-is-declined",
    ),
    pytest.param(
        facts(observed=runner(**READY, updateAvailable=True), bound=True, apply_updates=True),
        planning.ApplyUpdate(),
        id="when-available-applies-on-its-own",
    ),
    pytest.param(
        facts(observed=runner(**READY), bound=True, apply_updates=True),
        planning.Idle(),
        id="when-available-without-an-update-does-nothing",
    ),
    pytest.param(
        facts(
            observed=runner(**READY, updateAvailable=True), bound=True, apply_updates=True, update_frozen=True
        ),
        planning.Idle(),
        id="when-available-waits-out-a-maintenance-exclusion",
    ),
    pytest.param(
        facts(
            observed=runner(**READY, updateAvailable=True), bound=True, update_request="r", update_frozen=True
        ),
        planning.ApplyUpdate("r"),
        id="a-request-is-applied-during-an-exclusion",
    ),
    pytest.param(
        facts(
            observed=runner(**READY, updateAvailable=True),
            bound=True,
            update_request="r",
            apply_updates=True,
            paused=True,
        ),
        planning.Idle(Reason.PAUSED, "x"),
        id="paused-blocks-requested-and-automatic-updates",
    ),
    pytest.param(
        facts(
            observed=runner(**{**READY, "targetRevision": 2}, updateAvailable=True),
            bound=True,
            update_request="r",
        ),
        planning.Wait(Reason.ROLLING_OUT, "x"),
        id="a-request-waits-for-the-rollout",
    ),
    pytest.param(
        facts(observed=runner(**PENDING_INSTALL), bound=True, update_request="r"),
        planning.Wait(Reason.INSTALLING, "x"),
        id="a-request-waits-for-the-install",
    ),
    pytest.param(
        facts(desired=runner(displayName="new"), observed=runner(**READY), bound=True, update_request="r"),
        UPDATE_DISPLAY_NAME,
        id="the-spec-is-applied-before-a-requested-update",
    ),
    pytest.param(
        facts(deleting=True, observed=runner(**READY), bound=True),
        planning.Delete("r1"),
        id="delete-bound-runner",
    ),
    pytest.param(
        facts(deleting=True, observed=runner(installStatus="RUNNER_INSTALL_STATUS_DELETING"), bound=True),
        planning.Wait(Reason.DELETING, "x"),
        id="deleting-waits-until-gone",
    ),
    pytest.param(facts(deleting=True, observed=None, bound=True), planning.Release(), id="gone-releases"),
    pytest.param(
        facts(deleting=True, observed=runner(**READY), bound=True, deletion_policy="Orphan"),
        planning.Release(orphaned=True),
        id="orphan-releases-without-a-call",
    ),
    pytest.param(
        facts(deleting=True, observed=runner(**READY)),
        planning.Release(),
        id="deleting-never-touches-a-foreign-runner",
    ),
    pytest.param(
        facts(deleting=True, observed=runner(**READY), request_id="k1"),
        planning.Create(DESIRED, "k1"),
        id="deleting-after-crash-replays-create-to-find-ownership",
    ),
    pytest.param(
        facts(observed=None, held_id="old", held=runner(identity={"runnerId": "old"}, **READY)),
        planning.Conflict(Reason.IMMUTABLE_FIELD_CHANGED, "x"),
        id="runner-id-change-without-opt-in-is-refused",
    ),
    pytest.param(
        facts(observed=None, replace=True, held_id="old", held=runner(identity={"runnerId": "old"}, **READY)),
        planning.Delete("old", replacing=True),
        id="replace-deletes-the-old-runner-first",
    ),
    pytest.param(
        facts(
            observed=None,
            replace=True,
            held_id="old",
            held=runner(identity={"runnerId": "old"}, installStatus="RUNNER_INSTALL_STATUS_DELETING"),
        ),
        planning.Wait(Reason.REPLACING, "x"),
        id="replace-waits-for-the-old-runner-to-go",
    ),
    pytest.param(
        facts(observed=None, replace=True, held_id="old", held=None),
        planning.ForgetOld("old"),
        id="replace-forgets-the-old-runner-once-gone",
    ),
    pytest.param(
        facts(
            observed=runner(identity={"clusterId": "00000000-0000-4000-8000-000000000009"}, **READY),
            bound=True,
            replace=True,
        ),
        planning.Delete("r1", replacing=True),
        id="replace-on-cluster-change-deletes-first",
    ),
    pytest.param(
        facts(
            observed=runner(
                identity={"clusterId": "00000000-0000-4000-8000-000000000009"},
                installStatus="RUNNER_INSTALL_STATUS_DELETING",
            ),
            bound=True,
            replace=True,
        ),
        planning.Wait(Reason.REPLACING, "x"),
        id="replace-on-cluster-change-waits",
    ),
    pytest.param(
        facts(deleting=True, observed=None, held_id="old", held=runner(**READY)),
        planning.Delete("old"),
        id="deleted-mid-replacement-deletes-the-held-runner",
    ),
]


@pytest.mark.parametrize(("given", "expected"), CASES)
def test_plan(given: planning.Facts, expected: planning.Action) -> None:
    got = planning.plan(given)
    assert type(got) is type(expected)
    if isinstance(expected, (planning.Conflict, planning.Wait, planning.Idle)):
        assert isinstance(got, (planning.Conflict, planning.Wait, planning.Idle))
        assert got.reason == expected.reason
        assert got.message or got == planning.Idle()
    else:
        assert got == expected


def test_update_sends_only_what_changed_with_the_etag_for_policy() -> None:
    desired = runner(displayName="new", policy={"constraints": {"lifecycle": {"defaultLifetimeSeconds": 60}}})
    observed = runner(displayName="old", **READY)
    action = planning.plan(facts(desired=desired, observed=observed, bound=True))
    assert isinstance(action, planning.Update)
    assert action.change.mask == ("displayName", "policy")
    assert action.change.etag == "e1"


def test_conflict_messages_say_what_to_do() -> None:
    action = planning.plan(facts(observed=runner(**READY)))
    assert isinstance(action, planning.Conflict)
    assert "spec.adopt: true" in action.message
    action = planning.plan(facts(observed=runner(identity={"zone": "eu-west-01a"}, **READY), bound=True))
    assert isinstance(action, planning.Conflict)
    assert "zone" in action.message
    assert "new ManagedRunner" in action.message
