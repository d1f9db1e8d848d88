"""Semantic checks of a decoded runner, spec and policy (contract 4.1, 4.2, 5.2, 6.2, 6.3).

Pure functions over canonical snake_case dicts; each returns field violations, never raises.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from runner_operator.simulator.errors import Violation
from runner_operator.simulator.schema import parse_time

RUNNER_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-LW#]+$")
MAX_LIFETIME_SECONDS = 2_592_000
MAX_ALLOWLIST = 256
FORBIDDEN_BASE_KEYS = ("affinity", "securityContext", "runtimeClassName", "initContainers")
TOLERATION_OPERATORS = ("", "Equal", "Exists")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
LEGACY_MESSAGE = "expected a policy and no legacy configuration"

Violations = list[Violation]


def quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity as a Decimal, or None when it does not parse."""
    match = _QUANTITY.match(text)
    if not match:
        return None
    sign, number, exponent, suffix = match.groups()
    try:
        value = Decimal(number)
        if exponent:
            value *= Decimal(10) ** int(exponent[1:])
        if suffix:
            value *= _SUFFIX[suffix]
    except (InvalidOperation, ValueError):
        return None
    return -value if sign == "-" else value


def check_identity(identity: dict[str, Any], path: str, reject_uppercase_zone: bool) -> Violations:
    out: Violations = []
    runner_id = identity.get("runner_id", "")
    if not runner_id:
        out.append(Violation(f"{path}.runner_id", "required"))
    elif not RUNNER_ID.match(runner_id):
        out.append(
            Violation(
                f"{path}.runner_id", "must be a lowercase RFC 1123 label of 1-63 characters ([a-z0-9-])"
            )
        )
    zone = identity.get("zone", "")
    if not zone:
        out.append(Violation(f"{path}.zone", "required"))
    elif reject_uppercase_zone and zone != zone.lower():
        out.append(Violation(f"{path}.zone", "must be lowercase"))
    if not identity.get("cluster_id"):
        out.append(Violation(f"{path}.cluster_id", "required"))
    return out


def check_legacy(runner: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    if runner.get("profile_bindings"):
        out.append(Violation(f"{path}.profile_bindings", LEGACY_MESSAGE))
    if runner.get("spec", {}).get("allow_privileged_profile_annotations"):
        out.append(Violation(f"{path}.spec.allow_privileged_profile_annotations", LEGACY_MESSAGE))
    return out


# --- spec ---------------------------------------------------------------------------------


def check_spec(spec: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    maintenance = spec.get("maintenance_policy", {})
    for i, window in enumerate(maintenance.get("windows", [])):
        here = f"{path}.maintenance_policy.windows[{i}]"
        cron = window.get("cron", "").strip()
        if not cron:
            out.append(Violation(f"{here}.cron", "required"))
        elif len(cron.split()) != 5 or not all(_CRON_FIELD.match(f) for f in cron.split()):
            out.append(Violation(f"{here}.cron", "must be a five-field cron expression"))
        duration = window.get("duration_seconds", 0)
        if not 60 <= duration <= 604_800:
            out.append(Violation(f"{here}.duration_seconds", "must be between 60 and 604800"))
    for i, exclusion in enumerate(maintenance.get("exclusions", [])):
        here = f"{path}.maintenance_policy.exclusions[{i}]"
        start, end = exclusion.get("start_time"), exclusion.get("end_time")
        if not start:
            out.append(Violation(f"{here}.start_time", "required"))
        if not end:
            out.append(Violation(f"{here}.end_time", "required"))
        if start and end:
            begin, finish = parse_time(start), parse_time(end)
            if begin and finish and finish <= begin:
                out.append(Violation(f"{here}.end_time", "must be after start_time"))
    out += _check_overrides(spec.get("overrides", {}), f"{path}.overrides")
    for i, driver in enumerate(spec.get("volumes", {}).get("csi_driver_allowlist", [])):
        if not driver:
            out.append(Violation(f"{path}.volumes.csi_driver_allowlist[{i}]", "must not be empty"))
    if "data_plane" in spec:
        out += _check_data_plane(spec["data_plane"], f"{path}.data_plane")
    return out


def _check_overrides(overrides: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    for i, toleration in enumerate(overrides.get("tolerations", [])):
        if toleration.get("operator", "") not in TOLERATION_OPERATORS:
            out.append(Violation(f"{path}.tolerations[{i}].operator", "must be Equal or Exists"))
        if toleration.get("effect", "") not in TOLERATION_EFFECTS:
            out.append(
                Violation(
                    f"{path}.tolerations[{i}].effect",
                    "must be empty, NoSchedule, PreferNoSchedule or NoExecute",
                )
            )
    for name, value in overrides.get("resources", {}).items():
        out += _check_quantity(value, f"{path}.resources.{name}")
    scaling = overrides.get("scaling", {})
    for name in ("replicas", "min_replicas", "max_replicas"):
        if scaling.get(name, 0) < 0:
            out.append(Violation(f"{path}.scaling.{name}", "must not be negative"))
    low, high = scaling.get("min_replicas", 0), scaling.get("max_replicas", 0)
    if high != 0 and low > high:
        out.append(Violation(f"{path}.scaling.min_replicas", "must not exceed max_replicas"))
    for name in ("cpu_runtime_class", "gpu_runtime_class"):
        value = overrides.get(name)
        if value and not _is_dns_name(value):
            out.append(Violation(f"{path}.{name}", "must be a valid RuntimeClass name"))
    return out


def _check_data_plane(data_plane: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    chosen = [k for k in ("disabled", "cluster_ip", "load_balancer", "custom") if k in data_plane]
    if len(chosen) != 1:
        out.append(
            Violation(path, "exactly one of disabled, cluster_ip, load_balancer or custom must be set")
        )
    custom = data_plane.get("custom")
    if custom is not None:
        uri = custom.get("advertised_uri", "")
        if not uri:
            out.append(Violation(f"{path}.custom.advertised_uri", "required"))
        else:
            parts = urlsplit(uri)
            if not parts.scheme or not parts.netloc:
                out.append(Violation(f"{path}.custom.advertised_uri", "must be an absolute URI"))
    balancer = data_plane.get("load_balancer")
    if balancer is not None:
        for i, cidr in enumerate(balancer.get("source_ranges", [])):
            out += _check_cidr(cidr, f"{path}.load_balancer.source_ranges[{i}]")
        hostname = balancer.get("hostname")
        if hostname and not _is_dns_name(hostname):
            out.append(Violation(f"{path}.load_balancer.hostname", "must be a valid DNS name"))
    return out


# --- policy -------------------------------------------------------------------------------


def check_policy(policy: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    if "base" in policy:
        out += _check_base(policy["base"], f"{path}.base")
    constraints = policy.get("constraints", {})
    here = f"{path}.constraints"
    out += _check_resources(constraints.get("resources", {}), f"{here}.resources")
    network = constraints.get("network", {})
    for group in ("allowed_egress", "default_egress"):
        for i, rule in enumerate(network.get(group, [])):
            out += _check_egress(rule, f"{here}.network.{group}[{i}]", allowed=group == "allowed_egress")
    for group in ("allowed_ingress", "default_ingress"):
        for i, rule in enumerate(network.get(group, [])):
            out += _check_ingress(rule, f"{here}.network.{group}[{i}]")
    security = constraints.get("security", {})
    allowed = security.get("allowed_runtime_classes", [])
    for name in ("default_cpu_runtime_class", "default_gpu_runtime_class"):
        value = security.get(name)
        if value and value not in allowed:
            out.append(
                Violation(f"{here}.security.{name}", "must be listed in a non-empty allowed_runtime_classes")
            )
    lifetime = constraints.get("lifecycle", {}).get("default_lifetime_seconds", 0)
    if not 0 <= lifetime <= MAX_LIFETIME_SECONDS:
        out.append(
            Violation(
                f"{here}.lifecycle.default_lifetime_seconds", f"must be between 0 and {MAX_LIFETIME_SECONDS}"
            )
        )
    if constraints.get("metadata", {}).get("max_annotation_count", 0) < 0:
        out.append(Violation(f"{here}.metadata.max_annotation_count", "must not be negative"))
    volumes = constraints.get("volumes", {})
    if "max_size" in volumes:
        out += _check_quantity(volumes["max_size"], f"{here}.volumes.max_size")
    allowlist = policy.get("control_plane_access", {}).get("source_ip_allowlist")
    if allowlist is not None:
        out += _check_allowlist(
            allowlist.get("cidrs", []), f"{path}.control_plane_access.source_ip_allowlist.cidrs"
        )
    return out


def _check_base(base: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    pod = base.get("spec")
    scopes = [(path, base)] + ([(f"{path}.spec", pod)] if isinstance(pod, dict) else [])
    for where, scope in scopes:
        for key in FORBIDDEN_BASE_KEYS:
            if key in scope:
                out.append(Violation(f"{where}.{key}", f"{key} may not be set in policy.base"))
        for kind in ("containers", "ephemeralContainers"):  # the contract: "pod or any container"
            containers = scope.get(kind)
            for i, container in enumerate(containers if isinstance(containers, list) else []):
                if isinstance(container, dict) and "securityContext" in container:
                    out.append(
                        Violation(
                            f"{where}.{kind}[{i}].securityContext",
                            "securityContext may not be set in policy.base",
                        )
                    )
    return out


def _check_resources(resources: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    values: dict[str, Decimal] = {}
    for name, value in resources.items():
        if name in ("max_gpu_count", "require_limits"):
            continue
        found = _check_quantity(value, f"{path}.{name}")
        out += found
        if not found:
            parsed = quantity(value)
            assert parsed is not None
            values[name] = parsed
    for kind in ("cpu", "memory"):
        low, default, high = (
            values.get(f"min_{kind}"),
            values.get(f"default_{kind}"),
            values.get(f"max_{kind}"),
        )
        ceiling = values.get(f"{kind}_ceiling")
        if low is not None and default is not None and low > default:
            out.append(Violation(f"{path}.default_{kind}", f"must not be below min_{kind}"))
        if default is not None and high is not None and default > high:
            out.append(Violation(f"{path}.default_{kind}", f"must not exceed max_{kind}"))
        if low is not None and high is not None and low > high:
            out.append(Violation(f"{path}.min_{kind}", f"must not exceed max_{kind}"))
        if ceiling is not None and high is not None and ceiling < high:
            out.append(Violation(f"{path}.{kind}_ceiling", f"must not be below max_{kind}"))
    if resources.get("max_gpu_count", 0) < 0:
        out.append(Violation(f"{path}.max_gpu_count", "must not be negative"))
    return out


def _check_egress(rule: dict[str, Any], path: str, allowed: bool) -> Violations:
    out: Violations = []
    destinations = [k for k in ("cidr", "https_hostname", "tenant", "any", "selector") if k in rule]
    if len(destinations) != 1:
        out.append(
            Violation(path, "exactly one of cidr, https_hostname, tenant, any or selector must be set")
        )
    if "cidr" in rule:
        out += _check_cidr_block(rule["cidr"], f"{path}.cidr")
    hostname = rule.get("https_hostname")
    if hostname is not None:
        if not allowed:
            out.append(
                Violation(f"{path}.https_hostname", "hostname destinations are not allowed in default_egress")
            )
        else:
            out += _check_hostname(hostname, f"{path}.https_hostname", star_ok=True)
        ports = rule.get("ports", [])
        if ports and not (
            len(ports) == 1
            and ports[0].get("protocol", "TCP") == "TCP"
            and ports[0].get("port") == 443
            and ports[0].get("end_port", 0) in (0, 443)
        ):
            out.append(Violation(f"{path}.ports", "hostname rules allow only TCP port 443"))
    for i, name in enumerate(rule.get("https_hostname_except", [])):
        out += _check_hostname(name, f"{path}.https_hostname_except[{i}]", star_ok=False)
    if "selector" in rule and not rule["selector"].get("pod_labels"):
        out.append(Violation(f"{path}.selector.pod_labels", "at least one pod label is required"))
    out += _check_ports(rule.get("ports", []), f"{path}.ports")
    return out


def _check_ingress(rule: dict[str, Any], path: str) -> Violations:
    out: Violations = []
    sources = [k for k in ("cidr", "tenant", "any") if k in rule]
    if len(sources) != 1:
        out.append(Violation(path, "exactly one of cidr, tenant or any must be set"))
    if "cidr" in rule:
        out += _check_cidr_block(rule["cidr"], f"{path}.cidr")
    if rule.get("tenant") == "TENANT_SCOPE_SANDBOX_NETWORK":
        out.append(Violation(f"{path}.tenant", "TENANT_SCOPE_SANDBOX_NETWORK is not supported for ingress"))
    out += _check_ports(rule.get("ports", []), f"{path}.ports")
    return out


def _check_ports(ports: list[dict[str, Any]], path: str) -> Violations:
    out: Violations = []
    for i, port_range in enumerate(ports):
        port, end = port_range.get("port", 0), port_range.get("end_port", 0)
        if not 1 <= port <= 65_535:
            out.append(Violation(f"{path}[{i}].port", "must be between 1 and 65535"))
        if not 0 <= end <= 65_535:
            out.append(Violation(f"{path}[{i}].end_port", "must be between 0 and 65535"))
        elif end != 0 and end < port:
            out.append(Violation(f"{path}[{i}].end_port", "must not be below port"))
    return out


def _check_hostname(name: str, path: str, star_ok: bool) -> Violations:
    if name == "*":
        return [] if star_ok else [Violation(path, "'*' is only allowed in allowed_egress")]
    labels = name.lower().split(".")
    if labels[0] == "*":
        labels = labels[1:]
        if len(labels) < 2:
            return [Violation(path, "a wildcard needs a domain of at least two labels")]
    if any("*" in label for label in labels):
        return [Violation(path, "only one leftmost '*' label is allowed")]
    if not _is_dns_name(".".join(labels)):
        return [Violation(path, "must be a valid hostname")]
    return []


def _is_dns_name(name: str) -> bool:
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.lower().split("."))


def _check_quantity(value: str, path: str) -> Violations:
    parsed = quantity(value)
    if parsed is None:
        return [Violation(path, f"invalid quantity {value!r}")]
    if parsed < 0:
        return [Violation(path, "must not be negative")]
    return []


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None
    return net if str(net) == text and "/" in text else None


def _check_cidr(text: str, path: str) -> Violations:
    if _network(text) is None:
        return [Violation(path, f"{text!r} is not a canonical CIDR prefix")]
    return []


def _check_cidr_block(block: dict[str, Any], path: str) -> Violations:
    text = block.get("cidr", "")
    if not text:
        return [Violation(f"{path}.cidr", "required")]
    net = _network(text)
    if net is None:
        return [Violation(f"{path}.cidr", f"{text!r} is not a canonical CIDR prefix")]
    out: Violations = []
    for i, carved in enumerate(block.get("except", [])):
        inner = _network(carved)
        if inner is None:
            out.append(Violation(f"{path}.except[{i}]", f"{carved!r} is not a canonical CIDR prefix"))
        elif inner.version != net.version or not inner.subnet_of(net):  # type: ignore[arg-type]
            out.append(Violation(f"{path}.except[{i}]", f"must lie inside {text}"))
    return out


def _check_allowlist(cidrs: list[str], path: str) -> Violations:
    out: Violations = []
    if len(cidrs) > MAX_ALLOWLIST:
        out.append(Violation(path, f"at most {MAX_ALLOWLIST} entries"))
    nets: list[tuple[int, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for i, text in enumerate(cidrs):
        net = _network(text)
        if net is None:
            out.append(Violation(f"{path}[{i}]", f"{text!r} is not a canonical CIDR prefix"))
            continue
        if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped is not None:
            out.append(Violation(f"{path}[{i}]", "IPv4-mapped IPv6 prefixes are not allowed"))
            continue
        nets.append((i, net))
    for i, net in nets:
        for j, other in nets:
            if i != j and net.version == other.version and net.subnet_of(other) and (net != other or j < i):  # type: ignore[arg-type]
                out.append(Violation(f"{path}[{i}]", f"{net} is redundant with {other}"))
                break
    return out
