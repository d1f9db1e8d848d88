"""The spec-to-API translation, one row per conversion: the id says the behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from runner_operator import desired, resource
from runner_operator.cloud.models import to_wire

CLUSTER = "3f6c1d2e-8b4a-4c1f-9e7d-2a5b6c7d8e9f"
IDENTITY = {"runnerId": "dev", "clusterId": CLUSTER, "zone": "US-East-04A"}
WIRE_IDENTITY = {"runnerId": "dev", "zone": "us-east-04a", "clusterId": CLUSTER}
SECRET_ENV = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "app", "key": "token"}}}


def spec(**fields: Any) -> resource.ManagedRunnerSpec:
    return resource.ManagedRunnerSpec.model_validate({**IDENTITY, "policy": {}, **fields})


def wire(**fields: Any) -> dict[str, Any]:
    """The expected API body: the identity plus `fields`, identity keys merged."""
    identity = {**WIRE_IDENTITY, **fields.pop("identity", {})}
    return {"identity": identity, "policy": {}, **fields}


CASES = [
    pytest.param(spec(), {}, wire(), id="identity-only-lower-cases-the-zone-and-sends-no-spec"),
    pytest.param(
        spec(runnerGroupId="group-1"),
        {},
        wire(identity={"runnerGroupId": "group-1"}),
        id="runner-group-joins-the-identity",
    ),
    pytest.param(
        spec(displayName="Dev runner"), {}, wire(displayName="Dev runner"), id="display-name-is-top-level"
    ),
    pytest.param(
        spec(releaseChannel="RELEASE_CHANNEL_RAPID", enforceResourceLimits=True),
        {},
        wire(spec={"releaseChannel": "RELEASE_CHANNEL_RAPID", "enforceResourceLimits": True}),
        id="runner-spec-fields-go-under-spec",
    ),
    pytest.param(
        spec(policy={"constraints": {"lifecycle": {"defaultLifetimeSeconds": 60}}}),
        {},
        wire(policy={"constraints": {"lifecycle": {"defaultLifetimeSeconds": 60}}}),
        id="policy-is-sent-as-written",
    ),
    pytest.param(
        spec(dataPlane={"disabled": True}),
        {},
        wire(spec={"dataPlane": {"disabled": {}}}),
        id="data-plane-disabled-true-becomes-the-api-empty-message",
    ),
    pytest.param(
        spec(dataPlane={"clusterIp": {}}),
        {},
        wire(spec={"dataPlane": {"clusterIp": {}}}),
        id="data-plane-exposure-is-sent-as-written",
    ),
    pytest.param(
        spec(overrides={"env": [{"name": "LOG", "value": "debug"}, {"name": "EMPTY", "value": ""}]}),
        {},
        wire(spec={"overrides": {"env": {"LOG": "debug", "EMPTY": ""}}}),
        id="env-list-becomes-the-api-map",
    ),
    pytest.param(
        spec(overrides={"env": [SECRET_ENV, {"name": "LOG", "value": "debug"}]}),
        {("app", "token"): "s3cret"},
        wire(spec={"overrides": {"env": {"TOKEN": "s3cret", "LOG": "debug"}}}),
        id="env-secret-reference-takes-the-resolved-value",
    ),
    pytest.param(
        spec(overrides={"args": ["--verbose"]}),
        {},
        wire(spec={"overrides": {"args": ["--verbose"]}}),
        id="overrides-without-env-send-no-env",
    ),
    pytest.param(
        spec(overrides={"env": []}),
        {},
        wire(spec={"overrides": {}}),
        id="empty-env-list-is-dropped-not-sent-empty",
    ),
]


@pytest.mark.parametrize(("given", "secrets", "expected"), CASES)
def test_desired_runner(
    given: resource.ManagedRunnerSpec, secrets: desired.SecretValues, expected: dict[str, Any]
) -> None:
    assert to_wire(desired.desired_runner(given, secrets)) == expected


def test_an_unresolved_secret_reference_is_an_error_naming_the_env_entry() -> None:
    with pytest.raises(desired.MissingSecretValue, match=r"env TOKEN: Secret 'app' key 'token'"):
        desired.desired_runner(spec(overrides={"env": [SECRET_ENV]}), {("app", "other"): "x"})


def test_lenient_leaves_an_unresolved_secret_value_empty() -> None:
    """Deletion needs only the identity; the env Secret may be gone with the namespace."""
    got = desired.desired_runner(spec(overrides={"env": [SECRET_ENV]}), lenient=True)
    assert to_wire(got)["spec"]["overrides"]["env"] == {"TOKEN": ""}
