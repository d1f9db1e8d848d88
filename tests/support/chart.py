"""The chart as a user sees it in `helm template` output: render it, find objects, read and edit its RBAC.

Shared by the unit tier (tests/unit/test_chart.py, test_alerts.py: render, lint, schema) and the e2e
tier (tests/e2e/test_packaging.py: apply, RBAC proof); it imports neither. Nothing here knows the
chart's internals beyond that output.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.testenv.tools import tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "managed-runner-operator"
BIN_DIR = ROOT / "tests" / "testenv" / "bin"
RBAC_KINDS = ("ClusterRole", "Role")

# Every rule the chart grants, as Grant.id; the e2e suite removes each in turn and expects a
# permission error, and a unit test keeps these lists equal to what the chart renders.
CLUSTER_GRANTS = [
    "cluster:customresourcedefinitions:list,watch",
    "cluster:managedrunners:list,watch,patch",
    "cluster:managedrunners/status:patch",
    "cluster:events:create",
    "cluster:secrets:get",
    "cluster:secrets:patch",
    "ns:leases:create",
    "ns:leases:list",
    "ns-named:leases:get,update",
]
NAMESPACED_GRANTS = [
    "cluster:customresourcedefinitions:list,watch",
    "cluster:namespaces:list,watch",
    "ns:managedrunners:list,watch,patch",
    "ns:managedrunners/status:patch",
    "ns:events:create",
    "ns:secrets:get",
    "ns:secrets:patch",
    "ns-named:secrets:get",
    "ns:leases:create",
    "ns:leases:list",
    "ns-named:leases:get,update",
]
# Value sets that `helm lint`, `helm template` and the API server must all accept.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"], "credentials": {"existingSecret": "cw-api"}},
    "existing-secret": {"credentials": {"existingSecret": "coreweave-api", "key": "apiToken"}},
    "token-created": {"credentials": {"token": "CW-SECRET-example"}},
    "metrics-on": {
        "metrics": {
            "enabled": True,
            "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
            "prometheusRule": {"enabled": True, "labels": {"release": "kps"}, "stalledFor": "30m"},
            "grafanaDashboard": {"enabled": True},
        }
    },
    "secret-namespaces": {
        "rbac": {"secretNamespaces": ["team-a"]},
        "credentials": {"existingSecret": "coreweave-api"},
    },
    "tenancy": {
        "credentials": {
            "existingSecret": "coreweave-api",
            "namespaces": ["platform", "team-*"],
            "namespaceSelector": "coreweave.com/default-credentials in (yes)",
        },
    },
    "secrets-in-every-namespace": {
        "rbac": {"secretsInEveryNamespace": True},
        "credentials": {"existingSecret": "coreweave-api", "namespaces": ["*"]},
    },
    "subchart-global": {"global": {"imageRegistry": "registry.example.com", "storageClass": "fast"}},
    "no-user-roles": {"rbac": {"aggregateToDefaultRoles": False}},
    "tuned": {
        "image": {"digest": "sha256:" + "a" * 64},
        "config": {"fastInterval": 0.5, "verbose": True, "jsonLogs": True, "retryBudget": 5},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}],
        "extraArgs": ["--log-level=debug"],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "managed-runner-operator"}},
            }
        ],
        "fullnameOverride": "mro",
        "serviceAccount": {"annotations": {"example.com/role": "operator"}},
    },
}

# Cluster-wide mode with every rule it can grant (the opt-in Secrets rule included), as proved.
CLUSTER_PROOF_VALUES: dict[str, Any] = {
    "rbac": {"secretsInEveryNamespace": True},
    "credentials": {"existingSecret": "api"},
}
# Namespaced mode with the default token Secret outside the watched namespaces (its own Role).
NAMESPACED_PROOF_VALUES = {"watchNamespaces": ["team-a"], "credentials": {"existingSecret": "api"}}

# docs/install.md's way out for a ManagedRunner whose operator is gone (a test runs it).
FINALIZER_WAY_OUT = (
    'kubectl patch managedrunner <name> -n <namespace> --type=merge -p \'{"metadata":{"finalizers":null}}\''
)


def helm_binary() -> str:
    """The helm built by tests/testenv/build.sh (or one on PATH); skip locally, fail in CI, without it."""
    return tool("helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def helm_noise_removed(stderr: str) -> str:
    """stderr without helm's note that it followed the CRD symlink (expected: see test_chart)."""
    return "\n".join(line for line in stderr.splitlines() if "found symbolic link in path" not in line)


def values_file(values: Mapping[str, Any]) -> Path:
    """Write values to a temporary file (YAML is a superset of JSON) and return its path."""
    handle, name = tempfile.mkstemp(prefix="values-", suffix=".yaml")
    with os.fdopen(handle, "w") as out:
        json.dump(values, out)
    return Path(name)


def template(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "runner-operator",
    namespace: str = "runner-operator",
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    path = values_file(values or {})
    try:
        return helm(
            "template", release, str(CHART), "--namespace", namespace, "--values", str(path), check=check
        )
    finally:
        path.unlink()


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "runner-operator",
    namespace: str = "runner-operator",
) -> list[dict[str, Any]]:
    """`helm template` output as a list of objects (empty documents dropped)."""
    return documents(template(values, release=release, namespace=namespace).stdout)


def render_for_cluster(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "runner-operator",
    namespace: str = "runner-operator",
) -> list[dict[str, Any]]:
    """`render` without the CRD, for applying to the test cluster: the suite's `crd` fixture owns it,
    and a test that deletes what it applied must never delete the CRD (and every ManagedRunner)."""
    return render({**(values or {}), "crds": {"enabled": False}}, release=release, namespace=namespace)


def documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents, parsed by libyaml (the pure-Python parser takes ~0.7 s on the CRD)."""
    return [doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc]


def find(docs: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        dict(doc) for doc in docs if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]


def one(docs: Sequence[Mapping[str, Any]], kind: str) -> dict[str, Any]:
    found = find(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@dataclass(frozen=True)
class Grant:
    """One rule of one role: the unit the RBAC proof removes."""

    kind: str  # ClusterRole or Role
    role: str  # the role's name
    resources: tuple[str, ...]  # e.g. ("managedrunners/status",)
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        scope = "cluster" if self.kind == "ClusterRole" else "ns"
        if self.resource_names:
            scope += "-named"
        return f"{scope}:{','.join(self.resources)}:{','.join(self.verbs)}"

    def matches(self, role: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
        return (role["kind"], role["metadata"]["name"]) == (self.kind, self.role) and self == _grant(
            role, rule
        )


def _grant(role: Mapping[str, Any], rule: Mapping[str, Any]) -> Grant:
    return Grant(
        role["kind"],
        role["metadata"]["name"],
        tuple(rule["resources"]),
        tuple(rule["verbs"]),
        tuple(rule.get("resourceNames") or ()),
    )


def user_role(doc: Mapping[str, Any]) -> bool:
    """A ClusterRole for people (aggregated into view/edit/admin), never bound to the operator."""
    labels = (doc.get("metadata") or {}).get("labels") or {}
    return any(key.startswith("rbac.authorization.k8s.io/aggregate-to-") for key in labels)


def grants(docs: Sequence[Mapping[str, Any]]) -> list[Grant]:
    """Every rule the chart grants the operator; Roles repeated per namespace are listed once."""
    seen: dict[Grant, None] = {}
    for doc in docs:
        if doc["kind"] in RBAC_KINDS and not user_role(doc):
            for rule in doc.get("rules") or []:
                seen.setdefault(_grant(doc, rule), None)
    return list(seen)


def without(docs: Sequence[Mapping[str, Any]], grant: Grant) -> list[dict[str, Any]]:
    """A copy of the rendered chart with one rule removed from every copy of its role."""
    out: list[dict[str, Any]] = []
    removed = 0
    for original in docs:
        doc = copy.deepcopy(dict(original))
        if doc["kind"] in RBAC_KINDS:
            kept = [rule for rule in doc.get("rules") or [] if not grant.matches(doc, rule)]
            removed += len(doc.get("rules") or []) - len(kept)
            doc["rules"] = kept
        out.append(doc)
    assert removed, f"{grant} not found in the rendered chart"
    return out


def yaml_stream(docs: Sequence[Mapping[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(dict(doc), sort_keys=False) for doc in docs)
