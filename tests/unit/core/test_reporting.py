"""The status projection: the phase `kubectl get` shows and the cadence timers poll at, one row each."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator import cadence, reporting
from runner_operator.cloud.models import CloudRunner, parse_runner

IDENTITY = {"runnerId": "r1", "zone": "us-east-04a", "clusterId": "00000000-0000-4000-8000-000000000001"}
INSTALLED = {
    "installStatus": "RUNNER_INSTALL_STATUS_READY",
    "connectionStatus": "RUNNER_CONNECTION_STATUS_CONNECTED",
    "activeRevision": 2,
    "targetRevision": 2,
}


def runner(**fields: Any) -> CloudRunner:
    return parse_runner({"identity": IDENTITY, "spec": {}, "policy": {}, **fields})


def installed(**fields: Any) -> CloudRunner:
    return runner(**{**INSTALLED, **fields})


PHASES = [
    pytest.param(None, "Absent", id="no-cloud-runner-is-absent"),
    pytest.param(installed(), "Ready", id="installed-connected-and-rolled-out-is-ready"),
    pytest.param(installed(rolloutInProgress=True), "RollingOut", id="rollout-in-progress-is-rolling-out"),
    pytest.param(installed(activeRevision=1), "RollingOut", id="active-behind-target-is-rolling-out"),
    pytest.param(
        installed(connectionStatus="RUNNER_CONNECTION_STATUS_DISCONNECTED"),
        "Disconnected",
        id="installed-but-disconnected",
    ),
    pytest.param(
        installed(connectionStatus="RUNNER_CONNECTION_STATUS_UNSPECIFIED"),
        "Connecting",
        id="installed-with-no-connection-yet-is-connecting",
    ),
    pytest.param(
        runner(installStatus="RUNNER_INSTALL_STATUS_PROVISIONING"), "Provisioning", id="provisioning"
    ),
    pytest.param(
        runner(
            installStatus="RUNNER_INSTALL_STATUS_FAILED",
            connectionStatus="RUNNER_CONNECTION_STATUS_CONNECTED",
        ),
        "Failed",
        id="failed-install-wins-over-connection",
    ),
    pytest.param(runner(installStatus="RUNNER_INSTALL_STATUS_DELETING"), "Deleting", id="deleting"),
    pytest.param(runner(), "Unknown", id="no-install-status-is-unknown"),
]


@pytest.mark.parametrize(("cloud", "expected"), PHASES)
def test_phase(cloud: CloudRunner | None, expected: str) -> None:
    assert reporting.phase(cloud) == expected


def conditions(**by_type: tuple[str, str]) -> dict[str, Any]:
    """A status whose conditions are type=(status, reason)."""
    return {
        "conditions": [
            {"type": type_, "status": status, "reason": reason} for type_, (status, reason) in by_type.items()
        ]
    }


READY = ("True", "Ready")
SYNCED = ("True", "Synced")

CADENCES = [
    pytest.param({}, "fast", id="never-reported-is-fast"),
    pytest.param({"conditions": ["not-a-condition"]}, "fast", id="malformed-conditions-are-ignored"),
    pytest.param(conditions(Ready=READY, Synced=SYNCED), "slow", id="ready-and-synced-is-slow"),
    pytest.param(conditions(Ready=("False", "Provisioning"), Synced=SYNCED), "fast", id="installing-is-fast"),
    pytest.param(
        conditions(Ready=("False", "InstallFailed"), Synced=SYNCED), "medium", id="install-failed-is-medium"
    ),
    pytest.param(
        conditions(Ready=("False", "Disconnected"), Synced=SYNCED), "medium", id="disconnected-is-medium"
    ),
    pytest.param(
        conditions(Ready=READY, Synced=("False", "ApiUnavailable")),
        "medium",
        id="sync-failure-on-a-ready-runner-is-medium",
    ),
    pytest.param(
        conditions(Ready=READY, Synced=("False", "Paused")), "slow", id="paused-is-slow-even-when-not-synced"
    ),
    pytest.param(
        conditions(Ready=("False", "Conflict"), Synced=("False", "RunnerIdTaken"), Stalled=("True", "x")),
        "slow",
        id="stalled-on-the-spec-is-slow",
    ),
    pytest.param(
        conditions(Synced=("False", "CredentialsRejected"), Stalled=("False", "x")),
        "medium",
        id="credential-failure-not-stalled-is-an-ordinary-sync-failure",
    ),
]


@pytest.mark.parametrize(("status", "expected"), CADENCES)
def test_cadence(status: dict[str, Any], expected: str) -> None:
    assert cadence.of_status(status).cadence == expected


@pytest.mark.parametrize("reason", sorted(cadence.FIXED_OUTSIDE_THE_SPEC))
def test_a_stall_a_person_fixes_outside_the_spec_is_looked_at_at_the_medium_cadence(reason: str) -> None:
    verdict = cadence.of_status(conditions(Synced=("False", reason), Stalled=("True", "x")))
    assert verdict.cadence == "medium"
