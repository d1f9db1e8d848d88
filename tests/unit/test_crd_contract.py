"""The ManagedRunner CRD is structural, documented and accepted by the API server; models, examples agree."""

from __future__ import annotations

import json
import re
import subprocess
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pydantic
import pytest
import yaml
from pydantic import BaseModel

from runner_operator import resource, status
from tests.testenv.tools import tool

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "managedrunners.sandbox.coreweave.com.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

Schema = dict[str, Any]


def _load_crd() -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(CRD_PATH.read_text()) if doc]
    assert len(docs) == 1
    crd: dict[str, Any] = docs[0]
    return crd


CRD = _load_crd()
VERSION = CRD["spec"]["versions"][0]
ROOT_SCHEMA: Schema = VERSION["schema"]["openAPIV3Schema"]
SPEC_SCHEMA: Schema = ROOT_SCHEMA["properties"]["spec"]
STATUS_SCHEMA: Schema = ROOT_SCHEMA["properties"]["status"]


def _nodes(node: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node with a readable path (properties, items, additionalProperties)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def _properties(node: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    for node_path, child in _nodes(node, path):
        if node_path and not node_path.endswith(("[]", "}")):
            yield node_path, child


def _strip_kubernetes_extensions(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _strip_kubernetes_extensions(v) for k, v in node.items() if not k.startswith("x-kubernetes-")
        }
    if isinstance(node, list):
        return [_strip_kubernetes_extensions(v) for v in node]
    return node


def _load_example(path: Path) -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert len(docs) == 1, f"{path.name}: one ManagedRunner per file"
    body: dict[str, Any] = docs[0]
    return body


VALIDATOR = jsonschema.Draft7Validator(_strip_kubernetes_extensions(ROOT_SCHEMA))


# --- the CRD itself ------------------------------------------------------------------------------------


def test_crd_names_scope_and_version() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == f"{resource.PLURAL}.{resource.GROUP}"
    assert spec["group"] == resource.GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": resource.KIND,
        "listKind": f"{resource.KIND}List",
        "plural": resource.PLURAL,
        "singular": "managedrunner",
        "shortNames": ["mrun"],
        "categories": ["coreweave"],
    }
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        (resource.VERSION, True, True)
    ]
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = {c["name"]: c for c in VERSION["additionalPrinterColumns"]}
    assert list(columns)[:7] == ["Runner", "Ready", "Synced", "Phase", "Connection", "Revision", "Target"]
    assert columns["Synced"]["jsonPath"] == '.status.conditions[?(@.type=="Synced")].status'
    assert columns["Connection"]["jsonPath"] == ".status.connection"  # one word, not RUNNER_CONNECTION_...
    assert list(columns)[-1] == "Age"
    assert columns["Runner"]["jsonPath"] == ".spec.runnerId"
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_every_node_is_structural() -> None:
    for path, node in _nodes(ROOT_SCHEMA):
        has_type = "type" in node
        assert (
            has_type
            or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")
        ), f"{path or '<root>'} has no type"
        for forbidden in ("$ref", "definitions", "additionalItems", "dependencies", "patternProperties"):
            assert forbidden not in node, f"{path}: {forbidden} is not allowed in a structural schema"
        if node.get("type") == "object":
            assert not ("properties" in node and "additionalProperties" in node), path


def test_every_property_has_a_description() -> None:
    # The API server accepts nothing but `type: object` for the root metadata.
    assert ROOT_SCHEMA["properties"]["metadata"] == {"type": "object"}
    missing = [
        path
        for path, node in _properties(ROOT_SCHEMA)
        if path != ".metadata" and not node.get("description", "").strip()
    ]
    assert missing == []


# The API server refuses a CRD whose CEL rules it estimates above these (apiextensions validation):
# 100M for all rules together, 10M for one rule. The margin leaves room for other API-server versions'
# estimators (the CRD promises Kubernetes >= 1.32) and for the next rule.
CEL_TOTAL_BUDGET_SHARE = 0.8
CEL_RULE_LIMIT_SHARE = 0.9


def test_the_api_server_accepts_the_crd_with_a_cel_cost_margin() -> None:
    """The API server's own CRD validation (structural schema, CEL compilation, estimated cost) passes.

    Bounds on strings, lists and maps are only there for what CEL cost needs (and what the contract or
    Kubernetes state); the estimator decides which are needed, not a rule that every node has one.
    """
    checked = subprocess.run(
        [tool("managed-runner-validate"), "--crd", str(CRD_PATH), "--check-crd"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(checked.stdout)
    assert report["errors"] == [], checked.stdout
    assert checked.returncode == 0, checked.stderr
    assert report["rules"] >= 100, "every x-kubernetes-validations rule is costed"
    assert report["totalLimit"] == 100_000_000
    assert report["ruleLimit"] == 10_000_000
    assert report["totalCost"] <= CEL_TOTAL_BUDGET_SHARE * report["totalLimit"], report
    assert report["maxRuleCost"] <= CEL_RULE_LIMIT_SHARE * report["ruleLimit"], report


def test_list_map_keys_are_required() -> None:
    for path, node in _nodes(ROOT_SCHEMA):
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), path


def test_validation_rules_are_explained_and_point_at_real_fields() -> None:
    for path, node in _nodes(ROOT_SCHEMA):
        for validation in node.get("x-kubernetes-validations", []):
            assert validation.get("message") or validation.get("messageExpression"), f"{path}: {validation}"
            assert validation.get("reason", "FieldValueInvalid") in {
                "FieldValueInvalid",
                "FieldValueForbidden",
                "FieldValueRequired",
                "FieldValueDuplicate",
            }
            field_path = validation.get("fieldPath")
            if field_path:
                assert re.fullmatch(r"(\.[A-Za-z]+)+", field_path), field_path
                target = node
                for part in field_path.split(".")[1:]:
                    target = target["properties"][part]
            if "oldSelf" in validation["rule"]:
                assert path == ".spec", "transition rules live on spec only"


@pytest.mark.parametrize("field", ["runnerId", "clusterId", "zone"])
def test_identity_is_required_and_immutable(field: str) -> None:
    assert field in SPEC_SCHEMA["required"]
    transition = [v for v in SPEC_SCHEMA["x-kubernetes-validations"] if v.get("fieldPath") == f".{field}"]
    assert [v["rule"] for v in transition] == [
        f"self.{field} == oldSelf.{field} || self.?replacementPolicy.orValue('Reject') == 'Replace'"
    ]
    message = transition[0]["message"]
    assert message.startswith(f"{field} is immutable: ")
    assert "create a new ManagedRunner" in message
    assert "replacementPolicy: Replace" in message


def test_policy_is_required() -> None:
    assert "policy" in SPEC_SCHEMA["required"]


def test_conditions_support_kubectl_wait() -> None:
    conditions = STATUS_SCHEMA["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert conditions["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


# --- CRD <-> resource.py ---------------------------------------------------------------------------------


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        assert len(args) == 1, annotation
        return args[0]
    return annotation


def _compare(schema: Schema, annotation: Any, path: str) -> list[str]:
    """Where the model at `path` and the CRD's schema disagree (empty when they agree)."""
    annotation = _unwrap_optional(annotation)
    origin = typing.get_origin(annotation)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        # Opaque to the models (declared sub-properties exist only for CEL rules).
        ok = origin is dict and typing.get_args(annotation) == (str, Any)
        return [] if ok else [f"{path}: {annotation} for an opaque object"]
    kind = schema["type"]
    if kind == "object" and "properties" in schema:
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return [f"{path}: {annotation} is not a model"]
        fields = {(info.alias or name): info for name, info in annotation.model_fields.items()}
        if set(fields) != set(schema["properties"]):
            return [f"{path}: fields {sorted(set(fields) ^ set(schema['properties']))} in one only"]
        problems = []
        required = {alias for alias, info in fields.items() if info.is_required()}
        if required != set(schema.get("required", [])):
            problems.append(
                f"{path}: required {sorted(required)} against {sorted(schema.get('required', []))}"
            )
        for alias, child in schema["properties"].items():
            if "default" in child and fields[alias].default != child["default"]:
                problems.append(
                    f"{path}.{alias}: default {fields[alias].default!r} against {child['default']!r}"
                )
            problems += _compare(child, fields[alias].annotation, f"{path}.{alias}")
        return problems
    if kind == "object":
        if origin is not dict:
            return [f"{path}: {annotation} for a map"]
        return _compare(schema["additionalProperties"], typing.get_args(annotation)[1], f"{path}{{}}")
    if kind == "array":
        if origin is not tuple or typing.get_args(annotation)[1] is not Ellipsis:
            return [f"{path}: {annotation} for a list"]
        return _compare(schema["items"], typing.get_args(annotation)[0], f"{path}[]")
    if "enum" in schema:
        if origin is not Literal or set(typing.get_args(annotation)) != set(schema["enum"]):
            return [f"{path}: {annotation} for enum {schema['enum']}"]
        return []
    expected = {"string": str, "integer": int, "boolean": bool}[kind]
    return [] if annotation is expected else [f"{path}: {annotation} for {kind}"]


def test_spec_schema_and_models_agree() -> None:
    assert _compare(SPEC_SCHEMA, resource.ManagedRunnerSpec, ".spec") == []


def test_contract_walk_notices_a_renamed_field() -> None:
    renamed = yaml.safe_load(yaml.safe_dump(SPEC_SCHEMA))
    renamed["properties"]["maintenancePolicy"]["properties"]["windows"]["items"]["properties"][
        "durationSecs"
    ] = renamed["properties"]["maintenancePolicy"]["properties"]["windows"]["items"]["properties"].pop(
        "durationSeconds"
    )
    assert _compare(renamed, resource.ManagedRunnerSpec, ".spec") == [
        ".spec.maintenancePolicy.windows[]: fields ['durationSeconds', 'durationSecs'] in one only"
    ]


# --- CRD <-> status.py -----------------------------------------------------------------------------------

NOT_WRITTEN = {
    ".status.kopf": "kopf's storage from earlier releases (handler progress, last handled spec): nothing "
    "writes it now; the kopf layer removes it with the next status write, outside StatusPatch",
}
"""Status properties the CRD declares that the operator's status patch never writes, with the reason."""


def _check_written(
    schema: Schema, annotation: Any, path: str, not_written: Mapping[str, str] = NOT_WRITTEN
) -> None:
    """Everything the model can write is declared with a compatible type; the rest is listed as not written.

    Unlike the spec (read as stored), the status is written: a model field the CRD lacks is pruned
    silently, and a field the CRD requires must be required by the model too.
    """
    annotation = _unwrap_optional(annotation)
    origin = typing.get_origin(annotation)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        assert origin is dict, f"{path}: {annotation}"
        assert typing.get_args(annotation) == (str, Any), path
        return
    kind = schema["type"]
    if kind == "object":
        assert isinstance(annotation, type), f"{path}: {annotation}"
        assert issubclass(annotation, BaseModel), f"{path}: {annotation}"
        fields = {(info.alias or name): info for name, info in annotation.model_fields.items()}
        declared = schema["properties"]
        pruned = sorted(set(fields) - set(declared))
        assert pruned == [], f"{path}: the API server would prune {pruned}"
        unaccounted = sorted(
            f"{path}.{p}" for p in set(declared) - set(fields) if f"{path}.{p}" not in not_written
        )
        assert unaccounted == [], f"neither modelled nor listed in NOT_WRITTEN: {unaccounted}"
        required = {alias for alias, info in fields.items() if info.is_required()}
        missing = sorted(set(schema.get("required", [])) - required)
        assert missing == [], f"{path}: the CRD requires {missing}, the model may leave them out"
        for alias, info in fields.items():
            _check_written(declared[alias], info.annotation, f"{path}.{alias}", not_written)
    elif kind == "array":
        assert origin is tuple, f"{path}: {annotation}"
        assert typing.get_args(annotation)[1] is Ellipsis, f"{path}: {annotation}"
        _check_written(schema["items"], typing.get_args(annotation)[0], f"{path}[]", not_written)
    elif origin is Literal:
        values = typing.get_args(annotation)
        assert kind == "string", f"{path}: {annotation} for {kind}"
        assert all(isinstance(v, str) for v in values), path
        assert set(values) <= set(schema.get("enum", values)), f"{path}: {values} outside {schema['enum']}"
    else:
        assert "enum" not in schema, f"{path}: an enum needs a Literal, not {annotation}"
        expected = {"string": str, "integer": int, "boolean": bool}[kind]
        assert annotation is expected, f"{path}: {annotation} for {kind}"


def test_status_schema_and_models_agree() -> None:
    _check_written(STATUS_SCHEMA, status.StatusPatch, ".status")


def test_unwritten_status_properties_exist_and_are_not_modelled() -> None:
    written = {f".status.{info.alias}" for info in status.StatusPatch.model_fields.values()}
    for path, reason in NOT_WRITTEN.items():
        assert path.removeprefix(".status.") in STATUS_SCHEMA["properties"], path
        assert path not in written, f"{path} is modelled now: drop it from NOT_WRITTEN"
        assert reason.strip(), path


def test_status_contract_walk_needs_unwritten_properties_listed() -> None:
    with pytest.raises(AssertionError, match=r"\['\.status\.kopf'\]"):
        _check_written(STATUS_SCHEMA, status.StatusPatch, ".status", not_written={})


def test_a_full_status_patch_validates_against_the_crd() -> None:
    stamp = "2026-12-02T12:00:00Z"
    condition = status.Condition(
        type="Ready",
        status="True",
        reason="Available",
        message="up",
        last_transition_time=stamp,
        observed_generation=2,
    )
    full = status.StatusPatch(
        observed_generation=2,
        conditions=(condition,),
        phase="Ready",
        runner_id="prod-1",
        adopted=False,
        create_request_id="6c1d3f0e-3a55-4d4c-9c55-7f0f1c0b2d11",
        create_requested_time="2026-12-02T12:00:00.123456Z",
        recreations=1,
        credential_fingerprint="f" * 64,
        credentials_secret="coreweave-token",
        cluster_name="prod",
        install_status="RUNNER_INSTALL_STATUS_READY",
        connection_status="RUNNER_CONNECTION_STATUS_CONNECTED",
        connection="Connected",
        active_revision=3,
        target_revision=3,
        rollout_in_progress=False,
        update_available=True,
        update_available_since=stamp,
        last_update_request=status.UpdateRequest(request="2026-12-04", outcome="Applied", time=stamp),
        last_applied_update=status.AppliedUpdate(
            trigger="Request",
            request="2026-12-04",
            time=stamp,
            from_revision=2,
            to_revision=3,
            release_channel="RELEASE_CHANNEL_STABLE",
        ),
        active_config_version="v1.2.3",
        install_error=status.InstallError(
            reason="IMAGE_PULL",
            message="no",
            diagnostic_detail="d",
            remediation_hints=("fix",),
            occurred_at=stamp,
        ),
        data_plane_status={"state": "READY", "protocols": ["grpc"]},
        create_time=stamp,
        update_time=stamp,
        last_heartbeat_time=stamp,
        etag="e1",
        last_observed_time=stamp,
        replacement=status.Replacement(
            from_runner_id="old", to_runner_id="prod-1", phase="Creating", started_time=stamp
        ),
        plan=status.PlanPreview(action="update", update_mask=("spec.overrides.env",)),
        deletion=status.DeletionProgress(requested_time=stamp, deadline_time=stamp, stalled=False),
    )
    patch = full.to_patch()
    assert set(patch) == {info.alias for info in status.StatusPatch.model_fields.values()}
    validator = jsonschema.Draft7Validator(_strip_kubernetes_extensions(STATUS_SCHEMA))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(patch)] == []


def _copied(
    model: type[BaseModel],
    *,
    rename: Mapping[str, str] | None = None,
    retype: Mapping[str, Any] | None = None,
    drop: tuple[str, ...] = (),
) -> type[BaseModel]:
    """A status model after a careless edit: a field renamed, retyped (made optional too) or dropped."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in drop:
            continue
        annotation = (retype or {}).get(name, info.annotation)
        required = info.is_required() and name not in (retype or {})
        fields[(rename or {}).get(name, name)] = (annotation, ... if required else None)
    copied: type[BaseModel] = pydantic.create_model(
        f"Copied{model.__name__}", __base__=status.Patchable, **fields
    )
    return copied


@pytest.mark.parametrize(
    ("model", "match"),
    [
        pytest.param(
            _copied(status.StatusPatch, rename={"create_requested_time": "create_requested_at"}),
            r"prune \['createRequestedAt'\]",
            id="renamed-field",
        ),
        pytest.param(
            _copied(
                status.StatusPatch,
                retype={
                    "deletion": _copied(status.DeletionProgress, rename={"deadline_time": "deadline"}) | None
                },
            ),
            r"\.status\.deletion: the API server would prune \['deadline'\]",
            id="renamed-nested-field",
        ),
        pytest.param(
            _copied(status.StatusPatch, retype={"recreations": str | None}),
            r"\.status\.recreations: <class 'str'> for integer",
            id="wrong-type",
        ),
        pytest.param(
            _copied(status.StatusPatch, drop=("etag",)),
            r"neither modelled nor listed in NOT_WRITTEN: \['\.status\.etag'\]",
            id="unaccounted-property",
        ),
        pytest.param(
            _copied(
                status.StatusPatch,
                retype={
                    # A model built at run time, used as a type on purpose (mypy cannot follow it).
                    "conditions": tuple[_copied(status.Condition, retype={"reason": str | None}), ...]  # type: ignore[misc]
                    | None
                },
            ),
            r"\.status\.conditions\[\]: the CRD requires \['reason'\]",
            id="optional-required-field",
        ),
    ],
)
def test_status_contract_walk_notices_a_careless_edit(model: type[BaseModel], match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        _check_written(STATUS_SCHEMA, model, ".status")


# --- examples ---------------------------------------------------------------------------------------------


def test_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {"managedrunner.yaml", "minimal.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_against_the_crd_schema(path: Path) -> None:
    body = _load_example(path)
    assert body["apiVersion"] == f"{resource.GROUP}/{resource.VERSION}"
    assert body["kind"] == resource.KIND
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(body)]
    assert errors == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses_and_round_trips_through_the_models(path: Path) -> None:
    body = _load_example(path) | {"metadata": {"name": "x", "namespace": "y", "uid": "u", "generation": 1}}
    runner = resource.ManagedRunnerResource.from_body(body)
    assert runner.spec.model_dump(by_alias=True, exclude_unset=True, mode="json") == body["spec"]


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        (("runnerId",), "Prod_1"),
        (("runnerId",), "x" * 64),
        (("clusterId",), "not-a-uuid"),
        (("releaseChannel",), "RELEASE_CHANNEL_UNSPECIFIED"),
        (("maintenancePolicy", "windows", 0, "durationSeconds"), 59),
        (("overrides", "tolerations", 0, "operator"), "Gt"),
        (
            (
                "overrides",
                "affinity",
                "nodeAffinity",
                "preferredDuringSchedulingIgnoredDuringExecution",
                0,
                "weight",
            ),
            0,
        ),
        (("policy", "constraints", "lifecycle", "defaultLifetimeSeconds"), 2592001),
        (("policy", "constraints", "resources", "maxGpuCount"), -1),
        (("policy", "constraints", "network", "allowedEgress", 3, "ports", 0, "port"), 0),
        (("policy", "constraints", "network", "allowedEgress", 0, "httpsHostname"), "*.*.example.com"),
        (("deletionPolicy",), "Retain"),
    ],
)
def test_schema_rejects_bad_values(pointer: tuple[str | int, ...], value: object) -> None:
    body = _load_example(ROOT / "examples" / "managedrunner.yaml")
    target: Any = body["spec"]
    for key in pointer[:-1]:
        target = target[key]
    target[pointer[-1]] = value
    assert list(VALIDATOR.iter_errors(body)), f"{pointer} = {value!r} was accepted"


def test_schema_requires_identity_and_policy() -> None:
    for field in ("runnerId", "clusterId", "zone", "policy"):
        body = _load_example(ROOT / "examples" / "minimal.yaml")
        del body["spec"][field]
        assert list(VALIDATOR.iter_errors(body)), field
