"""The good-manifest twins (tests/support/good_manifests): the API accepts each, the CRD's cron rule too.

The e2e tier applies them to the real API server; here the simulator (the contract) must accept
each as a create, and the CRD's cron expression is checked on both sides of the line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner_operator import resource
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.errors import InvalidArgument
from runner_operator.desired import desired_runner
from tests.support.bad_manifests import cases
from tests.support.good_manifests import api_refusal, manifests

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "managedrunners.sandbox.coreweave.com.yaml"
GOOD = manifests()


@pytest.mark.parametrize(("path", "doc"), [pytest.param(p, d, id=p.stem) for p, d, _ in GOOD])
async def test_the_api_accepts_each_good_twin(cloud: CloudClient, path: Path, doc: dict[str, Any]) -> None:
    spec = resource.ManagedRunnerSpec.model_validate(doc["spec"])
    refusal = api_refusal(path)
    if refusal is not None:
        # An [INFERRED] check the CRD leaves to the API: the simulator applies it, the CRD does not.
        with pytest.raises(InvalidArgument, match=re.escape(refusal)):
            await cloud.create(desired_runner(spec, {}), f"good-{path.stem}")
        return
    created = await cloud.create(desired_runner(spec, {}), f"good-{path.stem}")
    assert created.runner_id == spec.runner_id


def test_every_twin_names_a_bad_case() -> None:
    bad = {case.name for case in cases()}
    assert {twin for _, _, twin in GOOD} <= bad
    assert len(GOOD) >= 5
    assert len([p for p, _, _ in GOOD if api_refusal(p) is None]) >= 5


def cron_rule() -> re.Pattern[str]:
    text = CRD.read_text()
    found = re.search(r'self\.matches\(r"(\(\?i\)\^[^"]+)"\)', text)  # the only case-insensitive rule
    assert found is not None
    return re.compile(found.group(1))


@pytest.mark.parametrize(
    ("cron", "valid"),
    [
        ("0 2 * * SAT", True),
        ("00 02 * * SAT", True),
        ("0\t2\t*\t*\tSAT", True),
        ("*/15 0-6/2 1-31/1 JAN-MAR,OCT mon-fri", True),
        ("0 0 01 01 0", True),
        ("59 23 31 12 7", True),
        ("*/0 2 * * SAT", False),
        ("*/00 * * * *", False),
        ("0 24 * * *", False),
        ("0 2 0 * *", False),
        ("0 2 * 13 *", False),
        ("0 2 * * 8", False),
        ("0 2 * *", False),
        ("@daily", False),
    ],
)
def test_the_crd_cron_rule(cron: str, valid: bool) -> None:
    """RE2 and Python's re agree on this subset (classes, groups, alternation, counted repeats)."""
    assert bool(cron_rule().match(cron)) is valid


def test_each_good_twin_parses_as_yaml_with_its_tabs() -> None:
    doc = yaml.safe_load((ROOT / "tests" / "support" / "good_manifests" / "good-cron-tabs.yaml").read_text())
    assert "\t" in doc["spec"]["maintenancePolicy"]["windows"][0]["cron"]
