"""The ownership rules of docs/safety.md as planner tables and one property: nothing destroys or forgets a
runner unless the evidence rule holds. Each row id is cited by the rule it proves."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner_operator import planning
from runner_operator.reasons import Reason
from tests.unit.core.test_planning import DESIRED, READY, facts, runner
from tests.unit.core.test_planning_properties import facts as any_facts

RESERVED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
AFTER = (RESERVED + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
BEFORE = (RESERVED - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
JUST_BEFORE = (RESERVED - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
OTHER_CLUSTER = "00000000-0000-4000-8000-000000000009"


def first_send(created: str, **more: Any) -> planning.Facts:
    """An unbound runner found while this process holds the key it reserved and never sent."""
    return facts(
        observed=runner(createTime=created, **READY),
        request_id="k1",
        reserved_at=RESERVED,
        key_never_sent=True,
        **more,
    )


RULES = [
    # Absence is evidence only when read with the credential that last saw the runner.
    pytest.param(
        facts(observed=None, bound=True, credential_changed=True),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="absent-with-another-credential-is-not-recreated",
    ),
    pytest.param(
        facts(observed=None, request_id="k1", credential_changed=True),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="absent-with-another-credential-does-not-replay-a-reserved-create",
    ),
    pytest.param(
        facts(deleting=True, observed=None, bound=True, credential_changed=True),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="deleting-absent-with-another-credential-keeps-the-finalizer",
    ),
    pytest.param(
        facts(deleting=True, observed=None, bound=True),
        planning.Release(),
        id="deleting-absent-with-the-same-credential-releases",
    ),
    pytest.param(
        facts(deleting=True, observed=None, held_id="old", held=None, credential_changed=True),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="deleting-mid-replacement-with-another-credential-keeps-the-finalizer",
    ),
    pytest.param(
        facts(held_id="old", held=None, replace=True, credential_changed=True, observed=None),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="replaced-runner-absent-with-another-credential-is-not-forgotten",
    ),
    pytest.param(
        facts(observed=None, bound=False, credential_changed=True),
        planning.ReserveRequestId("new-key"),
        id="never-created-may-be-created-with-any-credential",
    ),
    # Orphan needs nothing but the resource.
    pytest.param(
        facts(deleting=True, deletion_policy="Orphan", observed=None, bound=True, credential_changed=True),
        planning.Release(orphaned=True),
        id="orphan-releases-without-any-evidence",
    ),
    # Replacement: nothing destructive while paused; the new runner must be able to exist first.
    pytest.param(
        facts(
            held_id="old",
            held=runner(identity={"runnerId": "old"}, **READY),
            replace=True,
            paused=True,
            observed=None,
        ),
        planning.Idle(Reason.PAUSED, "x"),
        id="paused-replacement-sends-nothing",
    ),
    pytest.param(
        facts(
            observed=runner(identity={"clusterId": OTHER_CLUSTER}, **READY),
            bound=True,
            replace=True,
            paused=True,
        ),
        planning.Idle(Reason.PAUSED, "x"),
        id="paused-cluster-replacement-sends-nothing",
    ),
    pytest.param(
        facts(
            held_id="old",
            held=runner(identity={"runnerId": "old"}, **READY),
            replace=True,
            observed=runner(**READY),
        ),
        planning.Conflict(Reason.REPLACEMENT_TARGET_TAKEN, "x"),
        id="replacement-onto-an-id-taken-in-the-cloud-keeps-the-old-runner",
    ),
    pytest.param(
        facts(
            held_id="old",
            held=runner(identity={"runnerId": "old"}, **READY),
            replace=True,
            observed=None,
            claimed_by="ns/other",
        ),
        planning.Conflict(Reason.DUPLICATE_RUNNER_ID, "x"),
        id="replacement-onto-an-id-claimed-by-another-resource-keeps-the-old-runner",
    ),
    pytest.param(
        facts(
            held_id="old",
            held=runner(identity={"runnerId": "old"}, **READY),
            replace=True,
            observed=None,
            cluster_holder="someone-else",
        ),
        planning.Conflict(Reason.CLUSTER_TAKEN, "x"),
        id="replacement-onto-a-taken-cluster-keeps-the-old-runner",
    ),
    pytest.param(
        facts(
            held_id="old",
            held=runner(identity={"runnerId": "old"}, **READY),
            replace=True,
            observed=None,
            cluster_holder="old",
        ),
        planning.Delete("old", replacing=True),
        id="replacement-on-the-old-runners-own-cluster-deletes-it-first",
    ),
    pytest.param(
        facts(
            held_id="old",
            held=runner(identity={"runnerId": "old"}, **READY),
            replace=True,
            adopt=True,
            observed=runner(**READY),
            cluster_holder="r1",
        ),
        planning.Delete("old", replacing=True),
        id="replacement-onto-an-adopted-existing-runner-proceeds",
    ),
    pytest.param(
        facts(
            observed=runner(identity={"clusterId": OTHER_CLUSTER}, **READY),
            bound=True,
            replace=True,
            cluster_holder="someone-else",
        ),
        planning.Conflict(Reason.CLUSTER_TAKEN, "x"),
        id="cluster-replacement-onto-a-taken-cluster-keeps-the-runner",
    ),
    # A lost create is ours whatever the server answers to a replay whose body changed.
    pytest.param(
        facts(observed=runner(createTime=AFTER, **READY), request_id="k1", reserved_at=RESERVED),
        planning.Create(DESIRED, "k1"),
        id="lost-create-is-replayed-first",
    ),
    pytest.param(
        facts(
            observed=runner(createTime=AFTER, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
        ),
        planning.Bind(),
        id="refused-replay-binds-a-runner-created-after-the-key-was-reserved",
    ),
    pytest.param(
        facts(
            observed=runner(createTime=BEFORE, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
        ),
        planning.Conflict(Reason.RUNNER_ID_TAKEN, "x"),
        id="refused-replay-of-an-older-runner-is-taken",
    ),
    pytest.param(
        facts(
            observed=runner(createTime=BEFORE, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
            adopt=True,
        ),
        planning.Adopt(),
        id="refused-replay-of-an-older-runner-is-adopted-when-the-spec-says-adopt",
    ),
    pytest.param(
        facts(observed=runner(createTime=AFTER, **READY), request_id="k1", replay_refused=True),
        planning.Conflict(Reason.OWNERSHIP_UNKNOWN, "x"),
        id="refused-replay-without-a-reservation-time-is-unknown-and-keeps-the-key",
    ),
    pytest.param(
        facts(
            observed=runner(createTime=JUST_BEFORE, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
        ),
        planning.Conflict(Reason.OWNERSHIP_UNKNOWN, "x"),
        id="refused-replay-within-the-clock-margin-is-unknown",
    ),
    pytest.param(
        facts(
            observed=runner(createTime=JUST_BEFORE, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
            adopt=True,
        ),
        planning.Adopt(),
        id="unknown-ownership-with-adopt-is-adopted",
    ),
    pytest.param(
        first_send(AFTER, replay_refused=True),
        planning.Conflict(Reason.RUNNER_ID_TAKEN, "x"),
        id="a-create-refused-on-its-keys-first-send-is-someone-elses-whatever-the-clocks-say",
    ),
    pytest.param(
        first_send(JUST_BEFORE, replay_refused=True),
        planning.Conflict(Reason.RUNNER_ID_TAKEN, "x"),
        id="a-create-refused-on-its-keys-first-send-is-taken-not-unknown",
    ),
    pytest.param(
        first_send(AFTER, deleting=True),
        planning.Release(),
        id="deleting-with-a-key-never-sent-releases-without-a-replay",
    ),
    pytest.param(
        facts(
            observed=runner(createTime=AFTER, **READY),
            bound=True,
            credential_changed=True,
            seen_created=RESERVED,
        ),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="another-organizations-runner-with-our-id-is-not-ours",
    ),
    pytest.param(
        facts(
            deleting=True,
            observed=runner(createTime=AFTER, **READY),
            bound=True,
            credential_changed=True,
            seen_created=RESERVED,
        ),
        planning.Conflict(Reason.RUNNER_NOT_VISIBLE, "x"),
        id="another-organizations-runner-with-our-id-is-never-deleted",
    ),
    pytest.param(
        facts(
            deleting=True,
            observed=runner(createTime=AFTER, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
        ),
        planning.Bind(),
        id="deleting-with-a-refused-replay-binds-then-deletes",
    ),
    pytest.param(
        facts(
            deleting=True,
            observed=runner(createTime=BEFORE, **READY),
            request_id="k1",
            reserved_at=RESERVED,
            replay_refused=True,
        ),
        planning.Release(),
        id="deleting-releases-a-runner-that-predates-the-key",
    ),
    pytest.param(
        facts(deleting=True, observed=runner(**READY), request_id="k1", replay_refused=True),
        planning.Conflict(Reason.OWNERSHIP_UNKNOWN, "x"),
        id="deleting-with-unknown-ownership-neither-deletes-nor-releases",
    ),
]


@pytest.mark.parametrize(("given", "expected"), RULES)
def test_rule(given: planning.Facts, expected: planning.Action) -> None:
    got = planning.plan(given)
    assert type(got) is type(expected)
    if isinstance(expected, (planning.Conflict, planning.Idle)):
        assert isinstance(got, (planning.Conflict, planning.Idle))
        assert got.reason == expected.reason
        assert got.message
    else:
        assert got == expected


@st.composite
def evidence_facts(draw: st.DrawFn) -> planning.Facts:
    return dataclasses.replace(
        draw(any_facts()),
        credential_changed=draw(st.booleans()),
        reserved_at=draw(st.none() | st.just(RESERVED)),
        replay_refused=draw(st.booleans()),
        key_never_sent=draw(st.booleans()),
        cluster_holder=draw(st.sampled_from([None, None, "r1", "old", "someone-else"])),
        seen_created=draw(st.none() | st.just(RESERVED)),
    )


def _forgets(f: planning.Facts, action: planning.Action) -> bool:
    """The action drops this resource's hold on a runner that may exist (without the user's Orphan)."""
    match action:
        case planning.ForgetOld():
            return True
        case planning.ReserveRequestId(recreate=True):
            return True
        case planning.Release(orphaned=False):
            return f.bound or bool(f.request_id) or bool(f.held_id)
        case planning.Conflict(forget_request=True):
            return True
    return False


@settings(max_examples=3000, deadline=None)
@given(evidence_facts())
def test_nothing_destroys_or_forgets_a_runner_without_evidence(f: planning.Facts) -> None:
    action = planning.plan(f)
    if _forgets(f, action):
        # The runner provably is not ours (it predates our key, or nothing was ever sent) ...
        not_ours = f.observed is not None and (
            bool(planning.identity_changes(f.desired, f.observed))
            or (
                f.reserved_at is not None
                and f.observed.create_time is not None
                and f.observed.create_time < f.reserved_at - planning.CLOCK_MARGIN
            )
        )
        never_sent = (
            f.observed is not None
            and not f.bound
            and not f.held_id
            and (not f.request_id or f.key_never_sent)
        )
        if not (not_ours or never_sent):
            # ... or the API's own NOT_FOUND for it (observation None), read with the credential that saw it.
            gone = f.held is None if f.held_id else f.observed is None
            assert gone
            assert not f.credential_changed
    if isinstance(action, planning.Delete) and not f.deleting:
        assert action.replacing
        assert f.replace
        assert not f.paused
        assert f.claimed_by is None
        new_id = f.desired.identity.runner_id if f.desired.identity else None
        if f.held_id and f.observed is not None:
            assert f.adopt, "the replacement's ID is taken in the cloud"
        assert f.cluster_holder in (None, action.runner_id, new_id)
    if isinstance(action, planning.Bind):
        assert f.replay_refused
        assert not f.key_never_sent, "a key that never went out made nothing"
        assert f.reserved_at is not None
        assert f.observed is not None
        assert f.observed.create_time is not None
        assert f.observed.create_time >= f.reserved_at
    target = f.held if f.held_id else f.observed
    if (
        f.credential_changed
        and (f.bound or f.held_id)
        and f.seen_created is not None
        and target is not None
        and target.create_time not in (None, f.seen_created)
    ):
        assert not isinstance(action, (planning.Delete, planning.Update, planning.ForgetOld))
        assert action != planning.Release()  # Orphan, the user's explicit choice, may still release
    if f.paused and not f.deleting:
        assert not isinstance(action, (planning.Delete, planning.Create, planning.Update, planning.Adopt))


def test_bind_needs_the_identity_to_match() -> None:
    other = runner(identity={"clusterId": OTHER_CLUSTER}, createTime=AFTER, **READY)
    got = planning.plan(facts(observed=other, request_id="k1", reserved_at=RESERVED, replay_refused=True))
    assert isinstance(got, planning.Conflict)
    assert got.reason == "RunnerIdTaken"
