"""Create, update, list and delete semantics and the validation rules of contract 4-6 (in-process)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runner_operator.simulator.config import SimulatorConfig
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.errors import ApiError
from tests.clock import FakeClock
from tests.unit.simulator.conftest import runner


def refused(call: Any, *args: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


def violations(err: ApiError) -> list[str]:
    return [v["field"] for d in err.details for v in d.get("fieldViolations", [])]


def with_policy(policy: dict[str, Any]) -> dict[str, Any]:
    return runner(policy=policy)


def egress(group: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return with_policy({"constraints": {"network": {group: list(rules)}}})


INVALID_CREATES = [
    pytest.param(runner("Prod"), "managed_runner.identity.runner_id", id="uppercase-runner-id"),
    pytest.param(runner("-a"), "managed_runner.identity.runner_id", id="runner-id-leading-hyphen"),
    pytest.param(runner("a" * 64), "managed_runner.identity.runner_id", id="runner-id-too-long"),
    pytest.param(
        {"identity": {"zone": "z", "clusterId": "c"}}, "managed_runner.identity.runner_id", id="missing-id"
    ),
    pytest.param(
        {"identity": {"runnerId": "a", "clusterId": "c"}}, "managed_runner.identity.zone", id="missing-zone"
    ),
    pytest.param(
        {"identity": {"runnerId": "a", "zone": "z"}}, "managed_runner.identity.cluster_id", id="no-cluster"
    ),
    pytest.param(runner(surprise=1), "managed_runner.surprise", id="unknown-top-level-field"),
    pytest.param(
        runner(spec={"releaseChannel": "RELEASE_CHANNEL_BETA"}),
        "managed_runner.spec.release_channel",
        id="bad-enum",
    ),
    pytest.param(
        runner(spec={"dataPlane": {}}), "managed_runner.spec.data_plane", id="data-plane-without-exposure"
    ),
    pytest.param(
        runner(spec={"dataPlane": {"disabled": {}, "clusterIp": {}}}),
        "managed_runner.spec.data_plane",
        id="two-exposures",
    ),
    pytest.param(
        runner(spec={"dataPlane": {"custom": {}}}),
        "managed_runner.spec.data_plane.custom.advertised_uri",
        id="custom-no-uri",
    ),
    pytest.param(
        runner(spec={"maintenancePolicy": {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 59}]}}),
        "managed_runner.spec.maintenance_policy.windows[0].duration_seconds",
        id="window-too-short",
    ),
    pytest.param(
        runner(spec={"maintenancePolicy": {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 604801}]}}),
        "managed_runner.spec.maintenance_policy.windows[0].duration_seconds",
        id="window-too-long",
    ),
    pytest.param(
        runner(spec={"maintenancePolicy": {"windows": [{"cron": "", "durationSeconds": 3600}]}}),
        "managed_runner.spec.maintenance_policy.windows[0].cron",
        id="empty-cron",
    ),
    pytest.param(
        runner(spec={"maintenancePolicy": {"windows": [{"cron": "0 2 * *", "durationSeconds": 3600}]}}),
        "managed_runner.spec.maintenance_policy.windows[0].cron",
        id="four-field-cron",
    ),
    pytest.param(
        runner(
            spec={
                "maintenancePolicy": {
                    "exclusions": [{"startTime": "2026-01-02T00:00:00Z", "endTime": "2026-01-01T00:00:00Z"}]
                }
            }
        ),
        "managed_runner.spec.maintenance_policy.exclusions[0].end_time",
        id="exclusion-ends-before-start",
    ),
    pytest.param(
        runner(spec={"overrides": {"scaling": {"minReplicas": 3, "maxReplicas": 2}}}),
        "managed_runner.spec.overrides.scaling.min_replicas",
        id="scaling-min-above-max",
    ),
    pytest.param(
        runner(spec={"overrides": {"scaling": {"replicas": -1}}}),
        "managed_runner.spec.overrides.scaling.replicas",
        id="negative-replicas",
    ),
    pytest.param(
        runner(spec={"overrides": {"tolerations": [{"operator": "In"}]}}),
        "managed_runner.spec.overrides.tolerations[0].operator",
        id="toleration-operator",
    ),
    pytest.param(
        runner(spec={"overrides": {"tolerations": [{"effect": "Sometimes"}]}}),
        "managed_runner.spec.overrides.tolerations[0].effect",
        id="toleration-effect",
    ),
    pytest.param(
        runner(spec={"overrides": {"resources": {"cpuRequest": "lots"}}}),
        "managed_runner.spec.overrides.resources.cpu_request",
        id="bad-quantity",
    ),
    pytest.param(
        with_policy({"constraints": {"resources": {"minCpu": "2", "maxCpu": "1"}}}),
        "managed_runner.policy.constraints.resources.min_cpu",
        id="min-above-max",
    ),
    pytest.param(
        with_policy({"constraints": {"resources": {"maxMemory": "8Gi", "memoryCeiling": "4Gi"}}}),
        "managed_runner.policy.constraints.resources.memory_ceiling",
        id="ceiling-below-max",
    ),
    pytest.param(
        with_policy({"constraints": {"resources": {"maxGpuCount": "-1"}}}),
        "managed_runner.policy.constraints.resources.max_gpu_count",
        id="negative-gpu-count",
    ),
    pytest.param(
        with_policy({"constraints": {"lifecycle": {"defaultLifetimeSeconds": 2_592_001}}}),
        "managed_runner.policy.constraints.lifecycle.default_lifetime_seconds",
        id="lifetime-above-cap",
    ),
    pytest.param(
        with_policy({"constraints": {"metadata": {"maxAnnotationCount": -1}}}),
        "managed_runner.policy.constraints.metadata.max_annotation_count",
        id="negative-count",
    ),
    pytest.param(
        egress("allowedEgress", {"any": True, "tenant": "TENANT_SCOPE_SAME_ORG"}),
        "managed_runner.policy.constraints.network.allowed_egress[0]",
        id="egress-two-destinations",
    ),
    pytest.param(
        egress("allowedEgress", {"ports": [{"port": 80}]}),
        "managed_runner.policy.constraints.network.allowed_egress[0]",
        id="egress-no-destination",
    ),
    pytest.param(
        egress("defaultEgress", {"httpsHostname": "pypi.org"}),
        "managed_runner.policy.constraints.network.default_egress[0].https_hostname",
        id="hostname-in-default-egress",
    ),
    pytest.param(
        egress("allowedEgress", {"httpsHostname": "a.*.example.com"}),
        "managed_runner.policy.constraints.network.allowed_egress[0].https_hostname",
        id="wildcard-not-leftmost",
    ),
    pytest.param(
        egress("allowedEgress", {"httpsHostname": "*.*.example.com"}),
        "managed_runner.policy.constraints.network.allowed_egress[0].https_hostname",
        id="two-wildcards",
    ),
    pytest.param(
        egress("allowedEgress", {"httpsHostname": "pypi.org", "ports": [{"port": 80}]}),
        "managed_runner.policy.constraints.network.allowed_egress[0].ports",
        id="hostname-port-not-443",
    ),
    pytest.param(
        egress("allowedEgress", {"cidr": {"cidr": "10.0.0.1/8"}}),
        "managed_runner.policy.constraints.network.allowed_egress[0].cidr.cidr",
        id="non-canonical-cidr",
    ),
    pytest.param(
        egress("allowedEgress", {"cidr": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}),
        "managed_runner.policy.constraints.network.allowed_egress[0].cidr.except[0]",
        id="except-outside-cidr",
    ),
    pytest.param(
        egress("allowedEgress", {"any": True, "ports": [{"port": 100, "endPort": 99}]}),
        "managed_runner.policy.constraints.network.allowed_egress[0].ports[0].end_port",
        id="end-port-below-port",
    ),
    pytest.param(
        egress("allowedEgress", {"any": True, "ports": [{"port": 0}]}),
        "managed_runner.policy.constraints.network.allowed_egress[0].ports[0].port",
        id="port-zero",
    ),
    pytest.param(
        egress("allowedEgress", {"any": True, "ports": [{"port": 53, "protocol": "ICMP"}]}),
        "managed_runner.policy.constraints.network.allowed_egress[0].ports[0].protocol",
        id="bad-protocol",
    ),
    pytest.param(
        egress("allowedEgress", {"selector": {"namespaceLabels": {"a": "b"}}}),
        "managed_runner.policy.constraints.network.allowed_egress[0].selector.pod_labels",
        id="selector-without-pod-labels",
    ),
    pytest.param(
        egress("allowedIngress", {"tenant": "TENANT_SCOPE_SANDBOX_NETWORK"}),
        "managed_runner.policy.constraints.network.allowed_ingress[0].tenant",
        id="ingress-sandbox-network",
    ),
    pytest.param(
        egress("defaultIngress", {"any": True, "cidr": {"cidr": "10.0.0.0/8"}}),
        "managed_runner.policy.constraints.network.default_ingress[0]",
        id="ingress-two-sources",
    ),
    pytest.param(
        with_policy({"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["10.0.0.0/8", "10.1.0.0/16"]}}}),
        "managed_runner.policy.control_plane_access.source_ip_allowlist.cidrs[1]",
        id="redundant-allowlist",
    ),
    pytest.param(
        with_policy({"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["::ffff:10.0.0.0/104"]}}}),
        "managed_runner.policy.control_plane_access.source_ip_allowlist.cidrs[0]",
        id="ipv4-mapped-allowlist",
    ),
    pytest.param(
        with_policy(
            {"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": [f"10.{i}.0.0/16" for i in range(257)]}}}
        ),
        "managed_runner.policy.control_plane_access.source_ip_allowlist.cidrs",
        id="allowlist-too-long",
    ),
    pytest.param(
        with_policy({"constraints": {"security": {"defaultCpuRuntimeClass": "kata"}}}),
        "managed_runner.policy.constraints.security.default_cpu_runtime_class",
        id="default-runtime-class-without-allowlist",
    ),
    pytest.param(
        with_policy(
            {
                "constraints": {
                    "security": {"allowedRuntimeClasses": ["kata"], "defaultGpuRuntimeClass": "gvisor"}
                }
            }
        ),
        "managed_runner.policy.constraints.security.default_gpu_runtime_class",
        id="default-runtime-class-not-allowed",
    ),
    pytest.param(
        with_policy({"base": {"spec": {"affinity": {}}}}),
        "managed_runner.policy.base.spec.affinity",
        id="base-affinity",
    ),
    pytest.param(
        with_policy({"base": {"spec": {"containers": [{"name": "x", "securityContext": {}}]}}}),
        "managed_runner.policy.base.spec.containers[0].securityContext",
        id="base-container-security-context",
    ),
    pytest.param(
        with_policy({"base": {"spec": {"runtimeClassName": "kata"}}}),
        "managed_runner.policy.base.spec.runtimeClassName",
        id="base-runtime-class",
    ),
    pytest.param(
        with_policy({"base": {"spec": {"initContainers": []}}}),
        "managed_runner.policy.base.spec.initContainers",
        id="base-init-containers",
    ),
    pytest.param(
        with_policy(
            {"constraints": {"network": {"allowedEgress": [{"dnsName": "a.org", "httpsHostname": "a.org"}]}}}
        ),
        "managed_runner.policy.constraints.network.allowed_egress[0].https_hostname",
        id="alias-and-new-name-together",
    ),
    pytest.param(
        with_policy({"constraints": {"lifecycle": {"defaultLifetimeSeconds": "soon"}}}),
        "managed_runner.policy.constraints.lifecycle.default_lifetime_seconds",
        id="non-integer",
    ),
]


@pytest.mark.parametrize(("body", "field"), INVALID_CREATES)
def test_create_rejects_invalid_input(sim: Simulator, body: dict[str, Any], field: str) -> None:
    err = refused(sim.create, body, "req-1")
    assert (err.code, err.status) == (3, 400)
    assert field in violations(err)
    assert err.details[0]["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert len(sim) == 0


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(runner(profileBindings=[{"profile": "x"}]), id="profile-bindings"),
        pytest.param(
            runner(spec={"allowPrivilegedProfileAnnotations": True}), id="privileged-profile-annotations"
        ),
    ],
)
def test_create_rejects_legacy_configuration(sim: Simulator, body: dict[str, Any]) -> None:
    err = refused(sim.create, body, "req-1")
    assert err.code == 3
    assert err.message == "expected a policy and no legacy configuration"


VALID_POLICY = {
    "displayName": "Production constraints",
    "base": {"metadata": {"labels": {"team": "platform"}}},
    "constraints": {
        "resources": {
            "defaultCpu": "1",
            "defaultMemory": "2Gi",
            "maxCpu": "8",
            "maxMemory": "32Gi",
            "maxGpuCount": "0",
        },
        "network": {
            "allowedEgress": [
                {"httpsHostname": "*"},
                {"httpsHostname": "*.example.com", "ports": [{"protocol": "TCP", "port": 443}]},
                {
                    "cidr": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]},
                    "ports": [{"port": 80, "endPort": 90}],
                },
                {"selector": {"podLabels": {"app": "db"}}},
                {"tenant": "TENANT_SCOPE_SAME_ORG"},
            ],
            "defaultEgress": [{"any": True}],
            "allowedIngress": [{"cidr": {"cidr": "2001:db8::/32"}}],
            "dnsEgress": "DNS_EGRESS_MODE_DENY",
        },
        "security": {"allowedRuntimeClasses": ["kata"], "defaultCpuRuntimeClass": "kata"},
        "lifecycle": {"defaultLifetimeSeconds": 2_592_000},
        "volumes": {"allowedMedia": ["STORAGE_MEDIUM_MEMORY"], "maxSize": "100Gi"},
    },
    "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["203.0.113.0/24", "2001:db8::/32"]}},
}


def test_valid_policy_round_trips_in_camel_case(sim: Simulator) -> None:
    created = sim.create(with_policy(copy.deepcopy(VALID_POLICY)), "req-1")
    assert created["policy"] == VALID_POLICY


def test_snake_case_input_is_accepted_and_emitted_as_camel_case(sim: Simulator) -> None:
    body = {
        "identity": {"runner_id": "a", "zone": "us-east-04a", "cluster_id": "c", "runner_group_id": "blue"},
        "display_name": "A",
        "spec": {"release_channel": "RELEASE_CHANNEL_RAPID", "image_pull": {"policy": 2}},
        "policy": {"constraints": {"resources": {"max_gpu_count": 4}, "network": {"deny_dns": True}}},
    }
    created = sim.create(body, "req-1")
    assert created["identity"]["runnerGroupId"] == "blue"
    assert created["displayName"] == "A"
    assert created["spec"] == {
        "releaseChannel": "RELEASE_CHANNEL_RAPID",
        "imagePull": {"policy": "SANDBOX_IMAGE_PULL_POLICY_ALWAYS"},
    }
    assert created["policy"] == {
        "constraints": {"resources": {"maxGpuCount": "4"}, "network": {"denyHttpsHostnameRules": True}}
    }


def test_defaults_are_omitted_and_presence_is_kept(sim: Simulator) -> None:
    created = sim.create(
        runner(
            displayName="",
            spec={"enforceResourceLimits": False, "dataPlane": {"disabled": {}}, "imagePull": {}},
            policy={"constraints": {"resources": {"maxGpuCount": "0", "requireLimits": False}, "image": {}}},
        ),
        "req-1",
    )
    assert "displayName" not in created
    assert created["spec"] == {
        "releaseChannel": "RELEASE_CHANNEL_STABLE",
        "dataPlane": {"disabled": {}},
        "imagePull": {},
    }
    assert created["policy"] == {"constraints": {"resources": {"maxGpuCount": "0"}, "image": {}}}


def test_server_fills_zone_group_channel_and_cluster_name(sim: Simulator) -> None:
    body = runner()
    body["identity"]["zone"] = "US-EAST-04A"
    created = sim.create(body, "req-1")
    assert created["identity"] == {
        "runnerId": "prod-east",
        "runnerGroupId": "default",
        "zone": "us-east-04a",
        "clusterId": "11111111-0000-4000-8000-000000000001",
        "clusterName": "cks-11111111",
    }


def test_cluster_names_come_from_the_configured_map(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, cluster_names={"c": "prod-east"}))
    assert sim.create(runner(cluster="c"), "r")["identity"]["clusterName"] == "prod-east"


def test_unknown_cluster_is_not_found_when_clusters_are_known(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, cluster_names={"c": "x"}, known_clusters_only=True))
    assert refused(sim.create, runner(cluster="d"), "r").code == 5


def test_uppercase_zone_can_be_rejected(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, reject_uppercase_zone=True))
    body = runner()
    body["identity"]["zone"] = "US-EAST-04A"
    assert "managed_runner.identity.zone" in violations(refused(sim.create, body, "r"))


def test_lenient_mode_drops_unknown_fields(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, lenient=True))
    assert "surprise" not in sim.create(runner(surprise=1), "r")


def test_affinity_override_is_stored_verbatim(sim: Simulator) -> None:
    affinity: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    created = sim.create(runner(spec={"overrides": {"affinity": affinity, "env": {"TOKEN": "s"}}}), "r")
    assert created["spec"]["overrides"]["affinity"] == affinity
    assert created["deploymentSpec"]["affinity"] == affinity
    assert created["deploymentSpec"]["env"]["TOKEN"] == "s"


def test_output_only_fields_in_create_body_are_ignored(sim: Simulator) -> None:
    body = runner(etag="mine", installStatus="RUNNER_INSTALL_STATUS_READY", activeRevision=9)
    created = sim.create(body, "r")
    assert created["etag"] != "mine"
    assert created["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"


def test_results_are_copies(sim: Simulator) -> None:
    created = sim.create(runner(spec={"overrides": {"env": {"A": "1"}}}), "r")
    created["spec"]["overrides"]["env"]["A"] = "changed"
    assert sim.get("prod-east")["spec"]["overrides"]["env"] == {"A": "1"}


# -- idempotency and uniqueness -------------------------------------------------------------


def test_request_id_is_required(sim: Simulator) -> None:
    err = refused(sim.create, runner(), None)
    assert (err.code, violations(err)) == (3, ["request_id"])


def test_same_request_id_and_body_replays_the_first_result(sim: Simulator, clock: FakeClock) -> None:
    first = sim.create(runner(), "req-1")
    clock.tick(1)
    again = sim.create(runner(), "req-1")
    assert again["etag"] == first["etag"]
    assert again["createTime"] == first["createTime"]
    assert len(sim) == 1


def test_equivalent_spelling_counts_as_the_same_body(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    body = {
        "identity": {
            "runner_id": "prod-east",
            "zone": "US-EAST-04A",
            "cluster_id": runner()["identity"]["clusterId"],
        }
    }
    body["policy"] = {}
    assert sim.create(body, "req-1")["identity"]["runnerId"] == "prod-east"


def test_same_request_id_with_different_body_is_invalid(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    err = refused(sim.create, runner(displayName="other"), "req-1")
    assert (err.code, violations(err)) == (3, ["request_id"])


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(runner(cluster="22222222-0000-4000-8000-000000000002"), id="runner-id-taken"),
        pytest.param(runner("other"), id="cluster-already-has-runner"),
    ],
)
def test_conflicting_create_is_already_exists(sim: Simulator, second: dict[str, Any]) -> None:
    sim.create(runner(), "req-1")
    err = refused(sim.create, second, "req-2")
    assert (err.code, err.status) == (6, 409)
    assert err.details[0]["@type"] == "type.googleapis.com/google.rpc.ResourceInfo"


# -- update masks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param(" , ", id="blank-entries"),
        pytest.param("*", id="wildcard"),
        pytest.param("identity.zone", id="immutable-zone"),
        pytest.param("identity.runnerId", id="immutable-runner-id"),
        pytest.param("identity.cluster_id", id="immutable-cluster"),
        pytest.param("identity", id="whole-identity"),
        pytest.param("etag", id="output-only-etag"),
        pytest.param("installStatus", id="output-only-status"),
        pytest.param("identity.clusterName", id="output-only-cluster-name"),
        pytest.param("spec.overrides.env", id="deeper-than-top-level-spec"),
        pytest.param("policy.constraints", id="policy-sub-path"),
        pytest.param("spec.nonsense", id="unknown-spec-field"),
        pytest.param("labels", id="unknown-path"),
        pytest.param("profileBindings", id="legacy-path"),
        pytest.param("displayName,identity.zone", id="one-bad-path-spoils-the-mask"),
    ],
)
def test_update_mask_rules(sim: Simulator, mask: str | None) -> None:
    sim.create(runner(), "req-1")
    err = refused(sim.update, "prod-east", {"displayName": "x"}, mask)
    assert err.code == 3
    assert violations(err)[0] == "update_mask"
    assert "displayName" not in sim.get("prod-east")


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param("spec.tenantMetrics", id="camel-case-path"),
        pytest.param("spec.tenant_metrics", id="snake-case-path"),
        pytest.param(["spec.tenantMetrics", "spec.tenant_metrics"], id="repeated-parameter"),
    ],
)
def test_mask_paths_accept_both_spellings(sim: Simulator, mask: str | list[str]) -> None:
    sim.create(runner(), "req-1")
    got = sim.update("prod-east", {"spec": {"tenantMetrics": {"enabled": True}}}, mask)
    assert got["spec"]["tenantMetrics"] == {"enabled": True}


def test_only_masked_fields_are_written(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    body = {"displayName": "new", "spec": {"enforceResourceLimits": True}, "identity": {"zone": "elsewhere"}}
    got = sim.update("prod-east", body, "displayName")
    assert got["displayName"] == "new"
    assert "enforceResourceLimits" not in got["spec"]
    assert got["identity"]["zone"] == "us-east-04a"


@pytest.mark.parametrize(
    ("mask", "check"),
    [
        pytest.param("displayName", lambda r: "displayName" not in r, id="display-name-cleared"),
        pytest.param(
            "identity.runnerGroupId",
            lambda r: r["identity"]["runnerGroupId"] == "default",
            id="group-reset-to-default",
        ),
        pytest.param("spec.volumes", lambda r: "volumes" not in r["spec"], id="spec-field-removed"),
        pytest.param(
            "spec.releaseChannel",
            lambda r: r["spec"]["releaseChannel"] == "RELEASE_CHANNEL_STABLE",
            id="channel-default",
        ),
        pytest.param(
            "spec", lambda r: r["spec"] == {"releaseChannel": "RELEASE_CHANNEL_STABLE"}, id="whole-spec-reset"
        ),
    ],
)
def test_masked_path_absent_from_body_resets_the_field(sim: Simulator, mask: str, check: Any) -> None:
    body = runner(
        displayName="A",
        spec={"releaseChannel": "RELEASE_CHANNEL_RAPID", "volumes": {"enabled": True}},
    )
    body["identity"]["runnerGroupId"] = "blue"
    sim.create(body, "req-1")
    assert check(sim.update("prod-east", {}, mask))


def test_update_validates_the_written_fields(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    err = refused(sim.update, "prod-east", {"spec": {"dataPlane": {}}}, "spec.dataPlane")
    assert "managed_runner.spec.data_plane" in violations(err)


def test_update_of_missing_runner_is_not_found(sim: Simulator) -> None:
    assert refused(sim.update, "ghost", {"displayName": "x"}, "displayName").code == 5


def test_body_runner_id_mismatch_can_be_rejected(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, reject_id_mismatch=True))
    sim.create(runner(), "r")
    err = refused(
        sim.update, "prod-east", {"identity": {"runnerId": "other"}, "displayName": "x"}, "displayName"
    )
    assert err.code == 3


# -- etag ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "etag",
    [pytest.param("stale", id="stale-etag"), pytest.param(None, id="missing-etag")],
)
def test_policy_update_needs_the_current_etag(sim: Simulator, etag: str | None) -> None:
    sim.create(runner(), "req-1")
    body: dict[str, Any] = {"policy": {"displayName": "new"}}
    if etag:
        body["etag"] = etag
    err = refused(sim.update, "prod-east", body, "policy")
    assert (err.code, err.status) == (9, 400)
    assert err.message == "managed_runner.etag is stale; reload the runner and retry"
    assert err.details[0]["@type"] == "type.googleapis.com/google.rpc.PreconditionFailure"
    assert err.details[0]["violations"][0]["subject"] == "managed_runner.etag"
    assert sim.get("prod-east")["policy"] == {}


def test_missing_etag_can_mean_last_writer_wins(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, require_etag=False))
    sim.create(runner(), "r")
    assert sim.update("prod-east", {"policy": {"displayName": "n"}}, "policy")["policy"] == {
        "displayName": "n"
    }
    assert refused(sim.update, "prod-east", {"policy": {}, "etag": "stale"}, "policy").code == 9


def test_old_etag_is_stale_after_a_policy_write(sim: Simulator) -> None:
    etag = sim.create(runner(), "req-1")["etag"]
    sim.update("prod-east", {"policy": {"displayName": "1"}, "etag": etag}, "policy")
    assert (
        refused(sim.update, "prod-east", {"policy": {"displayName": "2"}, "etag": etag}, "policy").code == 9
    )


def test_policy_is_replaced_whole(sim: Simulator) -> None:
    etag = sim.create(with_policy(copy.deepcopy(VALID_POLICY)), "req-1")["etag"]
    got = sim.update("prod-east", {"policy": {"displayName": "only"}, "etag": etag}, "policy")
    assert got["policy"] == {"displayName": "only"}


def test_non_policy_updates_need_no_etag(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    assert sim.update("prod-east", {"spec": {"enforceResourceLimits": True}}, "spec.enforceResourceLimits")


# -- list and delete ------------------------------------------------------------------------


def _populate(sim: Simulator, count: int) -> None:
    for i in range(count):
        sim.create(runner(f"r-{i:03d}", cluster=f"c-{i}"), f"req-{i}")


def test_list_pages_in_runner_id_order(sim: Simulator) -> None:
    _populate(sim, 7)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = sim.list_runners(3, token)
        pages += 1
        seen += [r["identity"]["runnerId"] for r in page["managedRunners"]]
        token = page.get("nextPageToken")
        if not token:
            break
    assert seen == [f"r-{i:03d}" for i in range(7)]
    assert pages == 3


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        pytest.param(None, 50, id="default-50"),
        pytest.param(0, 50, id="zero-means-default"),
        pytest.param(5000, 1000, id="clamped-to-1000"),
    ],
)
def test_page_size_defaults_and_clamps(clock: FakeClock, size: int | None, expected: int) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, require_request_id=False))
    _populate(sim, 1001)
    assert len(sim.list_runners(size)["managedRunners"]) == expected


@pytest.mark.parametrize(
    ("size", "token", "field"),
    [
        pytest.param(-1, None, "page_size", id="negative-size"),
        pytest.param("ten", None, "page_size", id="non-numeric-size"),
        pytest.param(None, "garbage!", "page_token", id="garbled-token"),
        pytest.param(None, "eyJ2IjoxfQ", "page_token", id="token-without-position"),
    ],
)
def test_bad_list_parameters_are_invalid(sim: Simulator, size: Any, token: str | None, field: str) -> None:
    err = refused(sim.list_runners, size, token)
    assert (err.code, violations(err)) == (3, [field])


def test_list_filters_by_cluster_and_binds_the_token_to_the_filter(sim: Simulator) -> None:
    _populate(sim, 3)
    page = sim.list_runners(None, None, "c-1")
    assert [r["identity"]["runnerId"] for r in page["managedRunners"]] == ["r-001"]
    token = sim.list_runners(1)["nextPageToken"]
    assert refused(sim.list_runners, 1, token, "c-2").code == 3


def test_list_skips_runners_whose_deletion_finished(sim: Simulator, clock: FakeClock) -> None:
    _populate(sim, 3)
    sim.delete("r-001")
    clock.tick(5)
    assert [r["identity"]["runnerId"] for r in sim.list_runners()["managedRunners"]] == ["r-000", "r-002"]


@pytest.mark.parametrize(
    ("allow_missing", "code"),
    [
        pytest.param(False, 5, id="missing-is-not-found"),
        pytest.param(True, None, id="allow-missing-succeeds"),
    ],
)
def test_delete_of_missing_runner(sim: Simulator, allow_missing: bool, code: int | None) -> None:
    if code is None:
        assert sim.delete("ghost", allow_missing) == {}
    else:
        assert refused(sim.delete, "ghost", allow_missing).code == code
