"""Pure translation of an API runner back into a ManagedRunner manifest: the inverse of desired.py.

Env values may be secret, so they never go into the manifest: each becomes a `secretKeyRef` to a
Secret `<runnerId>-env`, written separately for the user to create and keep out of Git.
"""

from __future__ import annotations

import re
from typing import Any

from runner_operator import resource
from runner_operator.cloud.models import CloudRunner, to_wire
from runner_operator.desired import RUNNER_SPEC_FIELDS

HEADER = (
    "# Exported from the CoreWeave API by `runner-operator export`. Apply it to adopt the runner\n"
    "# (spec.adopt: true): the operator then manages it without recreating it.\n"
)
SECRET_HEADER = (
    "# Env values of the runner, referenced by its exported manifest. Do NOT commit this file:\n"
    "# create the Secret (kubectl apply -f) or move the values into your secret manager.\n"
)
_KEY = re.compile(r"[^-._a-zA-Z0-9]")


def to_manifest(
    runner: CloudRunner, *, namespace: str, credentials_secret: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(ManagedRunner manifest, env Secret manifest or None) for one runner."""
    wire = to_wire(runner, request=True)
    identity = wire.get("identity") or {}
    runner_id = str(identity.get("runnerId"))
    spec: dict[str, Any] = {
        "runnerId": runner_id,
        "clusterId": identity.get("clusterId"),
        "zone": str(identity.get("zone") or "").lower(),
    }
    if identity.get("runnerGroupId") and identity["runnerGroupId"] != "default":
        spec["runnerGroupId"] = identity["runnerGroupId"]
    if wire.get("displayName"):
        spec["displayName"] = wire["displayName"]
    runner_spec = wire.get("spec") or {}
    secret: dict[str, Any] | None = None
    for name in RUNNER_SPEC_FIELDS:
        if name in runner_spec:
            spec[name] = runner_spec[name]
    if isinstance(spec.get("dataPlane"), dict) and "disabled" in spec["dataPlane"]:
        spec["dataPlane"] = {"disabled": True}
    overrides = spec.get("overrides")
    if isinstance(overrides, dict) and isinstance(overrides.get("env"), dict):
        secret_name = f"{runner_id}-env"
        values = overrides["env"]
        overrides["env"] = [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": _secret_key(key)}}}
            for key in sorted(values)
        ]
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name, "namespace": namespace},
            "type": "Opaque",
            "stringData": {_secret_key(key): values[key] for key in sorted(values)},
        }
    spec["policy"] = _policy(wire.get("policy"))
    spec["credentials"] = {"secretRef": {"name": credentials_secret}}
    spec["adopt"] = True
    manifest = {
        "apiVersion": f"{resource.GROUP}/{resource.VERSION}",
        "kind": resource.KIND,
        "metadata": {"name": runner_id, "namespace": namespace},
        "spec": spec,
    }
    resource.ManagedRunnerSpec.model_validate(spec)  # the export must be a valid resource
    return manifest, secret


def _policy(policy: Any) -> dict[str, Any]:
    """The policy as the CRD spells it (maxGpuCount is an integer there, a string on the wire)."""
    if not isinstance(policy, dict):
        return {}
    resources = (policy.get("constraints") or {}).get("resources")
    if isinstance(resources, dict) and "maxGpuCount" in resources:
        resources["maxGpuCount"] = int(resources["maxGpuCount"])
    return policy


def _secret_key(name: str) -> str:
    return _KEY.sub("_", name) or "value"
