"""Typed, read-only view of a ManagedRunner custom resource (sandbox.coreweave.com/v1alpha1).

Parses the object the API server stored; crds/managedrunners.sandbox.coreweave.com.yaml is the contract
and validates values (ranges, patterns, CEL rules). These models mirror its field names one to one
(tests/unit/test_crd_contract.py checks it) and add only the checks the types rely on. No I/O, no
conversion to the CoreWeave wire format, and no kopf/httpx/kubernetes imports.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

GROUP = "sandbox.coreweave.com"
VERSION = "v1alpha1"
PLURAL = "managedrunners"
KIND = "ManagedRunner"

# Quantities ("500m", "4Gi") and timestamps stay strings: the CRD validates them, the operator
# forwards them verbatim.
Quantity = str

ReleaseChannel = Literal["RELEASE_CHANNEL_STABLE", "RELEASE_CHANNEL_RAPID"]
ImagePullPolicy = Literal["SANDBOX_IMAGE_PULL_POLICY_IF_NOT_PRESENT", "SANDBOX_IMAGE_PULL_POLICY_ALWAYS"]
ServiceScope = Literal["RUNNER_DATA_PLANE_SERVICE_SCOPE_PUBLIC", "RUNNER_DATA_PLANE_SERVICE_SCOPE_PRIVATE"]
ExternalTrafficPolicy = Literal[
    "RUNNER_DATA_PLANE_EXTERNAL_TRAFFIC_POLICY_CLUSTER", "RUNNER_DATA_PLANE_EXTERNAL_TRAFFIC_POLICY_LOCAL"
]
EgressTenantScope = Literal["TENANT_SCOPE_SAME_USER", "TENANT_SCOPE_SAME_ORG", "TENANT_SCOPE_SANDBOX_NETWORK"]
IngressTenantScope = Literal["TENANT_SCOPE_SAME_USER", "TENANT_SCOPE_SAME_ORG"]
Protocol = Literal["TCP", "UDP", "SCTP"]
StorageMedium = Literal["STORAGE_MEDIUM_UNSPECIFIED", "STORAGE_MEDIUM_DISK", "STORAGE_MEDIUM_MEMORY"]
DeletionPolicy = Literal["Delete", "Orphan"]
NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
LabelSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class K8sModel(BaseModel):
    """camelCase on the wire, snake_case in Python, immutable, unknown fields are a bug."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")


def _count_set(*values: object) -> int:
    return sum(value is not None and value is not False for value in values)


# --- identity and runner spec ------------------------------------------------------------------------


class MaintenanceWindow(K8sModel):
    cron: str
    duration_seconds: int


class MaintenanceExclusion(K8sModel):
    start_time: str
    end_time: str
    reason: str | None = None


class MaintenancePolicy(K8sModel):
    windows: tuple[MaintenanceWindow, ...] = ()
    exclusions: tuple[MaintenanceExclusion, ...] = ()

    def next_change(self, moment: datetime) -> datetime | None:
        """The first exclusion start or end after `moment` (when `excludes` may next answer otherwise);
        None if none is ahead (an unreadable time is always inside, so it never changes)."""
        ahead: list[datetime] = []
        for exclusion in self.exclusions:
            for text in (exclusion.start_time, exclusion.end_time):
                try:
                    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
                except ValueError:
                    continue
                at = at.replace(tzinfo=at.tzinfo or UTC)
                if at > moment:
                    ahead.append(at)
        return min(ahead, default=None)

    def excludes(self, moment: datetime) -> bool:
        """Whether `moment` falls inside an exclusion (an unreadable time counts as inside: it was meant
        to protect something)."""
        for exclusion in self.exclusions:
            try:
                start, end = (
                    datetime.fromisoformat(t.replace("Z", "+00:00"))
                    for t in (exclusion.start_time, exclusion.end_time)
                )
            except ValueError:
                return True
            if start.replace(tzinfo=start.tzinfo or UTC) <= moment < end.replace(tzinfo=end.tzinfo or UTC):
                return True
        return False


class Toleration(K8sModel):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class RunnerResources(K8sModel):
    cpu_request: Quantity | None = None
    memory_request: Quantity | None = None
    cpu_limit: Quantity | None = None
    memory_limit: Quantity | None = None


class SecretKeySelector(K8sModel):
    """A key of a Secret in the ManagedRunner's own namespace."""

    name: str
    key: str


class EnvVarSource(K8sModel):
    secret_key_ref: SecretKeySelector


class EnvVar(K8sModel):
    """One runner environment variable: a literal `value` or a Secret reference, never both."""

    name: str
    value: str | None = None
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"env {self.name!r}: set exactly one of value and valueFrom")
        return self


class Scaling(K8sModel):
    replicas: int | None = None
    autoscaling_enabled: bool = False
    min_replicas: int | None = None
    max_replicas: int | None = None


# Kubernetes core/v1 Affinity, limited to the fields the CRD declares.


class NodeSelectorRequirement(K8sModel):
    key: str
    operator: NodeSelectorOperator
    values: tuple[str, ...] = ()


class NodeSelectorTerm(K8sModel):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(K8sModel):
    node_selector_terms: tuple[NodeSelectorTerm, ...]


class PreferredSchedulingTerm(K8sModel):
    weight: int
    preference: NodeSelectorTerm


class NodeAffinity(K8sModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredSchedulingTerm, ...] = ()


class LabelSelectorRequirement(K8sModel):
    key: str
    operator: LabelSelectorOperator
    values: tuple[str, ...] = ()


class LabelSelector(K8sModel):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


class PodAffinityTerm(K8sModel):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    topology_key: str
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


class WeightedPodAffinityTerm(K8sModel):
    weight: int
    pod_affinity_term: PodAffinityTerm


class PodAffinity(K8sModel):
    required_during_scheduling_ignored_during_execution: tuple[PodAffinityTerm, ...] = ()
    preferred_during_scheduling_ignored_during_execution: tuple[WeightedPodAffinityTerm, ...] = ()


class Affinity(K8sModel):
    """Replaced whole in the cloud. `Affinity()` (from `{}`) clears all rules; None restores the defaults."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Overrides(K8sModel):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    resources: RunnerResources | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    env: tuple[EnvVar, ...] = ()
    args: tuple[str, ...] = ()
    scaling: Scaling | None = None
    cpu_runtime_class: str | None = None
    gpu_runtime_class: str | None = None
    affinity: Affinity | None = None


class Volumes(K8sModel):
    enabled: bool = False
    csi_driver_allowlist: tuple[str, ...] = ()


class TenantMetrics(K8sModel):
    enabled: bool = False
    image: str | None = None


class ImagePull(K8sModel):
    policy: ImagePullPolicy | None = None


class ClusterIpExposure(K8sModel):
    annotations: dict[str, str] = Field(default_factory=dict)


class LoadBalancerExposure(K8sModel):
    scope: ServiceScope | None = None
    load_balancer_class: str | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    source_ranges: tuple[str, ...] = ()
    external_traffic_policy: ExternalTrafficPolicy | None = None
    hostname: str | None = None


class CustomExposure(K8sModel):
    advertised_uri: str
    service_annotations: dict[str, str] = Field(default_factory=dict)


class DataPlane(K8sModel):
    """Direct data-plane exposure: exactly one of the four choices."""

    disabled: bool = False
    cluster_ip: ClusterIpExposure | None = None
    load_balancer: LoadBalancerExposure | None = None
    custom: CustomExposure | None = None

    @model_validator(mode="after")
    def _exactly_one_exposure(self) -> Self:
        if _count_set(self.disabled, self.cluster_ip, self.load_balancer, self.custom) != 1:
            raise ValueError("dataPlane: set exactly one of disabled, clusterIp, loadBalancer or custom")
        return self


# --- policy ------------------------------------------------------------------------------------------


class ResourceConstraints(K8sModel):
    min_cpu: Quantity | None = None
    default_cpu: Quantity | None = None
    max_cpu: Quantity | None = None
    min_memory: Quantity | None = None
    default_memory: Quantity | None = None
    max_memory: Quantity | None = None
    max_gpu_count: int | None = None
    """None = no cap; 0 = GPUs forbidden. The difference is a real change."""
    cpu_ceiling: Quantity | None = None
    memory_ceiling: Quantity | None = None
    require_limits: bool = False


class ImageConstraints(K8sModel):
    allowed_registries: tuple[str, ...] = ()
    allowed_images: tuple[str, ...] = ()


class CidrBlock(K8sModel):
    cidr: str
    except_: tuple[str, ...] = Field(default=(), alias="except")


class PortRange(K8sModel):
    protocol: Protocol | None = None
    """None = TCP (the API default)."""
    port: int
    end_port: int | None = None


class WorkloadSelector(K8sModel):
    pod_labels: dict[str, str]
    namespace_labels: dict[str, str] | None = None
    """None = the sandbox's own namespace only."""


class EgressRule(K8sModel):
    cidr: CidrBlock | None = None
    https_hostname: str | None = None
    https_hostname_except: tuple[str, ...] = ()
    tenant: EgressTenantScope | None = None
    any: bool = False
    selector: WorkloadSelector | None = None
    ports: tuple[PortRange, ...] = ()

    @model_validator(mode="after")
    def _exactly_one_destination(self) -> Self:
        if _count_set(self.cidr, self.https_hostname, self.tenant, self.any, self.selector) != 1:
            raise ValueError("egress rule: set exactly one of cidr, httpsHostname, tenant, any or selector")
        return self


class IngressRule(K8sModel):
    cidr: CidrBlock | None = None
    tenant: IngressTenantScope | None = None
    any: bool = False
    ports: tuple[PortRange, ...] = ()

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if _count_set(self.cidr, self.tenant, self.any) != 1:
            raise ValueError("ingress rule: set exactly one of cidr, tenant or any")
        return self


class NetworkConstraints(K8sModel):
    allowed_egress: tuple[EgressRule, ...] = ()
    default_egress: tuple[EgressRule, ...] = ()
    deny_https_hostname_rules: bool = False
    dns_egress: str | None = None
    allowed_ingress: tuple[IngressRule, ...] = ()
    default_ingress: tuple[IngressRule, ...] = ()


class SecurityConstraints(K8sModel):
    allow_privileged: bool = False
    allowed_capabilities: tuple[str, ...] = ()
    allowed_seccomp_profiles: tuple[str, ...] = ()
    allowed_runtime_classes: tuple[str, ...] = ()
    default_cpu_runtime_class: str | None = None
    default_gpu_runtime_class: str | None = None


class InstanceConstraints(K8sModel):
    allowed_instance_types: tuple[str, ...] = ()


class LifecycleConstraints(K8sModel):
    default_lifetime_seconds: int | None = None


class MetadataConstraints(K8sModel):
    denied_annotation_prefixes: tuple[str, ...] = ()
    max_annotation_count: int | None = None


class VolumeConstraints(K8sModel):
    allowed_media: tuple[StorageMedium, ...] = ()
    max_size: Quantity | None = None


class PolicyConstraints(K8sModel):
    resources: ResourceConstraints | None = None
    image: ImageConstraints | None = None
    network: NetworkConstraints | None = None
    security: SecurityConstraints | None = None
    instance: InstanceConstraints | None = None
    lifecycle: LifecycleConstraints | None = None
    metadata: MetadataConstraints | None = None
    volumes: VolumeConstraints | None = None


class SourceIpAllowlist(K8sModel):
    cidrs: tuple[str, ...] = ()


class ControlPlaneAccess(K8sModel):
    source_ip_allowlist: SourceIpAllowlist | None = None
    """None = no source-IP restriction; present with no cidrs = every public source denied."""


class Policy(K8sModel):
    """The runner's sandbox policy; `Policy()` (from `{}`) is the fully permissive posture."""

    display_name: str | None = None
    base: dict[str, Any] | None = None
    constraints: PolicyConstraints | None = None
    control_plane_access: ControlPlaneAccess | None = None


# --- operator settings and the whole spec --------------------------------------------------------------


class SecretRef(K8sModel):
    name: str
    key: str = "token"


class Credentials(K8sModel):
    secret_ref: SecretRef


class Updates(K8sModel):
    """When the operator applies an available runner update (see the CRD's spec.updates)."""

    apply: Literal["Manual", "WhenAvailable"] = "Manual"
    request: str | None = None


class ManagedRunnerSpec(K8sModel):
    runner_id: str
    cluster_id: str
    zone: str
    runner_group_id: str | None = None
    display_name: str | None = None
    release_channel: ReleaseChannel | None = None
    maintenance_policy: MaintenancePolicy | None = None
    overrides: Overrides | None = None
    enforce_resource_limits: bool = False
    volumes: Volumes | None = None
    tenant_metrics: TenantMetrics | None = None
    image_pull: ImagePull | None = None
    data_plane: DataPlane | None = None
    policy: Policy
    credentials: Credentials | None = None
    deletion_policy: DeletionPolicy = "Delete"
    adopt: bool = False
    paused: bool = False
    replacement_policy: Literal["Reject", "Replace"] = "Reject"
    updates: Updates = Field(default_factory=Updates)

    def env_secret_refs(self) -> tuple[SecretKeySelector, ...]:
        """Secret keys referenced by `overrides.env`, in env order, without duplicates."""
        if self.overrides is None:
            return ()
        refs: dict[tuple[str, str], SecretKeySelector] = {}
        for var in self.overrides.env:
            if var.value_from is not None:
                ref = var.value_from.secret_key_ref
                refs.setdefault((ref.name, ref.key), ref)
        return tuple(refs.values())

    def secret_names(self) -> frozenset[str]:
        """Names of every Secret (same namespace) this spec reads: env references and credentials."""
        names = {ref.name for ref in self.env_secret_refs()}
        if self.credentials is not None:
            names.add(self.credentials.secret_ref.name)
        return frozenset(names)


FINALIZER = "sandbox.coreweave.com/finalizer"
"""The operator's finalizer on each ManagedRunner: its deletion waits for the runner's decommission."""


class ManagedRunnerResource(BaseModel):
    """One ManagedRunner object as the operator sees it; `status` is kept verbatim (the operator owns it)."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    uid: str
    generation: int
    deletion_timestamp: str | None = None
    resource_version: str | None = None
    """changes with any write to the object (spec, status or metadata)."""
    protected: bool = True
    """the object carries FINALIZER, so deleting it will wait for the decommission."""
    spec: ManagedRunnerSpec
    status: dict[str, Any] = Field(default_factory=dict)

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ManagedRunnerResource:
        """Parse a CR body (a kopf Body or a plain dict); raises pydantic.ValidationError on a bad spec."""
        metadata: Mapping[str, Any] = body.get("metadata") or {}
        return cls(
            name=metadata.get("name"),
            namespace=metadata.get("namespace"),
            uid=metadata.get("uid"),
            generation=metadata.get("generation"),
            deletion_timestamp=metadata.get("deletionTimestamp"),
            resource_version=metadata.get("resourceVersion"),
            protected=FINALIZER in (metadata.get("finalizers") or ()),
            spec=ManagedRunnerSpec.model_validate(body.get("spec") or {}),
            status=dict(body.get("status") or {}),
        )

    @classmethod
    def identity_only(cls, body: Mapping[str, Any]) -> ManagedRunnerResource | None:
        """What deletion needs from a spec the full model cannot read (a field a newer version added).

        Identity, credentials and deletionPolicy only; None when even those do not parse.
        """
        raw: Mapping[str, Any] = body.get("spec") or {}
        keep = ("runnerId", "clusterId", "zone", "credentials", "deletionPolicy")
        picked = {key: raw[key] for key in keep if key in raw}
        try:
            spec = ManagedRunnerSpec.model_validate({**picked, "policy": {}})
            return cls.from_body({**body, "spec": spec.model_dump(by_alias=True, exclude_unset=True)})
        except ValueError:
            return None

    def env_secret_refs(self) -> tuple[SecretKeySelector, ...]:
        """Secret keys referenced by the runner's env, see ManagedRunnerSpec.env_secret_refs."""
        return self.spec.env_secret_refs()

    def secret_refs(self) -> SecretRefs:
        """Every Secret key a pass reads for this resource, without the rest of the spec."""
        own = self.spec.credentials.secret_ref if self.spec.credentials else None
        return SecretRefs(
            sys.intern(self.namespace),
            SecretKey.of(own.name, own.key) if own else None,
            tuple(SecretKey.of(ref.name, ref.key) for ref in self.env_secret_refs()),
        )


class SecretKey(NamedTuple):
    """A key of a Secret in the object's namespace: a tuple, as `SecretRefs` is kept per object."""

    name: str
    key: str

    @classmethod
    def of(cls, name: str, key: str) -> SecretKey:
        """Interned: every object of a fleet names the same few Secrets, each parse a new copy."""
        return cls(sys.intern(name), sys.intern(key))


@dataclass(frozen=True, slots=True)
class SecretRefs:
    """Which Secret keys a pass reads: the token's (None: the operator's default) and the env values'.

    Small on purpose: a steady pass that would repeat the last one resolves its Secrets from this
    alone, without parsing the object again (`reconciling.unchanged_since`), and every quiet object
    keeps one (tuples: a pydantic model with its field set is about 0.5 KB more).
    """

    namespace: str
    credentials: SecretKey | None
    env: tuple[SecretKey, ...]
