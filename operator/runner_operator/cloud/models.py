"""Wire models of the ManagedRunner API: tolerant readers of server JSON and exact request writers.

Pure data, no I/O: never import httpx or kopf here. Fields that may hold secrets stay out of repr.
A message that resource.py also models (the custom resource's view of the same part of the spec)
is named `Cloud...` here, like `CloudRunner`, so the two are never confused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
)
from pydantic.alias_generators import to_camel

from runner_operator.reasons import Reason

# Markers read by the semantic comparison in diff.py (field metadata, no runtime effect here).
ENUM: Final = "enum"
"""The field is a proto enum name: `..._UNSPECIFIED` means absent."""
QUANTITY: Final = "quantity"
"""The field is a Kubernetes quantity string: compare by value, not spelling."""
OPAQUE: Final = "opaque"
"""The field is a JSON object the API stores verbatim (a message: `{}` differs from absent)."""
PRESENCE: Final = "presence"
"""The scalar field has presence: its zero value differs from absent."""


def _enum_name(value: object) -> object:
    # Servers may send the enum number; keep it as text instead of failing.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _rfc3339(value: datetime) -> str:
    text = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{value.microsecond:06d}Z" if value.microsecond else f"{text}Z"


EnumName = Annotated[str, BeforeValidator(_enum_name), ENUM]
Quantity = Annotated[str, QUANTITY]
Int64 = Annotated[int, PlainSerializer(str, return_type=str)]
"""A 64-bit integer: JSON string on the wire, number or string accepted."""
Timestamp = Annotated[datetime, AfterValidator(_as_utc), PlainSerializer(_rfc3339, return_type=str)]
JsonObject = Annotated[dict[str, Any], OPAQUE]
StrMap = dict[str, str]
Strs = tuple[str, ...]


class WireModel(BaseModel):
    """Base of every wire message: camelCase on the wire, unknown fields ignored, no inputs in errors."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
        hide_input_in_errors=True,
    )


class Empty(WireModel):
    """A message without fields; its presence is the information (`{}`)."""


# Enum values known today. Fields stay `str` so a newer server value never breaks parsing.
class ReleaseChannel:
    UNSPECIFIED: Final = "RELEASE_CHANNEL_UNSPECIFIED"
    STABLE: Final = "RELEASE_CHANNEL_STABLE"
    RAPID: Final = "RELEASE_CHANNEL_RAPID"


class InstallStatus:
    UNSPECIFIED: Final = "RUNNER_INSTALL_STATUS_UNSPECIFIED"
    PENDING: Final = "RUNNER_INSTALL_STATUS_PENDING"
    PROVISIONING: Final = "RUNNER_INSTALL_STATUS_PROVISIONING"
    READY: Final = "RUNNER_INSTALL_STATUS_READY"
    FAILED: Final = "RUNNER_INSTALL_STATUS_FAILED"
    DELETING: Final = "RUNNER_INSTALL_STATUS_DELETING"


class ConnectionStatus:
    UNSPECIFIED: Final = "RUNNER_CONNECTION_STATUS_UNSPECIFIED"
    CONNECTED: Final = "RUNNER_CONNECTION_STATUS_CONNECTED"
    DISCONNECTED: Final = "RUNNER_CONNECTION_STATUS_DISCONNECTED"


class ImagePullPolicy:
    UNSPECIFIED: Final = "SANDBOX_IMAGE_PULL_POLICY_UNSPECIFIED"
    IF_NOT_PRESENT: Final = "SANDBOX_IMAGE_PULL_POLICY_IF_NOT_PRESENT"
    ALWAYS: Final = "SANDBOX_IMAGE_PULL_POLICY_ALWAYS"


class ServiceScope:
    PUBLIC: Final = "RUNNER_DATA_PLANE_SERVICE_SCOPE_PUBLIC"
    PRIVATE: Final = "RUNNER_DATA_PLANE_SERVICE_SCOPE_PRIVATE"


class ExternalTrafficPolicy:
    CLUSTER: Final = "RUNNER_DATA_PLANE_EXTERNAL_TRAFFIC_POLICY_CLUSTER"
    LOCAL: Final = "RUNNER_DATA_PLANE_EXTERNAL_TRAFFIC_POLICY_LOCAL"


class TenantScope:
    SAME_USER: Final = "TENANT_SCOPE_SAME_USER"
    SAME_ORG: Final = "TENANT_SCOPE_SAME_ORG"
    SANDBOX_NETWORK: Final = "TENANT_SCOPE_SANDBOX_NETWORK"


class StorageMedium:
    DISK: Final = "STORAGE_MEDIUM_DISK"
    MEMORY: Final = "STORAGE_MEDIUM_MEMORY"


class DnsEgressMode:
    DENY: Final = "DNS_EGRESS_MODE_DENY"


# --- identity -------------------------------------------------------------------------------------


class RunnerIdentity(WireModel):
    runner_id: str | None = None
    runner_group_id: str | None = None
    zone: str | None = None
    cluster_id: str | None = None
    cluster_name: str | None = None
    """Output only: resolved by the server."""


# --- spec -----------------------------------------------------------------------------------------


class CloudMaintenanceWindow(WireModel):
    cron: str | None = None
    duration_seconds: int | None = None


class CloudMaintenanceExclusion(WireModel):
    start_time: Timestamp | None = None
    end_time: Timestamp | None = None
    reason: str | None = None


class CloudMaintenancePolicy(WireModel):
    windows: tuple[CloudMaintenanceWindow, ...] | None = None
    exclusions: tuple[CloudMaintenanceExclusion, ...] | None = None


class CloudToleration(WireModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class CloudRunnerResources(WireModel):
    cpu_request: Quantity | None = None
    memory_request: Quantity | None = None
    cpu_limit: Quantity | None = None
    memory_limit: Quantity | None = None


class CloudScaling(WireModel):
    replicas: int | None = None
    autoscaling_enabled: bool | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None


class CloudOverrides(WireModel):
    """Overrides for the runner's own pods; `env` may hold secrets."""

    node_selector: StrMap | None = None
    tolerations: tuple[CloudToleration, ...] | None = None
    resources: CloudRunnerResources | None = None
    annotations: StrMap | None = None
    labels: StrMap | None = None
    env: StrMap | None = Field(default=None, repr=False)
    args: Strs | None = None
    scaling: CloudScaling | None = None
    cpu_runtime_class: str | None = None
    gpu_runtime_class: str | None = None
    affinity: JsonObject | None = None
    """A Kubernetes Affinity object, replaced whole."""


class VolumesConfig(WireModel):
    enabled: bool | None = None
    csi_driver_allowlist: Strs | None = None


class CloudTenantMetrics(WireModel):
    enabled: bool | None = None
    image: str | None = None


class CloudImagePull(WireModel):
    policy: EnumName | None = None


class CloudClusterIpExposure(WireModel):
    annotations: StrMap | None = None


class CloudLoadBalancerExposure(WireModel):
    scope: EnumName | None = None
    load_balancer_class: str | None = None
    annotations: StrMap | None = None
    source_ranges: Strs | None = None
    external_traffic_policy: EnumName | None = None
    hostname: str | None = None


class CloudCustomExposure(WireModel):
    advertised_uri: str | None = None
    service_annotations: StrMap | None = None


class CloudDataPlane(WireModel):
    """Direct data-plane exposure; exactly one member is set when the object is present."""

    disabled: Empty | None = None
    cluster_ip: CloudClusterIpExposure | None = None
    load_balancer: CloudLoadBalancerExposure | None = None
    custom: CloudCustomExposure | None = None


class RunnerSpec(WireModel):
    release_channel: EnumName | None = None
    maintenance_policy: CloudMaintenancePolicy | None = None
    overrides: CloudOverrides | None = None
    enforce_resource_limits: bool | None = None
    volumes: VolumesConfig | None = None
    tenant_metrics: CloudTenantMetrics | None = None
    image_pull: CloudImagePull | None = None
    data_plane: CloudDataPlane | None = None


# --- policy ---------------------------------------------------------------------------------------


class CloudPortRange(WireModel):
    protocol: str | None = None
    port: int | None = None
    end_port: int | None = None


class CloudCidrBlock(WireModel):
    cidr: str | None = None
    except_: Strs | None = Field(default=None, alias="except")


class Selector(WireModel):
    pod_labels: StrMap | None = None
    namespace_labels: StrMap | None = None


class CloudEgressRule(WireModel):
    cidr: CloudCidrBlock | None = None
    https_hostname: str | None = Field(
        default=None, validation_alias=AliasChoices("httpsHostname", "https_hostname", "dnsName", "dns_name")
    )
    https_hostname_except: Strs | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "httpsHostnameExcept", "https_hostname_except", "dnsNameExcept", "dns_name_except"
        ),
    )
    tenant: EnumName | None = None
    any: bool | None = None
    selector: Selector | None = None
    ports: tuple[CloudPortRange, ...] | None = None


class CloudIngressRule(WireModel):
    cidr: CloudCidrBlock | None = None
    tenant: EnumName | None = None
    any: bool | None = None
    ports: tuple[CloudPortRange, ...] | None = None


class CloudResourceConstraints(WireModel):
    max_cpu: Quantity | None = None
    max_memory: Quantity | None = None
    min_cpu: Quantity | None = None
    min_memory: Quantity | None = None
    default_cpu: Quantity | None = None
    default_memory: Quantity | None = None
    max_gpu_count: Annotated[Int64, PRESENCE] | None = None
    """Absent means no cap; 0 forbids GPUs."""
    cpu_ceiling: Quantity | None = None
    memory_ceiling: Quantity | None = None
    require_limits: bool | None = None


class CloudImageConstraints(WireModel):
    allowed_registries: Strs | None = None
    allowed_images: Strs | None = None


class CloudNetworkConstraints(WireModel):
    allowed_egress: tuple[CloudEgressRule, ...] | None = None
    default_egress: tuple[CloudEgressRule, ...] | None = None
    deny_https_hostname_rules: bool | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "denyHttpsHostnameRules", "deny_https_hostname_rules", "denyDns", "deny_dns"
        ),
    )
    dns_egress: EnumName | None = None
    allowed_ingress: tuple[CloudIngressRule, ...] | None = None
    default_ingress: tuple[CloudIngressRule, ...] | None = None


class CloudSecurityConstraints(WireModel):
    allow_privileged: bool | None = None
    allowed_capabilities: Strs | None = None
    allowed_seccomp_profiles: Strs | None = None
    allowed_runtime_classes: Strs | None = None
    default_cpu_runtime_class: str | None = None
    default_gpu_runtime_class: str | None = None


class CloudInstanceConstraints(WireModel):
    allowed_instance_types: Strs | None = None


class CloudLifecycleConstraints(WireModel):
    default_lifetime_seconds: int | None = None


class CloudMetadataConstraints(WireModel):
    denied_annotation_prefixes: Strs | None = None
    max_annotation_count: int | None = None


class CloudVolumeConstraints(WireModel):
    allowed_media: Strs | None = None
    max_size: Quantity | None = None


class CloudPolicyConstraints(WireModel):
    resources: CloudResourceConstraints | None = None
    image: CloudImageConstraints | None = None
    network: CloudNetworkConstraints | None = None
    security: CloudSecurityConstraints | None = None
    instance: CloudInstanceConstraints | None = None
    lifecycle: CloudLifecycleConstraints | None = None
    metadata: CloudMetadataConstraints | None = None
    volumes: CloudVolumeConstraints | None = None


class CloudSourceIpAllowlist(WireModel):
    """Present with no CIDRs denies every public source; absent means no restriction."""

    cidrs: Strs | None = None


class CloudControlPlaneAccess(WireModel):
    source_ip_allowlist: CloudSourceIpAllowlist | None = None


class CloudPolicy(WireModel):
    """The runner's sandbox policy, always written whole; `base` may hold secrets."""

    display_name: str | None = None
    base: JsonObject | None = Field(default=None, repr=False)
    constraints: CloudPolicyConstraints | None = None
    control_plane_access: CloudControlPlaneAccess | None = None


# --- runner ---------------------------------------------------------------------------------------


class InstallError(WireModel):
    reason: EnumName | None = None
    message: str | None = None
    diagnostic_detail: str | None = None
    remediation_hints: Strs | None = None
    occurred_at: Timestamp | None = None


class CloudRunner(WireModel):
    """One managed runner as read from or written to the API."""

    identity: RunnerIdentity | None = None
    display_name: str | None = None
    spec: RunnerSpec | None = None
    policy: CloudPolicy | None = None
    etag: str | None = None
    install_status: EnumName | None = None
    connection_status: EnumName | None = None
    active_config_version: str | None = None
    active_revision: int | None = None
    target_revision: int | None = None
    update_available: bool | None = None
    rollout_in_progress: bool | None = None
    deployment_spec: JsonObject | None = Field(default=None, repr=False)
    install_error: InstallError | None = None
    data_plane_status: JsonObject | None = None
    create_time: Timestamp | None = None
    update_time: Timestamp | None = None
    last_heartbeat_time: Timestamp | None = None

    @property
    def runner_id(self) -> str | None:
        return self.identity.runner_id if self.identity else None

    @property
    def ready(self) -> bool:
        """Installed, connected and rolled out (see `readiness`, the one rule)."""
        return readiness(self).ready


@dataclass(frozen=True)
class Readiness:
    """Where a runner stands on its way to ready: a condition reason and what to tell the user."""

    reason: Reason
    message: str

    @property
    def ready(self) -> bool:
        return self.reason == Reason.AVAILABLE


def readiness(runner: CloudRunner) -> Readiness:
    """The one readiness rule (planning waits on it, status and `kubectl get` show it).

    Ready means installed, rolled out to its target revision, and connected, checked in the order
    a user fixes them: a failed install first, then an install in progress, a rollout, the link.
    """
    status = runner.install_status or InstallStatus.UNSPECIFIED
    if status == InstallStatus.FAILED:
        return Readiness(Reason.INSTALL_FAILED, _install_error(runner.install_error))
    if status in (InstallStatus.PENDING, InstallStatus.PROVISIONING, InstallStatus.UNSPECIFIED):
        return Readiness(Reason.INSTALLING, f"install status is {status}")
    if runner.rollout_in_progress or (runner.active_revision or 0) < (runner.target_revision or 0):
        return Readiness(
            Reason.ROLLING_OUT,
            f"rolling out revision {runner.target_revision} (active {runner.active_revision or 0})",
        )
    if runner.connection_status != ConnectionStatus.CONNECTED:
        return Readiness(Reason.DISCONNECTED, f"connection status is {runner.connection_status or 'unknown'}")
    if status != InstallStatus.READY:
        return Readiness(Reason.UNKNOWN_STATUS, f"install status is {status}")
    return Readiness(
        Reason.AVAILABLE,
        f"runner {runner.runner_id} is installed, connected and at revision {runner.target_revision or 0}",
    )


def _install_error(err: InstallError | None) -> str:
    if err is None:
        return "the runner install failed (no install error reported)"
    parts = [p for p in (err.reason, err.message) if p]
    return "install failed: " + (": ".join(parts) or "no details")


OUTPUT_ONLY: Final = frozenset(
    {
        "install_status",
        "connection_status",
        "active_config_version",
        "active_revision",
        "target_revision",
        "update_available",
        "rollout_in_progress",
        "deployment_spec",
        "install_error",
        "data_plane_status",
        "create_time",
        "update_time",
        "last_heartbeat_time",
    }
)
"""ManagedRunner fields the server owns; never sent in a request."""


def to_wire(model: WireModel, *, request: bool = False) -> dict[str, Any]:
    """Serialise to camelCase JSON: absent fields omitted, empty messages kept as `{}`, int64 as strings.

    With `request=True` a ManagedRunner loses its output-only fields (status, `identity.clusterName`).
    """
    exclude: dict[str, Any] | None = None
    if request and isinstance(model, CloudRunner):
        exclude = {name: True for name in OUTPUT_ONLY}
        exclude["identity"] = {"cluster_name": True}
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=exclude)


def parse_runner(data: object) -> CloudRunner:
    """Read one runner from decoded JSON; raises pydantic.ValidationError (without input values)."""
    return CloudRunner.model_validate(data)
