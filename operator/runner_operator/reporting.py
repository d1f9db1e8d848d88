"""Pure projection of the cloud runner onto ManagedRunner status: what users see, never a secret.

`deploymentSpec` carries env values and `policy.base` may too, so neither is copied: status
mirrors only the cloud's observations (install, connection, revisions, errors, times, etag).
"""

from __future__ import annotations

from runner_operator.cloud.models import CloudRunner, ConnectionStatus, InstallStatus, readiness, to_wire
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


def observed_status(runner: CloudRunner) -> StatusPatch:
    """Status fields mirrored from the cloud runner (absent cloud fields are written as null).

    `runnerId` is deliberately absent: it records ownership and is written only on create or adoption.
    """
    wire = to_wire(runner)
    identity = wire.get("identity", {})
    return StatusPatch(
        cluster_name=identity.get("clusterName"),
        install_status=runner.install_status,
        connection_status=runner.connection_status,
        connection=_SHORT.get(runner.connection_status or "", "Unknown"),
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


def phase(runner: CloudRunner | None) -> str:
    """A one-word summary for `kubectl get` (Ready only when the readiness rule says so)."""
    if runner is None:
        return "Absent"
    status = runner.install_status or InstallStatus.UNSPECIFIED
    if status != InstallStatus.READY:
        return PHASES.get(status, "Unknown")
    found = readiness(runner)
    if found.reason == "Disconnected":
        return _SHORT.get(runner.connection_status or "", "Connecting")
    return "Ready" if found.ready else found.reason
