"""compute_update: the minimal, sorted mask; cosmetic differences send nothing; presence is kept."""

from __future__ import annotations

import copy
import typing
from fractions import Fraction
from typing import Any

import pytest
from pydantic.alias_generators import to_camel

from runner_operator.cloud import diff
from runner_operator.cloud.diff import compute_update, immutable_differences, parse_quantity
from runner_operator.cloud.models import CloudRunner, RunnerSpec, WireModel, parse_runner, to_wire
from tests.unit.cloud.fakes import runner_json

DELETE = object()
"""In a patch: remove this key."""

OBSERVED: dict[str, Any] = {
    "identity": {
        "runnerId": "prod-1",
        "runnerGroupId": "default",
        "zone": "us-east-04a",
        "clusterId": "c-1",
        "clusterName": "prod-east",
    },
    "displayName": "Prod",
    "spec": {
        "releaseChannel": "RELEASE_CHANNEL_STABLE",
        "maintenancePolicy": {
            "windows": [{"cron": "0 2 * * SAT", "durationSeconds": 3600}],
            "exclusions": [{"startTime": "2026-12-24T00:00:00Z", "endTime": "2026-12-27T00:00:00Z"}],
        },
        "overrides": {
            "resources": {"cpuRequest": "1", "memoryRequest": "1Gi", "cpuLimit": "500m"},
            "env": {"A": "1", "B": "2"},
            "args": ["--x"],
            "scaling": {"replicas": 2},
            "affinity": {"nodeAffinity": {"preferred": [{"weight": 1}]}},
        },
        "enforceResourceLimits": True,
        "volumes": {"enabled": True, "csiDriverAllowlist": ["csi.vastdata.com"]},
        "tenantMetrics": {"enabled": True, "image": "metrics:1"},
        "imagePull": {"policy": "SANDBOX_IMAGE_PULL_POLICY_ALWAYS"},
        "dataPlane": {"disabled": {}},
    },
    "policy": {
        "displayName": "posture",
        "base": {"metadata": {"labels": {"team": "a", "tier": "b"}}},
        "constraints": {
            "resources": {"maxCpu": "8", "maxMemory": "32Gi", "maxGpuCount": "0"},
            "network": {"allowedEgress": [{"httpsHostname": "pypi.org"}]},
        },
        "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["10.0.0.0/8"]}},
    },
    "etag": "etag-1",
    "installStatus": "RUNNER_INSTALL_STATUS_READY",
    "activeRevision": 3,
}


def _patched(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a nested patch: dicts merge, DELETE removes, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and value and isinstance(out.get(key), dict):
            out[key] = _patched(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _pair(desired: dict[str, Any], observed: dict[str, Any]) -> tuple[CloudRunner, CloudRunner]:
    return (
        CloudRunner.model_validate(_patched(OBSERVED, desired)),
        CloudRunner.model_validate(_patched(OBSERVED, observed)),
    )


def _spec(**fields: Any) -> dict[str, Any]:
    return {"spec": fields}


def _overrides(**fields: Any) -> dict[str, Any]:
    return _spec(overrides=fields)


def _constraints(**fields: Any) -> dict[str, Any]:
    return {"policy": {"constraints": fields}}


CASES = [
    # top level and identity
    pytest.param({}, {}, (), id="identical-sends-nothing"),
    pytest.param({"displayName": "New"}, {}, ("displayName",), id="display-name-changed"),
    pytest.param({"displayName": DELETE}, {}, ("displayName",), id="display-name-removed-resets"),
    pytest.param({"displayName": ""}, {"displayName": DELETE}, (), id="display-name-empty-equals-absent"),
    pytest.param({"identity": {"runnerGroupId": "gpu"}}, {}, ("identity.runnerGroupId",), id="group-changed"),
    pytest.param({"identity": {"runnerGroupId": DELETE}}, {}, (), id="group-absent-equals-default"),
    pytest.param({"identity": {"runnerGroupId": ""}}, {}, (), id="group-empty-equals-default"),
    pytest.param(
        {"identity": {"runnerGroupId": DELETE}},
        {"identity": {"runnerGroupId": "gpu"}},
        ("identity.runnerGroupId",),
        id="group-removed-resets-to-default",
    ),
    pytest.param(
        {"identity": {"zone": "US-WEST-01A", "clusterId": "c-2", "runnerId": "other"}},
        {},
        (),
        id="immutable-identity-never-in-mask",
    ),
    pytest.param({}, {"installStatus": "X", "activeRevision": 9, "etag": "e9"}, (), id="output-only-ignored"),
    # spec.releaseChannel
    pytest.param(
        _spec(releaseChannel="RELEASE_CHANNEL_RAPID"), {}, ("spec.releaseChannel",), id="channel-changed"
    ),
    pytest.param(_spec(releaseChannel=DELETE), {}, (), id="channel-absent-equals-stable"),
    pytest.param(
        _spec(releaseChannel="RELEASE_CHANNEL_UNSPECIFIED"), {}, (), id="channel-unspecified-is-stable"
    ),
    pytest.param(
        _spec(releaseChannel=DELETE),
        _spec(releaseChannel="RELEASE_CHANNEL_RAPID"),
        ("spec.releaseChannel",),
        id="channel-removed-resets",
    ),
    # spec.maintenancePolicy
    pytest.param(
        _spec(maintenancePolicy={"windows": [{"cron": "0 3 * * SUN", "durationSeconds": 3600}]}),
        {},
        ("spec.maintenancePolicy",),
        id="maintenance-window-changed",
    ),
    pytest.param(
        _spec(maintenancePolicy={"windows": [{"cron": "0 2 * * SAT", "durationSeconds": "3600"}]}),
        {},
        (),
        id="maintenance-int-as-string-equal",
    ),
    pytest.param(
        _spec(
            maintenancePolicy={
                "exclusions": [
                    {"startTime": "2026-12-24T01:00:00+01:00", "endTime": "2026-12-27T00:00:00.000Z"}
                ]
            }
        ),
        {},
        (),
        id="maintenance-timestamp-spelling-equal",
    ),
    pytest.param(
        _spec(maintenancePolicy=DELETE), {}, ("spec.maintenancePolicy",), id="maintenance-removed-resets"
    ),
    # spec.overrides (replaced whole)
    pytest.param(_overrides(env={"A": "1", "B": "3"}), {}, ("spec.overrides",), id="overrides-env-changed"),
    pytest.param(_overrides(env={"B": "2", "A": "1"}), {}, (), id="overrides-map-order-equal"),
    pytest.param(
        _overrides(resources={"cpuRequest": "1000m", "memoryRequest": "1024Mi", "cpuLimit": "0.5"}),
        {},
        (),
        id="overrides-quantity-spelling-equal",
    ),
    pytest.param(
        _overrides(resources={"cpuRequest": "1001m"}),
        {},
        ("spec.overrides",),
        id="overrides-quantity-changed",
    ),
    pytest.param(_overrides(scaling={"replicas": "2"}), {}, (), id="overrides-int-as-string-equal"),
    pytest.param(
        _overrides(scaling={"replicas": 2, "autoscalingEnabled": False, "minReplicas": 0}),
        {},
        (),
        id="overrides-zero-values-equal-absent",
    ),
    pytest.param(_overrides(labels={}, annotations={}), {}, (), id="overrides-empty-maps-equal-absent"),
    pytest.param(_overrides(args=[]), _overrides(args=DELETE), (), id="overrides-empty-list-equals-absent"),
    pytest.param(_overrides(args=["--y"]), {}, ("spec.overrides",), id="overrides-args-changed"),
    pytest.param(
        _overrides(affinity={"nodeAffinity": {"preferred": [{"weight": 2}]}}),
        {},
        ("spec.overrides",),
        id="overrides-affinity-changed",
    ),
    pytest.param(
        _overrides(tolerations=[{"key": "gpu", "operator": "Exists"}]),
        {},
        ("spec.overrides",),
        id="overrides-tolerations-added",
    ),
    pytest.param(
        _overrides(nodeSelector={"pool": "cpu"}), {}, ("spec.overrides",), id="overrides-node-selector"
    ),
    pytest.param(_overrides(cpuRuntimeClass="kata"), {}, ("spec.overrides",), id="overrides-runtime-class"),
    pytest.param(_spec(overrides=DELETE), {}, ("spec.overrides",), id="overrides-removed-resets"),
    # other spec fields
    pytest.param(
        _spec(enforceResourceLimits=False), {}, ("spec.enforceResourceLimits",), id="enforce-limits-changed"
    ),
    pytest.param(
        _spec(enforceResourceLimits=False),
        _spec(enforceResourceLimits=DELETE),
        (),
        id="enforce-limits-false-equals-absent",
    ),
    pytest.param(_spec(volumes={"enabled": False}), {}, ("spec.volumes",), id="volumes-changed"),
    pytest.param(_spec(volumes=DELETE), {}, ("spec.volumes",), id="volumes-removed-resets"),
    pytest.param(
        _spec(tenantMetrics={"image": "metrics:2"}), {}, ("spec.tenantMetrics",), id="tenant-metrics"
    ),
    pytest.param(
        _spec(imagePull={"policy": "SANDBOX_IMAGE_PULL_POLICY_IF_NOT_PRESENT"}),
        {},
        ("spec.imagePull",),
        id="image-pull-changed",
    ),
    pytest.param(
        _spec(imagePull={"policy": "SANDBOX_IMAGE_PULL_POLICY_UNSPECIFIED"}),
        _spec(imagePull={"policy": DELETE}),
        (),
        id="image-pull-unspecified-equals-absent",
    ),
    pytest.param(
        _spec(dataPlane=DELETE), {}, ("spec.dataPlane",), id="data-plane-absent-differs-from-disabled"
    ),
    pytest.param(
        _spec(dataPlane={"disabled": DELETE, "clusterIp": {}}),
        {},
        ("spec.dataPlane",),
        id="data-plane-exposure-changed",
    ),
    # policy (replaced whole)
    pytest.param({"policy": {"displayName": "other"}}, {}, ("policy",), id="policy-field-changed"),
    pytest.param({"policy": DELETE}, {}, ("policy",), id="policy-removed"),
    pytest.param({"policy": {}}, {"policy": DELETE}, ("policy",), id="policy-empty-differs-from-absent"),
    pytest.param(
        _constraints(resources={"maxGpuCount": DELETE}),
        {},
        ("policy",),
        id="max-gpu-absent-differs-from-zero",
    ),
    pytest.param(_constraints(resources={"maxGpuCount": 0}), {}, (), id="max-gpu-number-equals-string"),
    pytest.param(_constraints(resources={"maxGpuCount": "2"}), {}, ("policy",), id="max-gpu-changed"),
    pytest.param(
        _constraints(resources={"maxCpu": "8000m", "maxMemory": "32768Mi"}),
        {},
        (),
        id="policy-quantities-equal",
    ),
    pytest.param(
        {"policy": {"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": []}}}},
        {},
        ("policy",),
        id="allowlist-emptied-denies-all",
    ),
    pytest.param(
        {"policy": {"controlPlaneAccess": {"sourceIpAllowlist": DELETE}}},
        {"policy": {"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": []}}}},
        ("policy",),
        id="allowlist-absent-differs-from-empty",
    ),
    pytest.param(
        {"policy": {"base": {"metadata": {"labels": {"tier": "b", "team": "a"}}}}},
        {},
        (),
        id="policy-base-map-order-equal",
    ),
    pytest.param(
        _constraints(network={"dnsEgress": "DNS_EGRESS_MODE_UNSPECIFIED", "denyHttpsHostnameRules": False}),
        {},
        (),
        id="policy-defaults-equal-absent",
    ),
    pytest.param(
        _constraints(network={"allowedEgress": [{"dnsName": "pypi.org"}]}),
        {},
        (),
        id="policy-legacy-alias-equal",
    ),
    # several at once
    pytest.param(
        {"displayName": "New", "policy": {}, **_spec(volumes=DELETE, releaseChannel="RELEASE_CHANNEL_RAPID")},
        {},
        ("displayName", "policy", "spec.releaseChannel", "spec.volumes"),
        id="several-paths-sorted",
    ),
]


@pytest.mark.parametrize(("desired", "observed", "mask"), CASES)
def test_mask(desired: dict[str, Any], observed: dict[str, Any], mask: tuple[str, ...]) -> None:
    update = compute_update(*_pair(desired, observed))
    assert (update.mask if update else ()) == mask


def test_every_spec_field_has_a_case() -> None:
    covered = {
        p for case in CASES for p in typing.cast(tuple[str, ...], case.values[2]) if p.startswith("spec.")
    }
    assert covered == {f"spec.{to_camel(name)}" for name in RunnerSpec.model_fields}


def test_removed_field_is_absent_from_the_body() -> None:
    update = compute_update(*_pair(_spec(volumes=DELETE), {}))
    assert update is not None
    assert to_wire(update.body, request=True) == {"identity": {"runnerId": "prod-1"}, "spec": {}}


def test_group_reset_sends_no_group() -> None:
    update = compute_update(
        *_pair({"identity": {"runnerGroupId": ""}}, {"identity": {"runnerGroupId": "gpu"}})
    )
    assert update is not None
    assert to_wire(update.body) == {"identity": {"runnerId": "prod-1"}}


def test_overrides_are_sent_whole() -> None:
    desired, observed = _pair(_overrides(env={"A": "1", "B": "3"}), {})
    update = compute_update(desired, observed)
    assert update is not None
    assert desired.spec is not None
    assert update.body.spec is not None
    assert update.body.spec.overrides == desired.spec.overrides
    assert set(to_wire(update.body.spec)) == {"overrides"}


def test_policy_is_sent_whole_with_the_observed_etag() -> None:
    desired, observed = _pair(_constraints(resources={"maxGpuCount": "1"}), {"etag": "etag-7"})
    update = compute_update(desired, observed)
    assert update is not None
    assert update.etag == "etag-7"
    assert update.body.etag == "etag-7"
    assert update.body.policy == desired.policy


def test_no_etag_without_policy_in_the_mask() -> None:
    update = compute_update(*_pair({"displayName": "New"}, {}))
    assert update is not None
    assert update.etag is None
    assert update.body.policy is None
    assert "etag" not in to_wire(update.body)


@pytest.mark.parametrize(
    ("desired", "expected"),
    [
        pytest.param({}, (), id="same"),
        pytest.param({"identity": {"zone": "US-EAST-04A"}}, (), id="zone-case-ignored"),
        pytest.param({"identity": {"zone": "us-west-01a"}}, ("identity.zone",), id="zone"),
        pytest.param({"identity": {"clusterId": "c-2"}}, ("identity.clusterId",), id="cluster"),
        pytest.param({"identity": {"runnerId": "x"}}, ("identity.runnerId",), id="runner-id"),
        pytest.param({"identity": {"zone": DELETE, "clusterId": ""}}, (), id="unset-is-not-a-difference"),
    ],
)
def test_immutable_differences(desired: dict[str, Any], expected: tuple[str, ...]) -> None:
    assert immutable_differences(*_pair(desired, {})) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("1", Fraction(1), id="plain"),
        pytest.param("1000m", Fraction(1), id="milli"),
        pytest.param("0.5", Fraction(1, 2), id="decimal"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
        pytest.param("1Gi", Fraction(2**30), id="gibi"),
        pytest.param("1024Mi", Fraction(2**30), id="mebi"),
        pytest.param("1.5Ki", Fraction(1536), id="fractional-binary"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param("2E", Fraction(2 * 10**18), id="exa-not-exponent"),
        pytest.param("100n", Fraction(1, 10**7), id="nano"),
        pytest.param("+3k", Fraction(3000), id="signed"),
        pytest.param(" 4M ", Fraction(4 * 10**6), id="whitespace"),
        pytest.param("abc", None, id="garbage"),
        pytest.param("1GB", None, id="bad-suffix"),
        pytest.param("", None, id="empty"),
    ],
)
def test_parse_quantity(text: str, value: Fraction | None) -> None:
    assert parse_quantity(text) == value


def test_parse_quantity_is_remembered_for_short_spellings_only() -> None:
    assert parse_quantity("1536Mi") is parse_quantity("1536Mi")
    long = "1" + "0" * diff.QUANTITY_KEPT_LENGTH  # a field without a length limit: not kept
    assert parse_quantity(long) == 10**diff.QUANTITY_KEPT_LENGTH
    assert parse_quantity(long) is not parse_quantity(long)


def test_a_runner_echoed_as_sent_builds_no_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common pass: the server echoes what was sent, and equal values need no semantic form."""
    wire = runner_json("a", policy={"base": {"x": 1}, "constraints": {"resources": {"maxCpu": "500m"}}})
    sent, echoed = parse_runner(wire), parse_runner(copy.deepcopy(wire))
    assert sent.policy is not echoed.policy
    built: list[object] = []
    real = diff._form

    def spy(value: object, marks: frozenset[str]) -> object:
        built.append(value)
        return real(value, marks)

    monkeypatch.setattr(diff, "_form", spy)
    assert compute_update(sent, echoed) is None
    assert not [value for value in built if isinstance(value, WireModel)]


def test_the_semantic_form_memo_is_by_identity_and_bounded() -> None:
    first = parse_runner(runner_json("a", policy={"base": {"x": 1}}))
    equal = parse_runner(runner_json("a", policy={"base": {"x": 1}}))
    form = diff.semantic_form(first)
    assert diff.semantic_form(first) is form  # the same model: remembered
    assert diff.semantic_form(equal) == form  # an equal model: computed, same value
    assert diff.semantic_form(equal) is not form
    for i in range(diff._FORMS_KEPT + 10):
        diff.semantic_form(parse_runner(runner_json(f"r{i}")))
    assert len(diff._FORMS) <= diff._FORMS_KEPT
    assert diff.semantic_form(first) == form  # evicted, then computed again
