"""Opt-in replacement (issue 10): identity changes replace the runner only with replacementPolicy: Replace."""

from __future__ import annotations

import uuid

from tests.e2e.harness import OperatorProcess, SimulatorThread, manifest
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_lifecycle import create, get, patch_spec, wait_ready


def test_identity_change_is_rejected_without_opt_in(kube: Kube, ns: str, operator: OperatorProcess) -> None:
    create(kube, ns, manifest("fixed"))
    patch = '{"spec": {"runnerId": "another-id"}}'
    out = kube.kubectl("patch", "managedrunner", "fixed", "-n", ns, "--type=merge", "-p", patch, check=False)
    assert out.returncode != 0
    assert "runnerId is immutable" in out.stderr
    assert "replacementPolicy: Replace" in out.stderr


def test_runner_id_change_replaces_old_first_then_creates(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    body = manifest("moving", replacementPolicy="Replace")
    old_id, cluster = body["spec"]["runnerId"], body["spec"]["clusterId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "moving")
    new_id = f"moved-{uuid.uuid4().hex[:6]}"
    patch_spec(kube, ns, "moving", {"runnerId": new_id})
    seen = wait_for(
        lambda: (get(kube, ns, "moving") or {}).get("status", {}).get("replacement"),
        timeout=60,
        what="replacement progress in status",
    )
    assert seen["fromRunnerId"] == old_id
    assert seen["toRunnerId"] == new_id
    obj = wait_ready(kube, ns, "moving", generation=2)
    assert obj["status"]["runnerId"] == new_id
    assert not obj["status"].get("replacement")
    assert sim.runner(old_id) is None
    new = sim.runner(new_id)
    assert new is not None
    assert new["identity"]["clusterId"] == cluster
    reasons = kube.kubectl("get", "events", "-n", ns, "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert "ReplacementStarted" in reasons
    assert "Replaced" in reasons


def test_cluster_change_replaces_the_runner_in_place_of_its_id(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    body = manifest("rehome", replacementPolicy="Replace")
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "rehome")
    new_cluster = str(uuid.uuid4())
    patch_spec(kube, ns, "rehome", {"clusterId": new_cluster})
    obj = wait_ready(kube, ns, "rehome", generation=2)
    assert obj["status"]["runnerId"] == runner_id
    cloud = sim.runner(runner_id)
    assert cloud is not None
    assert cloud["identity"]["clusterId"] == new_cluster
    assert obj["status"]["recreations"] == 1
