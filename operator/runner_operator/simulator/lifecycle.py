"""One stored runner and its asynchronous life cycle (contract 5.4), computed lazily from a clock.

advance(now) replays every transition that is due, in time order, so state is the same
whether it is read once after an hour or every millisecond; there are no background tasks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner_operator.simulator import schema
from runner_operator.simulator.config import Timings
from runner_operator.simulator.schema import format_time

PENDING, PROVISIONING, READY, FAILED, DELETING = "PENDING", "PROVISIONING", "READY", "FAILED", "DELETING"
UNSPECIFIED, CONNECTED, DISCONNECTED = "UNSPECIFIED", "CONNECTED", "DISCONNECTED"
CERTIFICATE_DAYS = 90


def _same(value: Any) -> Any:
    return value


def json_copy(value: Any) -> Any:
    """Copy a JSON tree so callers may mutate what they get without touching the store."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


@dataclass
class Runner:
    runner_id: str
    group: str
    zone: str
    cluster_id: str
    cluster_name: str
    display_name: str
    spec: dict[str, Any]
    policy: dict[str, Any] | None
    etag: str
    create_time: float
    update_time: float
    channel_version: str  # version the next install or update will run
    install_status: str = PENDING
    connection: str = UNSPECIFIED
    active_revision: int = 0
    target_revision: int = 1
    config_version: str = ""
    next_at: float | None = None  # due time of the next install/delete transition
    rollout_at: float | None = None
    connected_at: float | None = None
    last_heartbeat: float | None = None
    ready_at: float | None = None
    install_error: dict[str, Any] | None = None
    fail_install: bool = False  # armed fault: the pending install ends in FAILED
    organization: str = ""  # owner; runner IDs are unique per organisation only
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> tuple[str, str]:
        """(organization, runner ID): the store key, since two organisations may reuse an ID."""
        return (self.organization, self.runner_id)

    # -- transitions -------------------------------------------------------------------

    def advance(self, now: float, timings: Timings) -> list[str]:
        """Apply every due transition; returns event names ('connected', 'gone', ...)."""
        events: list[str] = []
        while True:
            due = self.next_at
            if self.install_status == PENDING and due is not None and due <= now:
                self.install_status = PROVISIONING
                self.next_at = due + timings.provision_seconds
            elif self.install_status == PROVISIONING and due is not None and due <= now:
                self.next_at = None
                if self.fail_install:
                    self.fail_install = False
                    self.fail(due, "RUNNER_INSTALL_ERROR_REASON_INSTALL_FAILED", "injected install failure")
                    events.append("failed")
                else:
                    self._install(due)
                    events.append("connected")
            elif self.install_status == DELETING and due is not None and due <= now:
                events.append("gone")
                return events
            elif self.install_status == READY and self.rollout_at is not None and self.rollout_at <= now:
                self.rollout_at = None
                self.active_revision = self.target_revision
                self.config_version = self.channel_version
            else:
                break
        if self.connection == CONNECTED and self.connected_at is not None:
            period = timings.heartbeat_seconds
            beats = math.floor((now - self.connected_at) / period) if period > 0 else 0
            self.last_heartbeat = max(self.last_heartbeat or 0.0, self.connected_at + beats * period)
        return events

    def _install(self, at: float) -> None:
        self.install_status = READY
        self.connection = CONNECTED
        self.connected_at = self.last_heartbeat = self.ready_at = at
        self.active_revision = self.target_revision
        self.config_version = self.channel_version
        self.rollout_at = None
        self.install_error = None

    def fail(self, at: float, reason: str, message: str) -> None:
        self.install_status = FAILED
        self.next_at = None
        self.rollout_at = None
        self.install_error = {
            "reason": reason,
            "message": message,
            "diagnosticDetail": f"runner release on cluster {self.cluster_id} did not become healthy",
            "remediationHints": ["check the cluster's node capacity", "retry after fixing the cause"],
            "occurredAt": format_time(at),
        }

    def recover(self, now: float, timings: Timings) -> None:
        self.install_status = PROVISIONING
        self.install_error = None
        self.next_at = now + timings.provision_seconds

    def start_rollout(self, now: float, timings: Timings) -> None:
        self.target_revision += 1
        if self.install_status == READY:
            self.rollout_at = now + timings.rollout_seconds

    def start_deletion(self, now: float, timings: Timings) -> None:
        if self.install_status != DELETING:
            self.install_status = DELETING
            self.rollout_at = None
            self.next_at = now + timings.delete_seconds

    def disconnect(self, now: float, timings: Timings) -> None:
        self.advance(now, timings)
        self.connection = DISCONNECTED
        self.connected_at = None

    def reconnect(self, now: float) -> None:
        self.connection = CONNECTED
        self.connected_at = self.last_heartbeat = now

    # -- rendering ---------------------------------------------------------------------

    @property
    def channel(self) -> str:
        return str(self.spec.get("release_channel", "RELEASE_CHANNEL_STABLE"))

    def update_available(self, releases: dict[str, str]) -> bool:
        latest = releases.get(self.channel)
        return self.install_status == READY and latest is not None and latest != self.channel_version

    def rollout_in_progress(self) -> bool:
        return self.target_revision > self.active_revision

    def touch_spec(self) -> None:
        self.cache.pop("spec", None)
        self.cache.pop("deployment", None)

    def touch_policy(self) -> None:
        self.cache.pop("policy", None)

    def render(self, releases: dict[str, str], copy: bool = True) -> dict[str, Any]:
        """The wire ManagedRunner: camelCase, defaults omitted, int64 as strings.

        copy=False shares cached sub-trees with the store; only for callers that serialise at once.
        """
        share: Callable[[Any], Any] = json_copy if copy else _same
        if "spec" not in self.cache:
            self.cache["spec"] = schema.encode(schema.SPEC, self.spec)
        if "policy" not in self.cache and self.policy is not None:
            self.cache["policy"] = schema.encode(schema.POLICY, self.policy)
        out: dict[str, Any] = {
            "identity": {
                "runnerId": self.runner_id,
                "runnerGroupId": self.group,
                "zone": self.zone,
                "clusterId": self.cluster_id,
                "clusterName": self.cluster_name,
            },
        }
        if self.display_name:
            out["displayName"] = self.display_name
        out["spec"] = share(self.cache["spec"])
        if self.policy is not None:
            out["policy"] = share(self.cache["policy"])
        out["etag"] = self.etag
        out["installStatus"] = f"RUNNER_INSTALL_STATUS_{self.install_status}"
        if self.connection != UNSPECIFIED:
            out["connectionStatus"] = f"RUNNER_CONNECTION_STATUS_{self.connection}"
        if self.config_version:
            out["activeConfigVersion"] = self.config_version
        if self.active_revision:
            out["activeRevision"] = self.active_revision
        if self.target_revision:
            out["targetRevision"] = self.target_revision
        if self.update_available(releases):
            out["updateAvailable"] = True
        if self.rollout_in_progress():
            out["rolloutInProgress"] = True
        out["deploymentSpec"] = share(self._deployment())
        if self.install_error is not None:
            out["installError"] = self.install_error
        data_plane = self._data_plane_status()
        if data_plane is not None:
            out["dataPlaneStatus"] = data_plane
        out["createTime"] = self._time("create", self.create_time)
        out["updateTime"] = self._time("update", self.update_time)
        if self.last_heartbeat is not None:
            out["lastHeartbeatTime"] = self._time("heartbeat", self.last_heartbeat)
        return out

    def _time(self, name: str, value: float) -> str:
        """format_time, memoised per field because timestamps change rarely."""
        cached = self.cache.get(name)
        if cached is None or cached[0] != value:
            cached = self.cache[name] = (value, format_time(value))
        text: str = cached[1]
        return text

    def _deployment(self) -> dict[str, Any]:
        cached = self.cache.get("deployment")
        if cached is None:
            overrides = self.cache["spec"].get("overrides", {})
            version = self.channel_version
            cached = {
                "image": f"registry.cwsandbox.example/managed-runner:{version}",
                # Resolved env mixes platform values with the customer's overrides: secret-bearing.
                "env": {"CWSANDBOX_RUNNER_ID": self.runner_id, **overrides.get("env", {})},
                "args": overrides.get("args", []),
                "resources": overrides.get(
                    "resources",
                    {"cpuRequest": "500m", "memoryRequest": "1Gi", "cpuLimit": "2", "memoryLimit": "4Gi"},
                ),
                "nodeSelector": overrides.get("nodeSelector", {}),
                "tolerations": overrides.get("tolerations", []),
                "scaling": overrides.get("scaling", {"replicas": 2}),
                "annotations": overrides.get("annotations", {}),
                "labels": overrides.get("labels", {}),
                "serviceAccount": "managed-runner",
                "imagePullPolicy": "IfNotPresent",
                "gatewayServer": "api.cwsandbox.com:443",
            }
            for key in ("cpuRuntimeClass", "gpuRuntimeClass", "affinity"):
                if key in overrides:
                    cached[key] = overrides[key]
            cached = {k: v for k, v in cached.items() if v not in ({}, [])}
            self.cache["deployment"] = cached
        result: dict[str, Any] = cached
        return result

    def _data_plane_status(self) -> dict[str, Any] | None:
        config = self.spec.get("data_plane")
        if config is None:
            return None
        if "disabled" in config:
            return {"state": "DISABLED"}
        if self.install_status != READY or self.ready_at is None:
            return {"state": "PROVISIONING"}
        if "custom" in config:
            uri = config["custom"].get("advertised_uri", "")
        elif "load_balancer" in config:
            host = config["load_balancer"].get("hostname") or f"{self.runner_id}.dp.cwsandbox.example"
            uri = f"https://{host}:9443"
        else:
            uri = f"https://{self.runner_id}-data-plane.cwsandbox.svc:9443"
        return {
            "state": "READY",
            "uri": uri,
            "protocols": ["exec", "logs", "files"],
            "certificateExpireTime": format_time(self.ready_at + CERTIFICATE_DAYS * 86_400),
        }

    # -- persistence -------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "cache"}

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> Runner:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "cache"})
