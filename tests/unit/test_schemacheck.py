"""The offline CRD check `plan` runs: the API server's verdicts, and clear failures of the helper."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner_operator import schemacheck
from tests.testenv.tools import tool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def validator() -> str:
    return tool(schemacheck.EXECUTABLE)


def named(doc: dict[str, Any], name: str = "r") -> dict[str, Any]:
    return {**doc, "metadata": {"name": name, "namespace": "team"}}


def minimal() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "minimal.yaml").read_text())
    return named(doc)


def test_the_examples_are_accepted(validator: str) -> None:
    docs = [named(yaml.safe_load(p.read_text())) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    assert len(docs) >= 2
    assert schemacheck.refusals(docs, validator) == [None] * len(docs)


def test_every_error_of_a_manifest_is_in_its_refusal_and_others_are_untouched(validator: str) -> None:
    bad = minimal()
    bad["spec"] = {**bad["spec"], "runnerId": "dev_us", "zone": "US-EAST-04A", "deletionPolicy": "Keep"}
    verdicts = schemacheck.refusals([minimal(), bad], validator)
    assert verdicts[0] is None
    refusal = verdicts[1]
    assert refusal is not None
    assert refusal.startswith('ManagedRunner.sandbox.coreweave.com "r" is invalid: [')
    assert 'spec.deletionPolicy: Unsupported value: "Keep"' in refusal
    assert 'spec.runnerId: Invalid value: "dev_us": spec.runnerId in body should match' in refusal
    # As the API server does: the CEL rules (the zone's) wait until the schema errors are fixed.
    assert "zone must be lower-case" not in refusal
    assert "some validation rules were not checked because the object was invalid" in refusal


def test_an_unknown_field_is_refused_as_strict_field_validation_does(validator: str) -> None:
    doc = minimal()
    doc["spec"] = {**doc["spec"], "replicas": 3}
    [refusal] = schemacheck.refusals([doc], validator)
    assert refusal is not None
    assert 'strict decoding error: unknown field "spec.replicas"' in refusal


def test_metadata_is_checked_like_the_api_server(validator: str) -> None:
    [refusal] = schemacheck.refusals([named(minimal(), "Not_A_Name")], validator)
    assert refusal is not None
    assert "metadata.name: Invalid value" in refusal


def test_no_documents_runs_nothing() -> None:
    assert schemacheck.refusals([], "/nonexistent/validator") == []


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-validator"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("echo 'no CRD' >&2; exit 3", "failed (exit 3): no CRD"),
        ("echo not-json", "gave an answer this version cannot read"),
        ("echo '[]'", "gave 0 verdicts for 1 manifests"),
        ("echo '[{\"error\": 7}]'", "gave 1 verdicts for 1 manifests"),
        ("echo '[{}]'", "gave an answer this version cannot read"),
    ],
)
def test_a_helper_that_gives_no_verdict_is_a_clear_failure(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(schemacheck.ValidatorFailed, match=r".*") as failed:
        schemacheck.refusals([minimal()], script(tmp_path, body))
    assert says in str(failed.value)


def test_the_helper_is_found_on_path_or_through_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(schemacheck.VARIABLE, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert schemacheck.executable() is None
    fake = tmp_path / schemacheck.EXECUTABLE
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert schemacheck.executable() == str(fake)
    monkeypatch.setenv(schemacheck.VARIABLE, "/nonexistent/validator")
    with pytest.raises(schemacheck.ValidatorFailed, match="is not an executable file"):
        schemacheck.executable()
