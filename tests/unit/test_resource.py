"""Parsing a ManagedRunner body into the typed, frozen models of runner_operator.resource."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from runner_operator.resource import (
    Affinity,
    ManagedRunnerResource,
    ManagedRunnerSpec,
    Policy,
    SecretKeySelector,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

IDENTITY = {"runnerId": "dev", "clusterId": "3f6c1d2e-8b4a-4c1f-9e7d-2a5b6c7d8e9f", "zone": "us-east-04a"}


def body(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    meta = {"name": "dev", "namespace": "sandboxes", "uid": "0b5d-uid", "generation": 3} | metadata
    return {
        "apiVersion": "sandbox.coreweave.com/v1alpha1",
        "kind": "ManagedRunner",
        "metadata": meta,
        "spec": IDENTITY | {"policy": {}} | (spec or {}),
    }


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    loaded["metadata"] |= {"uid": "0b5d-uid", "generation": 1}
    return loaded


def spec_of(**spec: Any) -> ManagedRunnerSpec:
    return ManagedRunnerResource.from_body(body(spec)).spec


def test_from_body_reads_metadata_and_identity() -> None:
    runner = ManagedRunnerResource.from_body(body())
    assert (runner.name, runner.namespace, runner.uid, runner.generation) == (
        "dev",
        "sandboxes",
        "0b5d-uid",
        3,
    )
    assert (runner.spec.runner_id, runner.spec.cluster_id, runner.spec.zone) == (
        "dev",
        "3f6c1d2e-8b4a-4c1f-9e7d-2a5b6c7d8e9f",
        "us-east-04a",
    )
    assert not runner.deleting
    assert runner.deletion_timestamp is None
    assert runner.status == {}


def test_minimal_spec_gets_operator_defaults_and_leaves_cloud_defaults_unset() -> None:
    spec = ManagedRunnerResource.from_body(example("minimal.yaml")).spec
    assert spec.policy == Policy()
    assert spec.deletion_policy == "Delete"
    assert (spec.adopt, spec.paused, spec.enforce_resource_limits) == (False, False, False)
    assert spec.credentials is None
    # Absent means "CoreWeave's default", so the models do not invent values.
    assert spec.release_channel is None
    assert spec.runner_group_id is None
    assert spec.overrides is None
    assert spec.data_plane is None


def test_deletion_timestamp_marks_the_runner_as_deleting() -> None:
    runner = ManagedRunnerResource.from_body(body(deletionTimestamp="2026-09-10T12:00:00Z"))
    assert runner.deleting
    assert runner.deletion_timestamp == "2026-09-10T12:00:00Z"


def test_status_is_kept_verbatim() -> None:
    status = {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}], "x": {"y": 1}}
    runner = ManagedRunnerResource.from_body(body() | {"status": status})
    assert runner.status == status


def test_missing_metadata_is_an_error_not_an_empty_name() -> None:
    broken = body()
    del broken["metadata"]["uid"]
    with pytest.raises(ValidationError, match="uid"):
        ManagedRunnerResource.from_body(broken)


@pytest.mark.parametrize(
    "spec",
    [{"runnerId": 7}, {"zone": None}, {"deletionPolicy": "Sometimes"}, {"credentials": {"secretRef": {}}}],
    ids=["runner-id-not-a-string", "zone-null", "unknown-deletion-policy", "secret-ref-without-name"],
)
def test_identity_only_is_none_when_even_the_identity_does_not_parse(spec: dict[str, Any]) -> None:
    """Deletion of a spec from a newer version reads identity only; with that broken too, nothing."""
    assert ManagedRunnerResource.identity_only(body(spec | {"futureField": 1})) is None


def test_models_are_frozen() -> None:
    runner = ManagedRunnerResource.from_body(body())
    with pytest.raises(ValidationError):
        runner.spec.paused = True  # type: ignore[misc]
    with pytest.raises(ValidationError):
        runner.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "spec",
    [
        {"unknownField": 1},
        {"overrides": {"replicas": 2}},
        {"policy": {"constraints": {"resources": {"maxGpus": 1}}}},
        {"maintenancePolicy": {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 60, "tz": "UTC"}]}},
    ],
)
def test_unknown_spec_fields_are_rejected(spec: dict[str, Any]) -> None:
    # The API server prunes unknown fields, so one reaching the models means the CRD and models disagree.
    with pytest.raises(ValidationError):
        ManagedRunnerResource.from_body(body(spec))


def test_snake_case_names_also_populate() -> None:
    spec = ManagedRunnerSpec(
        runner_id="dev", cluster_id=IDENTITY["clusterId"], zone="us-east-04a", policy=Policy()
    )
    assert spec.model_dump(by_alias=True, exclude_unset=True) == IDENTITY | {"policy": {}}


def test_full_example_parses_into_typed_values() -> None:
    spec = ManagedRunnerResource.from_body(example("managedrunner.yaml")).spec
    assert spec.release_channel == "RELEASE_CHANNEL_STABLE"
    assert spec.maintenance_policy is not None
    assert spec.maintenance_policy.windows[0].duration_seconds == 10800
    assert spec.overrides is not None
    assert spec.overrides.resources is not None
    assert spec.overrides.resources.memory_limit == "8Gi"
    assert [var.name for var in spec.overrides.env] == ["LOG_LEVEL", "REGISTRY_MIRROR_TOKEN"]
    assert spec.data_plane is not None
    assert spec.data_plane.disabled
    network = spec.policy.constraints.network if spec.policy.constraints else None
    assert network is not None
    cidr_rule = network.allowed_egress[3]
    assert cidr_rule.cidr is not None
    assert cidr_rule.cidr.except_ == ("10.96.0.0/12",)
    assert [(p.protocol, p.port, p.end_port) for p in cidr_rule.ports] == [
        (None, 5432, None),
        ("TCP", 8000, 8099),
    ]
    assert spec.credentials is not None
    assert (spec.credentials.secret_ref.name, spec.credentials.secret_ref.key) == ("coreweave-api", "token")


# --- presence matters ------------------------------------------------------------------------------------


def test_max_gpu_count_zero_forbids_and_absent_means_no_cap() -> None:
    zero = spec_of(policy={"constraints": {"resources": {"maxGpuCount": 0}}})
    absent = spec_of(policy={"constraints": {"resources": {}}})
    assert zero.policy.constraints
    assert zero.policy.constraints.resources
    assert absent.policy.constraints
    assert absent.policy.constraints.resources
    assert zero.policy.constraints.resources.max_gpu_count == 0
    assert absent.policy.constraints.resources.max_gpu_count is None


def test_empty_affinity_is_kept_apart_from_absent_affinity() -> None:
    cleared = spec_of(overrides={"affinity": {}})
    default = spec_of(overrides={})
    assert cleared.overrides
    assert default.overrides
    assert cleared.overrides.affinity == Affinity()
    assert default.overrides.affinity is None


def test_source_ip_allowlist_absent_empty_and_listed() -> None:
    def allowlist(policy: dict[str, Any]) -> tuple[str, ...] | None:
        access = spec_of(policy=policy).policy.control_plane_access
        if access is None or access.source_ip_allowlist is None:
            return None
        return access.source_ip_allowlist.cidrs

    assert allowlist({}) is None
    assert allowlist({"controlPlaneAccess": {}}) is None
    assert allowlist({"controlPlaneAccess": {"sourceIpAllowlist": {}}}) == ()
    assert allowlist({"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": []}}}) == ()
    assert allowlist({"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["10.0.0.0/8"]}}}) == (
        "10.0.0.0/8",
    )


def test_policy_base_is_an_opaque_dict() -> None:
    base = {"metadata": {"labels": {"a": "b"}}, "spec": {"tolerations": [{"operator": "Exists"}], "x": 1}}
    assert spec_of(policy={"base": base}).policy.base == base


def test_affinity_parses_all_three_kinds() -> None:
    term = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "runner"}}}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
                ]
            }
        },
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": term}]
        },
    }
    spec = spec_of(overrides={"affinity": affinity})
    assert spec.overrides
    assert spec.overrides.affinity
    parsed = spec.overrides.affinity
    assert parsed.node_affinity
    assert parsed.node_affinity.required_during_scheduling_ignored_during_execution
    terms = parsed.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert terms[0].match_fields[0].values == ("n1",)
    assert parsed.pod_anti_affinity
    weighted = parsed.pod_anti_affinity.preferred_during_scheduling_ignored_during_execution[0]
    assert weighted.pod_affinity_term.label_selector
    assert weighted.pod_affinity_term.label_selector.match_labels == {"app": "runner"}
    assert (
        spec.model_dump(by_alias=True, exclude_unset=True, mode="json")["overrides"]["affinity"] == affinity
    )


# --- exactly-one choices ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        [{"name": "A"}],
        [{"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    ],
)
def test_env_needs_exactly_one_of_value_and_value_from(env: list[dict[str, Any]]) -> None:
    with pytest.raises(ValidationError, match="exactly one of value and valueFrom"):
        spec_of(overrides={"env": env})


def test_env_value_may_be_empty() -> None:
    spec = spec_of(overrides={"env": [{"name": "EMPTY", "value": ""}]})
    assert spec.overrides
    assert spec.overrides.env[0].value == ""


@pytest.mark.parametrize(
    "data_plane",
    [{}, {"clusterIp": {}, "custom": {"advertisedUri": "https://r.example.com"}}, {"disabled": False}],
)
def test_data_plane_needs_exactly_one_exposure(data_plane: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one of disabled, clusterIp"):
        spec_of(dataPlane=data_plane)


@pytest.mark.parametrize(
    "data_plane",
    [
        {"disabled": True},
        {"clusterIp": {}},
        {"loadBalancer": {}},
        {"custom": {"advertisedUri": "https://r.example"}},
    ],
)
def test_data_plane_accepts_each_single_exposure(data_plane: dict[str, Any]) -> None:
    assert spec_of(dataPlane=data_plane).data_plane is not None


@pytest.mark.parametrize(
    "rule", [{}, {"any": True, "tenant": "TENANT_SCOPE_SAME_ORG"}, {"ports": [{"port": 1}]}]
)
def test_egress_and_ingress_rules_need_exactly_one_peer(rule: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one of cidr"):
        spec_of(policy={"constraints": {"network": {"allowedEgress": [rule]}}})
    with pytest.raises(ValidationError, match="exactly one of cidr"):
        spec_of(policy={"constraints": {"network": {"defaultIngress": [rule]}}})


def test_port_protocol_is_left_unset_so_the_api_defaults_it() -> None:
    spec = spec_of(
        policy={"constraints": {"network": {"allowedIngress": [{"any": True, "ports": [{"port": 22}]}]}}}
    )
    assert spec.policy.constraints
    assert spec.policy.constraints.network
    assert spec.policy.constraints.network.allowed_ingress[0].ports[0].protocol is None


# --- Secrets ---------------------------------------------------------------------------------------------


def test_env_secret_refs_lists_referenced_keys_once_in_order() -> None:
    def from_secret(var: str, name: str, key: str) -> dict[str, Any]:
        return {"name": var, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}

    env = [
        from_secret("A", "s1", "a"),
        {"name": "PLAIN", "value": "v"},
        from_secret("B", "s2", "b"),
        from_secret("C", "s1", "a"),
        from_secret("D", "s1", "d"),
    ]
    runner = ManagedRunnerResource.from_body(
        body({"overrides": {"env": env}, "credentials": {"secretRef": {"name": "api"}}})
    )
    assert runner.env_secret_refs() == (
        SecretKeySelector(name="s1", key="a"),
        SecretKeySelector(name="s2", key="b"),
        SecretKeySelector(name="s1", key="d"),
    )
    assert runner.spec.secret_names() == {"s1", "s2", "api"}
    assert runner.spec.credentials
    assert runner.spec.credentials.secret_ref.key == "token"


def test_no_overrides_means_no_secret_refs() -> None:
    runner = ManagedRunnerResource.from_body(body())
    assert runner.env_secret_refs() == ()
    assert runner.spec.secret_names() == frozenset()


def test_full_example_secrets() -> None:
    spec = ManagedRunnerResource.from_body(example("managedrunner.yaml")).spec
    assert spec.env_secret_refs() == (SecretKeySelector(name="runner-extra", key="registry-mirror-token"),)
    assert spec.secret_names() == {"runner-extra", "coreweave-api"}


_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True)
_env_vars = st.dictionaries(
    _names,
    st.one_of(
        st.text(max_size=5).map(lambda v: {"value": v}),
        st.tuples(st.sampled_from(["s1", "s2"]), st.sampled_from(["k1", "k2"])).map(
            lambda nk: {"valueFrom": {"secretKeyRef": {"name": nk[0], "key": nk[1]}}}
        ),
    ),
    max_size=6,
)


@given(_env_vars)
def test_env_round_trips_and_refs_match_the_input(env_by_name: dict[str, dict[str, Any]]) -> None:
    env = [{"name": name} | source for name, source in env_by_name.items()]
    parsed = spec_of(overrides={"env": copy.deepcopy(env)})
    assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")["overrides"]["env"] == env
    expected = {
        (s["valueFrom"]["secretKeyRef"]["name"], s["valueFrom"]["secretKeyRef"]["key"])
        for s in env
        if "valueFrom" in s
    }
    refs = parsed.env_secret_refs()
    assert len(refs) == len(expected)
    assert {(r.name, r.key) for r in refs} == expected
