"""Pure projection of the cloud runner onto ManagedRunner status: what users see, never a secret.

`deploymentSpec` carries env values and `policy.base` may too, so neither is copied: status
mirrors only the cloud's observations (install, connection, revisions, errors, times, etag).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner_operator.cloud.models import ConnectionStatus, InstallStatus, ManagedRunner, to_wire
from runner_operator.status import StatusPatch

PHASES = {
    InstallStatus.PENDING: "Pending",
    InstallStatus.PROVISIONING: "Provisioning",
    InstallStatus.READY: "Ready",
    InstallStatus.FAILED: "Failed",
    InstallStatus.DELETING: "Deleting",
}

_SHORT = {
    ConnectionStatus.CONNECTED: "Connected",
    ConnectionStatus.DISCONNECTED: "Disconnected",
}


def observed_status(runner: ManagedRunner) -> StatusPatch:
    """Status fields mirrored from the cloud runner (absent cloud fields are written as null).

    `runnerId` is deliberately absent: it records ownership and is written only on create or adoption.
    """
    wire = to_wire(runner)
    identity = wire.get("identity", {})
    return StatusPatch(
        cluster_name=identity.get("clusterName"),
        install_status=runner.install_status,
        connection_status=runner.connection_status,
        active_revision=runner.active_revision or 0,
        target_revision=runner.target_revision or 0,
        rollout_in_progress=bool(runner.rollout_in_progress),
        update_available=bool(runner.update_available),
        active_config_version=runner.active_config_version,
        install_error=wire.get("installError"),
        data_plane_status=wire.get("dataPlaneStatus"),
        create_time=wire.get("createTime"),
        update_time=wire.get("updateTime"),
        last_heartbeat_time=wire.get("lastHeartbeatTime"),
        etag=runner.etag,
    )


def phase(runner: ManagedRunner | None) -> str:
    """A one-word summary for `kubectl get` (Ready only when installed, connected and rolled out)."""
    if runner is None:
        return "Absent"
    status = runner.install_status or InstallStatus.UNSPECIFIED
    if status == InstallStatus.READY:
        if runner.rollout_in_progress or (runner.active_revision or 0) < (runner.target_revision or 0):
            return "RollingOut"
        if runner.connection_status != ConnectionStatus.CONNECTED:
            return _SHORT.get(runner.connection_status or "", "Connecting")
    return PHASES.get(status, "Unknown")


FIXED_OUTSIDE_THE_SPEC = frozenset(
    {
        "CredentialsRejected",
        "PermissionDenied",
        "CredentialsMissing",
        "CredentialsSecretNotFound",
        "CredentialsKeyMissing",
        "SecretNotFound",
        "SecretKeyMissing",
        "SecretAccessDenied",
        "SecretReadFailed",
        "EndpointMisrouted",
        "RunnerNotVisible",
    }
)
"""Stalled reasons a person fixes outside the spec (a Secret, the token, a route): no spec change wakes
the resource, so it is looked at again at the medium cadence rather than the slow one."""


def cadence(status: Mapping[str, Any]) -> str:
    """How soon to look again, from the status alone (kopf timer filters call this on every event).

    fast: something is in flight; medium: degraded or retrying after an error; slow: steady, paused
    or stalled on something only a person can fix.
    """
    conds = {str(c.get("type")): c for c in status.get("conditions") or () if isinstance(c, Mapping)}
    ready, synced, stalled = conds.get("Ready", {}), conds.get("Synced", {}), conds.get("Stalled", {})
    if stalled.get("status") == "True" and synced.get("reason") in FIXED_OUTSIDE_THE_SPEC:
        return "medium"  # Secrets and endpoints are not watched: notice a person's fix within a minute
    if stalled.get("status") == "True" or synced.get("reason") == "Paused":
        return "slow"
    if synced.get("status") == "False":
        return "medium"  # a transient failure, even on a runner still Ready from an older generation
    if ready.get("status") == "True":
        return "slow"
    if not conds:
        return "fast"
    if ready.get("reason") in ("InstallFailed", "Disconnected"):
        return "medium"
    return "fast"
