"""Translate a ManagedRunner's spec into the API's ManagedRunner body: the runner the user asked for.

Pure: Secret values for `valueFrom.secretKeyRef` env entries are resolved by the caller and passed
in. The shapes that differ from the API (env as a Kubernetes list, `dataPlane.disabled: true`,
`maxGpuCount` as an integer, flattened identity) are converted here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner_operator import resource
from runner_operator.cloud.models import CloudRunner, parse_runner

SecretValues = Mapping[tuple[str, str], str]
"""(secret name, key) -> value, for every env entry that references a Secret."""

RUNNER_SPEC_FIELDS = (
    "releaseChannel",
    "maintenancePolicy",
    "overrides",
    "enforceResourceLimits",
    "volumes",
    "tenantMetrics",
    "imagePull",
    "dataPlane",
)


class MissingSecretValue(KeyError):
    """An env entry references a Secret key that was not resolved."""


def desired_runner(
    spec: resource.ManagedRunnerSpec, secrets: SecretValues | None = None, *, lenient: bool = False
) -> CloudRunner:
    """The API body for this spec, zone lower-cased as the API stores it.

    `lenient` leaves unresolved Secret values empty: deletion needs only the identity, and env Secrets
    may be gone with the namespace by then.
    """
    # exclude_unset: send what the user wrote, not model defaults (empty lists would look like changes).
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)
    identity = {
        "runnerId": spec.runner_id,
        "zone": spec.zone.lower(),
        "clusterId": spec.cluster_id,
    }
    if spec.runner_group_id:
        identity["runnerGroupId"] = spec.runner_group_id
    body: dict[str, Any] = {"identity": identity, "policy": raw["policy"]}
    if spec.display_name is not None:
        body["displayName"] = spec.display_name
    runner_spec = {name: raw[name] for name in RUNNER_SPEC_FIELDS if name in raw}
    if spec.overrides is not None:
        runner_spec["overrides"] = _overrides(raw["overrides"], spec.overrides, secrets or {}, lenient)
    if spec.data_plane is not None and spec.data_plane.disabled:
        runner_spec["dataPlane"] = {"disabled": {}}
    if runner_spec:
        body["spec"] = runner_spec
    return parse_runner(body)


def _overrides(
    raw: dict[str, Any], overrides: resource.Overrides, secrets: SecretValues, lenient: bool
) -> dict[str, Any]:
    out = dict(raw)
    if overrides.env:
        env: dict[str, str] = {}
        for var in overrides.env:
            if var.value_from is None:
                env[var.name] = var.value or ""
                continue
            ref = var.value_from.secret_key_ref
            try:
                env[var.name] = secrets[(ref.name, ref.key)]
            except KeyError:
                if lenient:
                    env[var.name] = ""
                    continue
                raise MissingSecretValue(f"env {var.name}: Secret {ref.name!r} key {ref.key!r}") from None
        out["env"] = env
    else:
        out.pop("env", None)
    return out
