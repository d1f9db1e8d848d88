"""Pure projection of the cloud runner onto ManagedRunner status: what users see, never a secret.

`deploymentSpec` carries env values and `policy.base` may too, so neither is copied: status
mirrors only the cloud's observations (install, connection, revisions, errors, times, etag).
"""

from __future__ import annotations

from typing import Any

from runner_operator.cloud.models import ConnectionStatus, InstallStatus, ManagedRunner, readiness, to_wire

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


def observed_status(runner: ManagedRunner) -> dict[str, Any]:
    """Status fields mirrored from the cloud runner (absent cloud fields are written as null).

    `runnerId` is deliberately absent: it records ownership and is written only on create or adoption.
    """
    wire = to_wire(runner)
    identity = wire.get("identity", {})
    fields = {
        "clusterName": identity.get("clusterName"),
        "installStatus": runner.install_status,
        "connectionStatus": runner.connection_status,
        "activeRevision": runner.active_revision or 0,
        "targetRevision": runner.target_revision or 0,
        "rolloutInProgress": bool(runner.rollout_in_progress),
        "updateAvailable": bool(runner.update_available),
        "activeConfigVersion": runner.active_config_version,
        "installError": wire.get("installError"),
        "dataPlaneStatus": wire.get("dataPlaneStatus"),
        "createTime": wire.get("createTime"),
        "updateTime": wire.get("updateTime"),
        "lastHeartbeatTime": wire.get("lastHeartbeatTime"),
        "etag": runner.etag,
    }
    return fields


def phase(runner: ManagedRunner | None) -> str:
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
