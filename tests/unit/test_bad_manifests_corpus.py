"""The bad-manifest corpus (tests/support/bad_manifests) is well-formed; the e2e tier rejects each."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.bad_manifests import CATEGORIES, DIR, Case, cases

ROOT = Path(__file__).resolve().parents[2]
CASES = cases()
REQUIRED_CATEGORIES = {
    "wrong-type",
    "out-of-range",
    "bad-enum",
    "bad-quantity",
    "bad-cidr",
    "bad-cron",
    "immutable-change",
    "missing-policy",
    "unknown-field",
    "oversized",
}
EXAMPLES = {"minimal.yaml", "managedrunner.yaml"}
MIN_CASES = 30


def by_case() -> list[Any]:
    return [pytest.param(case, id=case.name) for case in CASES]


def test_corpus_has_enough_cases_that_are_rejected_today() -> None:
    assert len([c for c in CASES if not c.known_gap]) >= MIN_CASES


def test_every_required_category_has_cases() -> None:
    counts = Counter(c.category for c in CASES if not c.known_gap)
    missing = REQUIRED_CATEGORIES - set(counts)
    assert not missing, f"no rejected case for {sorted(missing)}"
    assert REQUIRED_CATEGORIES <= CATEGORIES


def test_cases_are_distinct() -> None:
    bodies = [yaml.safe_dump(c.document, sort_keys=True) for c in CASES]
    assert len(set(bodies)) == len(bodies)


@pytest.mark.parametrize("case", by_case())
def test_case_headers(case: Case) -> None:
    assert case.description, "first comment line says what is wrong"
    for key in ("category", "expect", "expect-create", "base", "update", "known-gap"):
        assert len(case.headers.get(key, [])) <= 1, f"{key} given twice"
    assert case.category in CATEGORIES
    assert len(case.expect.strip()) >= 10, "expect must be a specific part of the server's message"
    assert case.header("update") in (None, "true")
    if case.category == "immutable-change":
        assert case.update
    if case.known_gap is not None:
        assert case.known_gap.strip(), "a known gap says why the CRD accepts it"


@pytest.mark.parametrize("case", by_case())
def test_case_is_one_namespaced_managed_runner(case: Case) -> None:
    docs = list(yaml.safe_load_all(case.path.read_text()))
    assert len(docs) == 1
    doc = case.document
    assert doc["apiVersion"] == "sandbox.coreweave.com/v1alpha1"
    assert doc["kind"] == "ManagedRunner"
    assert "namespace" not in doc["metadata"], "each case runs in a fresh namespace"
    if not case.update:
        assert case.object_name == case.name, "a new object is named after its file"


@pytest.mark.parametrize("case", [p for p in by_case() if p.values[0].base is not None])
def test_case_differs_from_its_base(case: Case) -> None:
    assert case.base is not None
    assert case.base.is_file()
    assert case.base.parent == DIR / "base"
    base = yaml.safe_load(case.base.read_text())
    assert case.document["spec"] != base["spec"]
    if case.update:
        assert case.object_name == base["metadata"]["name"], "an update changes the base object"
        assert case.document["metadata"] == base["metadata"]


def test_update_cases_have_a_base() -> None:
    assert all(c.base is not None for c in CASES if c.update)
    assert any(c.update for c in CASES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_bases_are_the_examples_without_namespace(name: str) -> None:
    example = yaml.safe_load((ROOT / "examples" / name).read_text())
    expected = copy.deepcopy(example)
    expected["metadata"].pop("namespace", None)
    assert yaml.safe_load((DIR / "base" / name).read_text()) == expected


def test_base_directory_holds_only_the_examples() -> None:
    assert {p.name for p in (DIR / "base").glob("*.yaml")} == EXAMPLES
