"""The ManagedRunner message tree and its proto3-JSON codec (contract 3.2, 5, 6).

decode() turns camelCase or snake_case input into a canonical snake_case dict that omits
defaults but keeps message presence; encode() renders that dict as camelCase wire JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from runner_operator.simulator.errors import Violation

Kind = Literal["str", "bool", "int32", "int64", "enum", "msg", "list", "map", "struct", "opaque", "time"]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_CAMEL_BOUNDARY = re.compile(r"(?<!^)(?=[A-Z])")


def camel_to_snake(name: str) -> str:
    return _CAMEL_BOUNDARY.sub("_", name).lower()


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class Enum:
    """Enum names in value order; `open_prefix` also admits any other NAME with that prefix."""

    names: tuple[str, ...]
    open_prefix: str = ""

    @property
    def unspecified(self) -> str:
        return self.names[0]


@dataclass(frozen=True)
class Field:
    kind: Kind
    message: Message | None = None
    enum: Enum | None = None
    item: Field | None = None
    presence: bool = False
    output_only: bool = False
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Message:
    name: str
    fields: dict[str, Field]
    aliases: dict[str, str] = field(default_factory=dict)
    lookup: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for snake in self.fields:
            self.lookup[snake] = snake
            self.lookup[snake_to_camel(snake)] = snake
        for alias, target in self.aliases.items():
            self.lookup[alias] = target
            self.lookup[snake_to_camel(alias)] = target


def _enum(prefix: str, *values: str, open_: bool = False) -> Enum:
    return Enum(tuple(f"{prefix}_{v}" for v in ("UNSPECIFIED", *values)), f"{prefix}_" if open_ else "")


STR = Field("str")
BOOL = Field("bool")
INT32 = Field("int32")
TIME = Field("time")
MAP = Field("map")
STRINGS = Field("list", item=STR)
OUT = Field("opaque", output_only=True)


def msg(message: Message) -> Field:
    return Field("msg", message=message)


def repeated(message: Message) -> Field:
    return Field("list", item=msg(message))


def enum(e: Enum) -> Field:
    return Field("enum", enum=e)


INSTALL_STATUS = _enum("RUNNER_INSTALL_STATUS", "PENDING", "PROVISIONING", "READY", "FAILED", "DELETING")
CONNECTION_STATUS = _enum("RUNNER_CONNECTION_STATUS", "CONNECTED", "DISCONNECTED")
RELEASE_CHANNEL = _enum("RELEASE_CHANNEL", "STABLE", "RAPID")
IMAGE_PULL_POLICY = _enum("SANDBOX_IMAGE_PULL_POLICY", "IF_NOT_PRESENT", "ALWAYS")
SERVICE_SCOPE = _enum("RUNNER_DATA_PLANE_SERVICE_SCOPE", "PUBLIC", "PRIVATE")
TRAFFIC_POLICY = _enum("RUNNER_DATA_PLANE_EXTERNAL_TRAFFIC_POLICY", "CLUSTER", "LOCAL")
TENANT_SCOPE = _enum("TENANT_SCOPE", "SAME_USER", "SAME_ORG", "SANDBOX_NETWORK")
STORAGE_MEDIUM = _enum("STORAGE_MEDIUM", "DISK", "MEMORY")
DNS_EGRESS_MODE = _enum("DNS_EGRESS_MODE", "DENY", open_=True)

# --- spec (5.2) -------------------------------------------------------------------------

WINDOW = Message("MaintenanceWindow", {"cron": STR, "duration_seconds": INT32})
EXCLUSION = Message("MaintenanceExclusion", {"start_time": TIME, "end_time": TIME, "reason": STR})
MAINTENANCE = Message("MaintenancePolicy", {"windows": repeated(WINDOW), "exclusions": repeated(EXCLUSION)})
TOLERATION = Message("Toleration", {"key": STR, "operator": STR, "value": STR, "effect": STR})
RESOURCES = Message(
    "ResourceRequirements", {"cpu_request": STR, "memory_request": STR, "cpu_limit": STR, "memory_limit": STR}
)
SCALING = Message(
    "Scaling", {"replicas": INT32, "autoscaling_enabled": BOOL, "min_replicas": INT32, "max_replicas": INT32}
)
OVERRIDES = Message(
    "RunnerDeploymentOverrides",
    {
        "node_selector": MAP,
        "tolerations": repeated(TOLERATION),
        "resources": msg(RESOURCES),
        "annotations": MAP,
        "labels": MAP,
        "env": MAP,
        "args": STRINGS,
        "scaling": msg(SCALING),
        "cpu_runtime_class": STR,
        "gpu_runtime_class": STR,
        # A Kubernetes Affinity object, stored and replaced whole with its keys untouched.
        "affinity": Field("struct"),
    },
)
DATA_PLANE = Message(
    "RunnerDataPlaneConfig",
    {
        "disabled": msg(Message("Disabled", {})),
        "cluster_ip": msg(Message("ClusterIp", {"annotations": MAP})),
        "load_balancer": msg(
            Message(
                "LoadBalancer",
                {
                    "scope": enum(SERVICE_SCOPE),
                    "load_balancer_class": STR,
                    "annotations": MAP,
                    "source_ranges": STRINGS,
                    "external_traffic_policy": enum(TRAFFIC_POLICY),
                    "hostname": STR,
                },
            )
        ),
        "custom": msg(Message("Custom", {"advertised_uri": STR, "service_annotations": MAP})),
    },
)
SPEC = Message(
    "ManagedRunnerSpec",
    {
        "release_channel": enum(RELEASE_CHANNEL),
        "maintenance_policy": msg(MAINTENANCE),
        "overrides": msg(OVERRIDES),
        "enforce_resource_limits": BOOL,
        "volumes": msg(Message("Volumes", {"enabled": BOOL, "csi_driver_allowlist": STRINGS})),
        "tenant_metrics": msg(Message("TenantMetrics", {"enabled": BOOL, "image": STR})),
        "image_pull": msg(Message("ImagePull", {"policy": enum(IMAGE_PULL_POLICY)})),
        "data_plane": msg(DATA_PLANE),
        "allow_privileged_profile_annotations": BOOL,
    },
)

# --- policy (6.2) -----------------------------------------------------------------------

PORT_RANGE = Message(
    "PortRange", {"protocol": Field("str", choices=("TCP", "UDP", "SCTP")), "port": INT32, "end_port": INT32}
)
CIDR_BLOCK = Message("CidrBlock", {"cidr": STR, "except": STRINGS})
SELECTOR = Message("SelectorBlock", {"pod_labels": MAP, "namespace_labels": MAP})
EGRESS_RULE = Message(
    "EgressRule",
    {
        "cidr": msg(CIDR_BLOCK),
        "https_hostname": STR,
        "https_hostname_except": STRINGS,
        "tenant": enum(TENANT_SCOPE),
        "any": BOOL,
        "selector": msg(SELECTOR),
        "ports": repeated(PORT_RANGE),
    },
    aliases={"dns_name": "https_hostname", "dns_name_except": "https_hostname_except"},
)
INGRESS_RULE = Message(
    "IngressRule",
    {"cidr": msg(CIDR_BLOCK), "tenant": enum(TENANT_SCOPE), "any": BOOL, "ports": repeated(PORT_RANGE)},
)
CONSTRAINTS = Message(
    "PolicyConstraints",
    {
        "resources": msg(
            Message(
                "ResourceConstraints",
                {
                    "max_cpu": STR,
                    "max_memory": STR,
                    "min_cpu": STR,
                    "min_memory": STR,
                    "default_cpu": STR,
                    "default_memory": STR,
                    "max_gpu_count": Field("int64", presence=True),
                    "cpu_ceiling": STR,
                    "memory_ceiling": STR,
                    "require_limits": BOOL,
                },
            )
        ),
        "image": msg(Message("ImageConstraints", {"allowed_registries": STRINGS, "allowed_images": STRINGS})),
        "network": msg(
            Message(
                "NetworkConstraints",
                {
                    "allowed_egress": repeated(EGRESS_RULE),
                    "default_egress": repeated(EGRESS_RULE),
                    "deny_https_hostname_rules": BOOL,
                    "dns_egress": enum(DNS_EGRESS_MODE),
                    "allowed_ingress": repeated(INGRESS_RULE),
                    "default_ingress": repeated(INGRESS_RULE),
                },
                aliases={"deny_dns": "deny_https_hostname_rules"},
            )
        ),
        "security": msg(
            Message(
                "SecurityConstraints",
                {
                    "allow_privileged": BOOL,
                    "allowed_capabilities": STRINGS,
                    "allowed_seccomp_profiles": STRINGS,
                    "allowed_runtime_classes": STRINGS,
                    "default_cpu_runtime_class": STR,
                    "default_gpu_runtime_class": STR,
                },
            )
        ),
        "instance": msg(Message("InstanceConstraints", {"allowed_instance_types": STRINGS})),
        "lifecycle": msg(Message("LifecycleConstraints", {"default_lifetime_seconds": INT32})),
        "metadata": msg(
            Message(
                "MetadataConstraints", {"denied_annotation_prefixes": STRINGS, "max_annotation_count": INT32}
            )
        ),
        "volumes": msg(
            Message(
                "VolumeConstraints",
                {"allowed_media": Field("list", item=enum(STORAGE_MEDIUM)), "max_size": STR},
            )
        ),
    },
)
POLICY = Message(
    "Policy",
    {
        "display_name": STR,
        "base": Field("struct"),
        "constraints": msg(CONSTRAINTS),
        "control_plane_access": msg(
            Message(
                "ControlPlaneAccessPolicy",
                {"source_ip_allowlist": msg(Message("SourceIpAllowlist", {"cidrs": STRINGS}))},
            )
        ),
    },
)

# --- the resource (5.1) -----------------------------------------------------------------

IDENTITY = Message(
    "RunnerIdentity",
    {
        "runner_id": STR,
        "runner_group_id": STR,
        "zone": STR,
        "cluster_id": STR,
        "cluster_name": Field("str", output_only=True),
    },
)
MANAGED_RUNNER = Message(
    "ManagedRunner",
    {
        "identity": msg(IDENTITY),
        "display_name": STR,
        "spec": msg(SPEC),
        "policy": msg(POLICY),
        "etag": STR,
        "install_status": OUT,
        "connection_status": OUT,
        "active_config_version": OUT,
        "active_revision": OUT,
        "target_revision": OUT,
        "update_available": OUT,
        "rollout_in_progress": OUT,
        "deployment_spec": OUT,
        "install_error": OUT,
        "data_plane_status": OUT,
        "create_time": OUT,
        "update_time": OUT,
        "last_heartbeat_time": OUT,
        "profile_bindings": Field("list", item=Field("opaque")),
    },
)


# --- codec ------------------------------------------------------------------------------


@dataclass
class Decoder:
    """Collects violations while decoding; `lenient` drops unknown fields instead of refusing them."""

    lenient: bool = False
    violations: list[Violation] = field(default_factory=list)

    def fail(self, path: str, description: str) -> None:
        self.violations.append(Violation(path, description))

    def message(self, message: Message, data: Any, path: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail(path, f"expected a JSON object for {message.name}")
            return {}
        out: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for key, value in data.items():
            snake = message.lookup.get(key)
            if snake is None:
                if not self.lenient:
                    self.fail(_join(path, key), f"unknown field {key!r} in {message.name}")
                continue
            if snake in spelled:
                self.fail(_join(path, snake), f"field given twice ({spelled[snake]!r} and {key!r})")
                continue
            spelled[snake] = key
            spec = message.fields[snake]
            if value is None or spec.output_only:
                continue
            decoded = self.value(spec, value, _join(path, snake))
            if decoded is not _ABSENT:
                out[snake] = decoded
        return out

    def value(self, spec: Field, value: Any, path: str) -> Any:
        match spec.kind:
            case "str":
                return self._string(spec, value, path)
            case "bool":
                if not isinstance(value, bool):
                    self.fail(path, "expected a boolean")
                    return _ABSENT
                return value or _ABSENT
            case "int32" | "int64":
                number = self._integer(value, path, INT32_MAX if spec.kind == "int32" else INT64_MAX)
                if number is None:
                    return _ABSENT
                return number if (number or spec.presence) else _ABSENT
            case "enum":
                assert spec.enum is not None
                name = self._enum(spec.enum, value, path)
                return _ABSENT if name is None or name == spec.enum.unspecified else name
            case "time":
                return self._time(value, path)
            case "msg":
                assert spec.message is not None
                return self.message(spec.message, value, path)
            case "list":
                return self._list(spec, value, path)
            case "map":
                if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                    self.fail(path, "expected an object of string values")
                    return _ABSENT
                return dict(value) or _ABSENT
            case "struct" | "opaque":
                if spec.kind == "struct" and not isinstance(value, dict):
                    self.fail(path, "expected a JSON object")
                    return _ABSENT
                return value
        raise AssertionError(spec.kind)  # pragma: no cover

    def _string(self, spec: Field, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            self.fail(path, "expected a string")
            return _ABSENT
        if spec.choices and value and value not in spec.choices:
            self.fail(path, f"must be one of {', '.join(spec.choices)}")
        return value or _ABSENT

    def _time(self, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            self.fail(path, "expected an RFC 3339 timestamp string")
            return _ABSENT
        stamp = parse_time(value)
        if stamp is None:
            self.fail(path, f"invalid RFC 3339 timestamp {value!r}")
            return _ABSENT
        return format_time(stamp)

    def _list(self, spec: Field, value: Any, path: str) -> Any:
        assert spec.item is not None
        if not isinstance(value, list):
            self.fail(path, "expected a JSON array")
            return _ABSENT
        items = []
        for i, item in enumerate(value):
            decoded = self.value(spec.item, item, f"{path}[{i}]")
            if item is None:
                self.fail(f"{path}[{i}]", "null list element")
            elif decoded is _ABSENT:
                # Default-valued scalars are still list members.
                items.append(_zero(spec.item))
            else:
                items.append(decoded)
        return items or _ABSENT

    def _integer(self, value: Any, path: str, limit: int) -> int | None:
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            number = int(value.strip())
        if number is None:
            self.fail(path, "expected an integer (number or numeric string)")
            return None
        if not -limit - 1 <= number <= limit:
            self.fail(path, "integer out of range")
            return None
        return number

    def _enum(self, e: Enum, value: Any, path: str) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < len(e.names):
                return e.names[value]
        elif isinstance(value, str):
            if value in e.names:
                return value
            if e.open_prefix and re.fullmatch(re.escape(e.open_prefix) + r"[A-Z0-9_]+", value):
                return value
        self.fail(path, f"unknown enum value {value!r}; expected one of {', '.join(e.names)}")
        return None


class _Absent:
    pass


_ABSENT: Any = _Absent()


def _zero(spec: Field) -> Any:
    if spec.enum is not None:
        return spec.enum.unspecified
    return {"str": "", "bool": False, "int32": 0, "int64": 0}.get(spec.kind, "")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def encode(message: Message, data: dict[str, Any]) -> dict[str, Any]:
    """Canonical snake_case dict -> camelCase wire JSON (int64 as strings)."""
    out: dict[str, Any] = {}
    for snake, value in data.items():
        spec = message.fields.get(snake)
        if spec is None:
            continue
        out[snake_to_camel(snake)] = _encode_value(spec, value)
    return out


def _encode_value(spec: Field, value: Any) -> Any:
    if spec.kind == "msg":
        assert spec.message is not None
        return encode(spec.message, value)
    if spec.kind == "int64":
        return str(value)
    if spec.kind == "list":
        assert spec.item is not None
        return [_encode_value(spec.item, v) for v in value]
    return value


def parse_time(text: str) -> datetime | None:
    if not re.fullmatch(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)", text):
        return None
    core = re.sub(r"(\.\d{6})\d+", r"\1", text.upper().replace("Z", "+00:00"))
    try:
        return datetime.fromisoformat(core).astimezone(UTC)
    except ValueError:
        return None


def format_time(stamp: datetime | float) -> str:
    """RFC 3339 UTC with a Z suffix and 0, 3 or 6 fractional digits, as proto JSON renders it."""
    moment = stamp if isinstance(stamp, datetime) else datetime.fromtimestamp(stamp, UTC)
    micros = moment.microsecond
    base = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if micros == 0:
        return base + "Z"
    if micros % 1000 == 0:
        return f"{base}.{micros // 1000:03d}Z"
    return f"{base}.{micros:06d}Z"
