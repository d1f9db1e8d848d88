"""Tenancy of credentials (issue 16): the operator's default token serves only allowed namespaces.

A namespace the configuration does not allow cannot create, adopt or delete through the default
token: its ManagedRunners report DefaultCredentialsNotAllowed and the simulator sees no call for
them. An allowed namespace (by name, or by a label selector on the Namespace) works as usual.
docs/safety.md cites these tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import OperatorProcess, SimulatorThread, condition, manifest
from tests.e2e.kube import Kube
from tests.e2e.test_lifecycle import create, get, wait_condition, wait_gone, wait_ready
from tests.e2e.test_ownership import delete, still_there
from tests.e2e.test_packaging import purge

NOT_ALLOWED = "DefaultCredentialsNotAllowed"


@pytest.fixture
def teams(kube: Kube, crd: str) -> Iterator[tuple[str, str]]:
    allowed, other = kube.new_namespace("tenant"), kube.new_namespace("tenant")
    yield allowed, other
    for ns in (allowed, other):
        purge(kube, ns)


def operator(
    kube: Kube, sim: SimulatorThread, namespaces: list[str], tmp_path: Path, **settings: str
) -> OperatorProcess:
    env = {"COREWEAVE_API_TOKEN": sim.token, **settings}
    return OperatorProcess(kube.kubeconfig, namespaces, sim.url, tmp_path, env=env).start()


def test_a_namespace_not_allowed_cannot_create_adopt_or_delete_through_the_default(
    kube: Kube, own_sim: SimulatorThread, teams: tuple[str, str], tmp_path: Path
) -> None:
    allowed, other = teams
    # Both allowed at first: `other` gets a runner through the default token.
    op = operator(kube, own_sim, [allowed, other], tmp_path)
    try:
        earlier = manifest("earlier", secret=None)
        create(kube, other, earlier)
        wait_ready(kube, other, "earlier")
    finally:
        op.stop()
    earlier_id = earlier["spec"]["runnerId"]

    existing = manifest("existing", secret=None, adopt=True)
    spec = existing["spec"]
    made = own_sim.api(
        "POST",
        "",
        params={"requestId": "tenancy-out-of-band"},
        json={
            "identity": {"runnerId": spec["runnerId"], "zone": spec["zone"], "clusterId": spec["clusterId"]}
        },
    )
    assert made.status_code == 200, made.text

    # Now only `allowed` may use the default token.
    op = operator(
        kube, own_sim, [allowed, other], tmp_path, RUNNER_OPERATOR_DEFAULT_CREDENTIALS_NAMESPACES=allowed
    )
    start = len(own_sim.requests())
    try:
        fresh = manifest("fresh", secret=None)
        create(kube, other, fresh)
        create(kube, other, existing)
        for name in ("fresh", "existing"):
            obj = wait_condition(kube, other, name, "Ready", "False", NOT_ALLOWED)
            assert condition(obj, "Stalled")["status"] == "True"
            assert f"namespace {other} may not use" in condition(obj, "Synced")["message"]
            assert allowed not in condition(obj, "Synced")["message"]
            assert "runnerId" not in obj.get("status", {})
        delete(kube, other, "earlier")
        obj = wait_condition(kube, other, "earlier", "Synced", "False", NOT_ALLOWED)
        still_there(kube, other, "earlier", 3)
        # No call at all for `other`: not the create, not the adoption's read, not the delete.
        assert own_sim.requests()[start:] == []

        mine = manifest("mine", secret=None)
        create(kube, allowed, mine)
        wait_ready(kube, allowed, "mine")
        delete(kube, allowed, "mine")
        wait_gone(kube, allowed, "mine")
    finally:
        op.stop()
    assert own_sim.runner(fresh["spec"]["runnerId"]) is None
    assert (own_sim.runner(spec["runnerId"]) or {}).get("identity", {}).get("runnerId") == spec["runnerId"]
    assert own_sim.runner(earlier_id) is not None, "deleted through a credential its namespace may not use"
    assert own_sim.runner(mine["spec"]["runnerId"]) is None
    assert get(kube, other, "earlier") is not None
    own_sim.api("DELETE", f"/{earlier_id}")
    own_sim.api("DELETE", f"/{spec['runnerId']}")


def test_a_namespace_label_selector_allows_by_label(
    kube: Kube, own_sim: SimulatorThread, teams: tuple[str, str], tmp_path: Path
) -> None:
    labelled, unlabelled = teams
    kube.core.patch_namespace(
        labelled, {"metadata": {"labels": {"coreweave.com/default-credentials": "yes"}}}
    )
    op = operator(
        kube,
        own_sim,
        [labelled, unlabelled],
        tmp_path,
        RUNNER_OPERATOR_DEFAULT_CREDENTIALS_NAMESPACE_SELECTOR="coreweave.com/default-credentials=yes",
    )
    by_label, no_label = manifest("by-label", secret=None), manifest("no-label", secret=None)
    try:
        create(kube, labelled, by_label)
        create(kube, unlabelled, no_label)
        assert wait_ready(kube, labelled, "by-label")["status"]["runnerId"] == by_label["spec"]["runnerId"]
        refused = wait_condition(kube, unlabelled, "no-label", "Ready", "False", NOT_ALLOWED)
        assert "runnerId" not in refused["status"]
        assert own_sim.runner(no_label["spec"]["runnerId"]) is None
        # Labelling the namespace is noticed without a restart (the medium cadence re-reads it).
        kube.core.patch_namespace(
            unlabelled, {"metadata": {"labels": {"coreweave.com/default-credentials": "yes"}}}
        )
        wait_ready(kube, unlabelled, "no-label")
        assert own_sim.runner(no_label["spec"]["runnerId"]) is not None
        for ns, name in ((labelled, "by-label"), (unlabelled, "no-label")):
            delete(kube, ns, name)
            wait_gone(kube, ns, name)
    finally:
        op.stop()
    assert own_sim.runner(by_label["spec"]["runnerId"]) is None
    assert own_sim.runner(no_label["spec"]["runnerId"]) is None
