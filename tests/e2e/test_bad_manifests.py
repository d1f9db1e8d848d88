"""Every manifest in tests/support/bad_manifests is rejected by the real API server at apply time.

The rejection comes from the CRD alone (structural OpenAPI schema + CEL); no operator runs. Each case
gets a fresh namespace and is sent twice, as `kubectl apply --server-side` and as `kubectl create`, and
must fail with the expected message without storing anything. Immutable-change cases first create
their valid base, then apply the change, which must leave the stored object untouched.

Field validation mode: both commands pass `--validate=strict` explicitly (kubectl's default since 1.27),
i.e. `fieldValidation=Strict`. Unknown fields are rejected by server-side apply whatever the mode
("field not declared in schema": the typed patch cannot be built) and by create only in Strict mode
("strict decoding error: unknown field"); with `--validate=false` create silently prunes them, which
`test_create_prunes_unknown_fields_without_strict_validation` pins down.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner_operator import cli, schemacheck
from tests.e2e.kube import Kube
from tests.support.bad_manifests import DIR, Case, cases
from tests.support.good_manifests import manifests as good_manifests
from tests.testenv.localcluster import free_port
from tests.testenv.tools import tool

GROUP, VERSION, PLURAL = "sandbox.coreweave.com", "v1alpha1", "managedrunners"
CASES = cases()
STRICT = "--validate=strict"


def params() -> list[Any]:
    out = []
    for case in CASES:
        marks = (
            [pytest.mark.xfail(strict=True, reason=f"CRD gap: {case.known_gap}")] if case.known_gap else []
        )
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def stored(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(GROUP, VERSION, namespace, PLURAL, name)


def fingerprint(obj: dict[str, Any] | None) -> tuple[Any, ...] | None:
    if obj is None:
        return None
    meta = obj["metadata"]
    return meta["resourceVersion"], meta["generation"], obj["spec"]


def assert_rejected(proc: Any, expect: str, what: str) -> None:
    assert proc.returncode != 0, f"{what} was accepted:\n{proc.stdout}"
    assert expect in proc.stderr, f"{what}: expected {expect!r} in the error, got:\n{proc.stderr}"


@pytest.mark.parametrize("case", params())
def test_bad_manifest_is_rejected_at_apply_time(kube: Kube, crd: str, case: Case) -> None:
    ns = kube.new_namespace("bad")
    before = None
    if case.update:
        assert case.base is not None
        kube.kubectl("apply", "--server-side", STRICT, "-n", ns, "-f", str(case.base))
        before = stored(kube, ns, case.object_name)
        assert before is not None

    applied = kube.kubectl("apply", "--server-side", STRICT, "-n", ns, "-f", str(case.path), check=False)
    assert_rejected(applied, case.expect, f"kubectl apply --server-side of {case.name}")
    assert fingerprint(stored(kube, ns, case.object_name)) == fingerprint(before)

    if not case.update:
        created = kube.kubectl("create", STRICT, "-n", ns, "-f", str(case.path), check=False)
        assert_rejected(created, case.expect_create, f"kubectl create of {case.name}")
        assert stored(kube, ns, case.object_name) is None


@pytest.mark.parametrize("base", [pytest.param(p, id=p.stem) for p in sorted((DIR / "base").glob("*.yaml"))])
def test_base_manifests_are_accepted(kube: Kube, crd: str, base: Path) -> None:
    """Positive control: the valid manifests the cases derive from pass the same validation."""
    ns = kube.new_namespace("good")
    kube.kubectl("apply", "--server-side", STRICT, "-n", ns, "-f", str(base))
    name = yaml.safe_load(base.read_text())["metadata"]["name"]
    assert stored(kube, ns, name) is not None


def test_create_prunes_unknown_fields_without_strict_validation(kube: Kube, crd: str) -> None:
    """Why the corpus pins --validate=strict: with fieldValidation=Ignore an unknown field is dropped."""
    case = next(c for c in CASES if c.name == "unknown-field-spec")
    ns = kube.new_namespace("lax")
    created = kube.kubectl("create", "--validate=false", "-n", ns, "-f", str(case.path), check=False)
    assert created.returncode == 0, created.stderr
    obj = stored(kube, ns, case.object_name)
    assert obj is not None
    assert "replicas" not in obj["spec"]
    lax_apply = kube.kubectl(
        "apply", "--server-side", "--validate=false", "-n", ns, "-f", str(case.path), check=False
    )
    assert lax_apply.returncode != 0
    assert "field not declared in schema" in lax_apply.stderr


@pytest.mark.parametrize("case", params())
def test_plan_refuses_the_bad_manifest_with_the_crds_message(
    kube: Kube, crd: str, case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runner-operator plan` dry-runs the apply on the API server before it reads the cloud: the
    same refusal, in one line, exit 1, and no API call (the endpoint below answers nothing)."""
    ns = kube.new_namespace("badplan")
    if case.update:
        assert case.base is not None
        kube.kubectl("apply", "--server-side", STRICT, "-n", ns, "-f", str(case.base))
    token = tmp_path / "token"
    token.write_text("CW-SECRET-never-sent")
    argv = ["plan", "-f", str(case.path), "-n", ns, "--kubeconfig", str(kube.kubeconfig)]
    status = cli.main([*argv, "--endpoint", f"http://127.0.0.1:{free_port()}", "--token-file", str(token)])
    gc.collect()  # a TLS connection `plan` left open would warn here, in this test, not in a later one
    err = capsys.readouterr().err
    assert status == 1, err
    assert case.expect in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("case", params())
def test_plan_offline_refuses_the_bad_manifest_with_the_crds_message(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a cluster, `plan` refuses with the API server's own words for a create (`kubectl
    create --validate=strict`), through managed-runner-validate, before any API call (the endpoint
    answers nothing). A change to an immutable field is checked against the version it replaces,
    given with --against (in CI: the previous commit's manifest)."""
    monkeypatch.setenv(schemacheck.VARIABLE, tool("managed-runner-validate"))
    token = tmp_path / "token"
    token.write_text("CW-SECRET-never-sent")
    argv = ["plan", "-f", str(case.path), "--offline", "-n", "offline"]
    if case.update:
        assert case.base is not None
        argv += ["--against", str(case.base)]
    status = cli.main([*argv, "--endpoint", f"http://127.0.0.1:{free_port()}", "--token-file", str(token)])
    err = capsys.readouterr().err
    assert status == 1, err
    assert f"the CRD refuses ManagedRunner offline/{case.object_name}: " in err, err
    assert (case.expect if case.update else case.expect_create) in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("case", [p for p in params() if p.values[0].update])
def test_an_immutable_change_is_a_valid_manifest_on_its_own(case: Case) -> None:
    """Why --against exists: without the version it replaces, the changed manifest is a valid create."""
    assert case.base is not None
    doc = {**case.document, "metadata": {**case.document["metadata"], "namespace": "offline"}}
    base = yaml.safe_load(case.base.read_text())
    old = {**base, "metadata": {**base["metadata"], "namespace": "offline"}}
    program = tool("managed-runner-validate")
    assert schemacheck.refusals([doc], program) == [None]
    [refusal] = schemacheck.refusals([doc], program, [old])
    assert refusal is not None
    assert case.expect in refusal
    assert schemacheck.refusals([old], program, [old]) == [None]  # an unchanged re-apply passes


@pytest.mark.parametrize(("path", "twin"), [pytest.param(p, t, id=p.stem) for p, _, t in good_manifests()])
def test_good_twin_is_accepted_offline(path: Path, twin: str) -> None:
    """The offline check refuses no more than the API server: every good twin passes it."""
    doc = {**yaml.safe_load(path.read_text()), "metadata": {"name": path.stem, "namespace": "offline"}}
    assert schemacheck.refusals([doc], tool("managed-runner-validate")) == [None], twin


@pytest.mark.parametrize(("path", "twin"), [pytest.param(p, t, id=p.stem) for p, _, t in good_manifests()])
def test_good_twin_is_accepted(kube: Kube, crd: str, path: Path, twin: str) -> None:
    """Next to each rejected case, a close manifest the contract allows must be accepted as it is."""
    ns = kube.new_namespace("good")
    applied = kube.kubectl("apply", "--server-side", STRICT, "-n", ns, "-f", str(path), check=False)
    assert applied.returncode == 0, f"{path.stem} (twin of {twin}) was refused:\n{applied.stderr}"
    stored_spec = (stored(kube, ns, path.stem) or {}).get("spec") or {}
    sent = yaml.safe_load(path.read_text())["spec"]
    assert {key: stored_spec.get(key) for key in sent} == sent  # kept as written (the CRD adds defaults)
