"""Wire models: tolerant parsing, exact serialisation, presence, secrecy."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from runner_operator import reporting
from runner_operator.cloud import models
from runner_operator.cloud.models import CloudRunner, to_wire

EXAMPLE: dict[str, Any] = {
    "identity": {
        "runnerId": "prod-us-east-1",
        "runnerGroupId": "default",
        "zone": "us-east-04a",
        "clusterId": "00000000-0000-4000-8000-000000000001",
        "clusterName": "prod-east",
    },
    "displayName": "Production east",
    "spec": {
        "releaseChannel": "RELEASE_CHANNEL_STABLE",
        "maintenancePolicy": {
            "windows": [{"cron": "0 2 * * SAT", "durationSeconds": 3600}],
            "exclusions": [{"startTime": "2026-12-24T00:00:00Z", "endTime": "2026-12-27T00:00:00.250Z"}],
        },
        "overrides": {
            "resources": {"cpuRequest": "1", "memoryRequest": "2Gi"},
            "env": {"API_KEY": "hunter2"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            "scaling": {"replicas": "2", "autoscalingEnabled": True},
        },
        "dataPlane": {"disabled": {}},
    },
    "policy": {
        "displayName": "Production constraints",
        "base": {"spec": {"containers": [{"env": [{"name": "TOKEN", "value": "policy-secret"}]}]}},
        "constraints": {
            "resources": {"defaultCpu": "1", "maxMemory": "32Gi", "maxGpuCount": "0"},
            "lifecycle": {"defaultLifetimeSeconds": 3600},
            "network": {"allowedEgress": [{"httpsHostname": "pypi.org", "ports": [{"port": 443}]}]},
        },
        "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": []}},
    },
    "etag": "7f3c2a9e",
    "installStatus": "RUNNER_INSTALL_STATUS_READY",
    "connectionStatus": "RUNNER_CONNECTION_STATUS_CONNECTED",
    "activeConfigVersion": "stable-2026.09.1",
    "activeRevision": 3,
    "targetRevision": 3,
    "updateAvailable": False,
    "rolloutInProgress": False,
    "deploymentSpec": {"image": "runner:1", "env": {"DEPLOY_SECRET": "deploy-secret"}},
    "installError": {
        "reason": "RUNNER_INSTALL_ERROR_REASON_QUOTA",
        "message": "no nodes",
        "remediationHints": ["add nodes"],
        "occurredAt": "2026-09-09T00:00:00Z",
    },
    "dataPlaneStatus": {"state": "READY", "uri": "https://x"},
    "createTime": "2026-09-09T00:00:00Z",
    "updateTime": "2026-09-10T12:00:00+02:00",
    "lastHeartbeatTime": "2026-09-10T12:34:56Z",
}


def test_full_example_parses_to_snake_case_fields() -> None:
    runner = CloudRunner.model_validate(EXAMPLE)
    assert runner.runner_id == "prod-us-east-1"
    assert runner.ready is True
    assert runner.spec is not None
    assert runner.spec.overrides is not None
    assert runner.spec.overrides.scaling == models.CloudScaling(replicas=2, autoscaling_enabled=True)
    assert runner.spec.overrides.affinity == EXAMPLE["spec"]["overrides"]["affinity"]
    assert runner.spec.data_plane == models.CloudDataPlane(disabled=models.Empty())
    assert runner.policy is not None
    assert runner.policy.constraints is not None
    assert runner.policy.constraints.resources is not None
    assert runner.policy.constraints.resources.max_gpu_count == 0
    assert runner.install_error is not None
    assert runner.install_error.remediation_hints == ("add nodes",)
    assert runner.update_time == datetime(2026, 9, 10, 10, 0, tzinfo=UTC)


def test_round_trip_keeps_every_present_field() -> None:
    wire = to_wire(CloudRunner.model_validate(EXAMPLE))
    assert wire["policy"]["controlPlaneAccess"] == {"sourceIpAllowlist": {"cidrs": []}}
    assert wire["spec"]["dataPlane"] == {"disabled": {}}
    assert wire["policy"]["constraints"]["resources"]["maxGpuCount"] == "0"
    assert wire["spec"]["overrides"]["scaling"]["replicas"] == 2
    assert wire["spec"]["maintenancePolicy"]["exclusions"][0]["endTime"] == "2026-12-27T00:00:00.250000Z"
    assert wire["updateTime"] == "2026-09-10T10:00:00Z"
    assert CloudRunner.model_validate(wire) == CloudRunner.model_validate(EXAMPLE)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param({}, None, id="absent-policy"),
        pytest.param({"policy": None}, None, id="null-policy"),
        pytest.param({"policy": {}}, models.CloudPolicy(), id="empty-policy"),
    ],
)
def test_policy_presence(wire: dict[str, Any], expected: models.CloudPolicy | None) -> None:
    runner = CloudRunner.model_validate(wire)
    assert runner.policy == expected
    assert ("policy" in to_wire(runner)) is (expected is not None)


@pytest.mark.parametrize("value", [7, "7", " 7"])
def test_integers_accept_numbers_and_numeric_strings(value: object) -> None:
    window = models.CloudMaintenanceWindow.model_validate({"durationSeconds": value})
    assert window.duration_seconds == 7
    assert to_wire(window) == {"durationSeconds": 7}


def test_max_gpu_count_travels_as_string() -> None:
    resources = models.CloudResourceConstraints.model_validate({"maxGpuCount": 4})
    assert to_wire(resources) == {"maxGpuCount": "4"}
    assert to_wire(models.CloudResourceConstraints()) == {}


def test_unknown_fields_and_enum_values_do_not_break_parsing() -> None:
    runner = CloudRunner.model_validate(
        {
            "identity": {"runnerId": "r", "futureField": 1},
            "spec": {"releaseChannel": "RELEASE_CHANNEL_NIGHTLY", "newThing": {"a": 1}},
            "installStatus": "RUNNER_INSTALL_STATUS_HIBERNATING",
            "connectionStatus": 2,
            "somethingElse": [1, 2],
        }
    )
    assert runner.spec == models.RunnerSpec(release_channel="RELEASE_CHANNEL_NIGHTLY")
    assert runner.install_status == "RUNNER_INSTALL_STATUS_HIBERNATING"
    assert runner.connection_status == "2"
    assert runner.ready is False
    assert "somethingElse" not in to_wire(runner)


def test_legacy_network_spellings_are_read_as_the_new_names() -> None:
    network = models.CloudNetworkConstraints.model_validate(
        {"denyDns": True, "allowedEgress": [{"dnsName": "*.example.com", "dnsNameExcept": ["a.example.com"]}]}
    )
    assert network.deny_https_hostname_rules is True
    assert to_wire(network) == {
        "allowedEgress": [{"httpsHostname": "*.example.com", "httpsHostnameExcept": ["a.example.com"]}],
        "denyHttpsHostnameRules": True,
    }


def test_cidr_except_uses_the_reserved_word_on_the_wire() -> None:
    block = models.CloudCidrBlock.model_validate({"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]})
    assert block.except_ == ("10.1.0.0/16",)
    assert to_wire(block) == {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}


def test_request_body_drops_output_only_fields() -> None:
    body = to_wire(CloudRunner.model_validate(EXAMPLE), request=True)
    assert set(body) == {"identity", "displayName", "spec", "policy", "etag"}
    assert "clusterName" not in body["identity"]


def test_models_are_frozen() -> None:
    runner = CloudRunner.model_validate(EXAMPLE)
    with pytest.raises(pydantic.ValidationError):
        runner.display_name = "changed"  # type: ignore[misc]


@pytest.mark.parametrize("secret", ["hunter2", "policy-secret", "deploy-secret"])
def test_secrets_stay_out_of_repr_and_str(secret: str) -> None:
    runner = CloudRunner.model_validate(EXAMPLE)
    assert secret not in repr(runner)
    assert secret not in str(runner)
    assert secret in str(to_wire(runner))  # still sent: only hidden from text


def test_validation_errors_do_not_echo_input() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        CloudRunner.model_validate({"spec": {"overrides": {"env": "hunter2-not-a-map"}}})
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "reason", "phase"),
    [
        ({"installStatus": "RUNNER_INSTALL_STATUS_FAILED"}, "InstallFailed", "Failed"),
        ({"installStatus": "RUNNER_INSTALL_STATUS_PENDING"}, "Installing", "Pending"),
        ({"installStatus": "RUNNER_INSTALL_STATUS_PROVISIONING"}, "Installing", "Provisioning"),
        ({}, "Installing", "Unknown"),
        ({"rolloutInProgress": True}, "RollingOut", "RollingOut"),
        ({"activeRevision": 1, "targetRevision": 2}, "RollingOut", "RollingOut"),
        ({"connectionStatus": "RUNNER_CONNECTION_STATUS_DISCONNECTED"}, "Disconnected", "Disconnected"),
        ({"connectionStatus": None}, "Disconnected", "Connecting"),
        ({"installStatus": "RUNNER_INSTALL_STATUS_DELETING"}, "UnknownStatus", "Deleting"),
        ({"installStatus": "RUNNER_INSTALL_STATUS_HIBERNATING"}, "UnknownStatus", "Unknown"),
        ({"activeRevision": 2, "targetRevision": 2}, "Available", "Ready"),
    ],
)
def test_one_readiness_rule_for_planning_status_and_phase(
    fields: dict[str, Any], reason: str, phase: str
) -> None:
    base = {
        "identity": {"runnerId": "r"},
        "installStatus": "RUNNER_INSTALL_STATUS_READY",
        "connectionStatus": "RUNNER_CONNECTION_STATUS_CONNECTED",
    }
    if fields == {}:
        base.pop("installStatus")
    runner = CloudRunner.model_validate({**base, **fields})
    found = models.readiness(runner)
    assert found.reason == reason
    assert found.message
    assert runner.ready is (reason == "Available")
    assert reporting.phase(runner) == phase
