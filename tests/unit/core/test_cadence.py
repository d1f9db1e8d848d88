"""The cadence policy: one table per question (which cadence, how long, how fresh)."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator.cadence import (
    FIXED_OUTSIDE_THE_SPEC,
    Cadence,
    Intervals,
    after_pass,
    of_status,
    spec_is_new,
)
from runner_operator.reasons import REASONS

FAST, MEDIUM, SLOW, NONE = Cadence.FAST, Cadence.MEDIUM, Cadence.SLOW, Cadence.NONE
INTERVALS = Intervals(fast=2, resync=300)


def status(
    ready: tuple[str, str] | None = None,
    synced: tuple[str, str] | None = None,
    stalled: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    conds = []
    if ready:
        conds.append({"type": "Ready", "status": ready[0], "reason": ready[1]})
    if synced:
        conds.append({"type": "Synced", "status": synced[0], "reason": synced[1]})
    if stalled:
        conds.append({"type": "Stalled", "status": stalled, "reason": "x"})
    return {"conditions": conds, **extra}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (status(), FAST),
        (status(("False", "Creating"), ("True", "Synced"), "False"), FAST),
        (status(("False", "Installing"), ("True", "Synced"), "False"), FAST),
        (status(("True", "Available"), ("True", "Synced"), "False"), SLOW),
        (status(("True", "Available"), ("False", "ApiUnavailable"), "False"), MEDIUM),
        (status(("False", "InstallFailed"), ("True", "Synced"), "False"), MEDIUM),
        (status(("False", "Disconnected"), ("True", "Synced"), "False"), MEDIUM),
        (status(("True", "Available"), ("False", "Paused"), "False"), SLOW),
        (status(("False", "InvalidSpec"), ("False", "InvalidSpec"), "True"), SLOW),
        (status(("False", "Conflict"), ("False", "ClusterTaken"), "True"), SLOW),
        (status(("False", "CredentialsRejected"), ("False", "CredentialsRejected"), "True"), MEDIUM),
        (status(("True", "Available"), ("False", "EndpointMisrouted"), "True"), MEDIUM),
        (status(("False", "RunnerNotVisible"), ("False", "RunnerNotVisible"), "True"), MEDIUM),
        ({"conditions": ["not a mapping"]}, FAST),
    ],
)
def test_cadence_of_a_status(given: dict[str, Any], expected: Cadence) -> None:
    verdict = of_status(given)
    assert verdict.cadence == expected
    assert verdict.why


def test_every_reason_fixed_outside_the_spec_is_in_the_catalogue() -> None:
    assert set(REASONS) >= FIXED_OUTSIDE_THE_SPEC


@pytest.mark.parametrize(
    ("cadence", "interval", "freshness"),
    [(FAST, 2, 2), (MEDIUM, 30, 15), (SLOW, 300, 150), (NONE, None, 150)],
)
def test_intervals(cadence: Cadence, interval: float | None, freshness: float) -> None:
    assert INTERVALS.of(cadence) == interval
    assert INTERVALS.freshness(cadence) == freshness


def test_medium_is_fifteen_fast_polls_but_never_under_thirty_seconds() -> None:
    assert Intervals(fast=0.5, resync=20).medium == 30
    assert Intervals(fast=4, resync=300).medium == 60


READY = status(("True", "Available"), ("True", "Synced"), "False")
INSTALLING = status(("False", "Installing"), ("True", "Synced"), "False")
RETRYING = status(("True", "Available"), ("False", "ApiUnavailable"), "False")
STALLED = status(("False", "Conflict"), ("False", "ClusterTaken"), "True")


@pytest.mark.parametrize(
    ("given", "kwargs", "cadence", "delay"),
    [
        (READY, {}, SLOW, 300),
        (INSTALLING, {}, FAST, 2),
        (RETRYING, {}, MEDIUM, 30),
        (RETRYING, {"retry_after": 7.0}, MEDIUM, 7.0),
        (READY, {"released": True}, NONE, None),
        (READY, {"released": True, "retry_after": 7.0}, NONE, None),
        # A deletion never waits a full resync, and past its deadline it slows to medium.
        (INSTALLING, {"deleting": True}, FAST, 2),
        (STALLED, {"deleting": True}, MEDIUM, 30),
        (READY, {"deleting": True}, MEDIUM, 30),
        ({**INSTALLING, "deletion": {"stalled": True}}, {"deleting": True}, MEDIUM, 30),
        ({**INSTALLING, "deletion": {"stalled": True}}, {"deleting": True, "retry_after": 3.0}, FAST, 3.0),
    ],
)
def test_next_look_after_a_pass(
    given: dict[str, Any], kwargs: dict[str, Any], cadence: Cadence, delay: float | None
) -> None:
    after = after_pass(given, INTERVALS, **kwargs)
    assert (after.cadence, after.delay) == (cadence, delay)
    assert after.why


def looked(synced: str, reason: str, at: int | None, applied: int | None = None) -> dict[str, Any]:
    """A status whose Synced condition was written by a pass at generation `at`; `applied`: the
    generation last applied (status.observedGeneration)."""
    cond: dict[str, Any] = {"type": "Synced", "status": synced, "reason": reason}
    if at is not None:
        cond["observedGeneration"] = at
    extra = {} if applied is None else {"observedGeneration": applied}
    return {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}, cond], **extra}


@pytest.mark.parametrize(
    ("generation", "seen", "given", "deleting", "expected"),
    [
        (2, 1, looked("True", "Synced", 1, 1), False, True),  # edited
        (2, 2, looked("True", "Synced", 1, 1), False, False),  # a status write, seen back
        (1, 1, status(), False, False),
        (3, 2, looked("False", "ApiUnavailable", 2, 1), False, True),  # edited while retrying
        (2, 1, looked("True", "Synced", 1, 1), True, False),  # the deletion moved the generation
        (1, None, status(), False, False),  # first sight of a new object: due at once anyway, Secrets shared
        (2, None, looked("True", "Synced", 1, 1), False, True),  # edited while the operator was down
        (2, None, looked("True", "Synced", 2, 2), False, False),  # a start
        (2, None, looked("False", "ApiUnavailable", 2, 1), False, False),  # looked at, failed: not new
        (3, None, looked("False", "ApiUnavailable", 2, 1), False, True),  # failed, then edited
        (2, None, looked("False", "InvalidSpec", 2), False, False),  # stalled on this spec: not new
        (2, None, looked("True", "Synced", 1, 1), True, False),  # deleting while the operator was down
        (2, None, {"observedGeneration": 1}, False, True),  # no Synced condition: the applied one
        (2, None, looked("True", "Synced", None, 2), False, False),  # a condition without its generation:
        (3, None, looked("True", "Synced", None, 2), False, True),  # the applied one
        (2, None, {"observedGeneration": "1"}, False, False),  # not a generation: the CRD says integer
    ],
)
def test_a_spec_not_looked_at_yet(
    generation: int, seen: int | None, given: dict[str, Any], deleting: bool, expected: bool
) -> None:
    assert spec_is_new(generation, seen, given, deleting=deleting) is expected
