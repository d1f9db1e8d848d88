"""Ownership you can trust (issue 14): no ordinary event leaks, duplicates or destroys a runner.

Each test ends by asserting the cloud: exactly the runners that should exist. docs/safety.md cites them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.harness import OperatorProcess, SimulatorThread, condition, manifest
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_crash_safety import mutating_calls, runners_on_cluster
from tests.e2e.test_lifecycle import create, get, patch_spec, wait_condition, wait_gone, wait_ready

OTHER_ORG_TOKEN = "CW-SECRET-simulator-other-org"
PREFIX = "/v1/sandbox/managedRunners"


def delete(kube: Kube, ns: str, name: str) -> None:
    kube.custom.delete_namespaced_custom_object(
        "sandbox.coreweave.com", "v1alpha1", ns, "managedrunners", name
    )


def set_token(kube: Kube, ns: str, token: str) -> None:
    kube.core.patch_namespaced_secret("coreweave-api", ns, {"stringData": {"token": token}})


def calls_since(sim: SimulatorThread, start: int, method: str) -> list[dict[str, Any]]:
    return [e for e in sim.requests()[start:] if e.get("method") == method and e.get("status") == 200]


def still_there(kube: Kube, ns: str, name: str, seconds: float) -> dict[str, Any]:
    """The object is still present after `seconds` (its finalizer was not released)."""
    time.sleep(seconds)
    obj = get(kube, ns, name)
    assert obj is not None, f"{ns}/{name} was released"
    return obj


def test_bare_404s_never_recreate_nor_release(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    body = manifest("misrouted")
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "misrouted")
    start = len(sim.requests())
    sim.control("POST", "/faults/bare404", {"prefix": PREFIX, "enabled": True})
    try:
        # While bound: a misrouted endpoint is reported, nothing is created or forgotten.
        obj = wait_condition(kube, ns, "misrouted", "Synced", "False", "EndpointMisrouted")
        assert condition(obj, "Stalled")["status"] == "True"
        assert condition(obj, "Ready")["status"] == "False"
        assert obj["status"]["runnerId"] == runner_id
        # While deleting: the finalizer stays.
        delete(kube, ns, "misrouted")
        still_there(kube, ns, "misrouted", 4)
    finally:
        sim.control("POST", "/faults/bare404", {"prefix": PREFIX, "enabled": False})
    wait_gone(kube, ns, "misrouted")
    assert sim.runner(runner_id) is None
    assert not calls_since(sim, start, "POST"), "no create on a bare 404"


def test_token_of_another_organization_neither_recreates_nor_releases(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    sim.control("POST", "/organizations", {"tokens": {OTHER_ORG_TOKEN: "other-org"}, "merge": True})
    body = manifest("switched")
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "switched")
    start = len(sim.requests())
    set_token(kube, ns, OTHER_ORG_TOKEN)
    obj = wait_condition(kube, ns, "switched", "Synced", "False", "RunnerNotVisible")
    assert condition(obj, "Ready")["status"] == "False"
    assert obj["status"]["runnerId"] == runner_id
    delete(kube, ns, "switched")
    obj = still_there(kube, ns, "switched", 4)
    assert condition(obj, "Synced")["reason"] == "RunnerNotVisible"
    assert not calls_since(sim, start, "POST"), "nothing created in the other organization"
    assert sim.runner(runner_id) is not None
    # Switching back lets the deletion finish.
    set_token(kube, ns, sim.token)
    wait_gone(kube, ns, "switched")
    assert sim.runner(runner_id) is None


@pytest.mark.parametrize("policy", ["Orphan", "Delete"])
def test_secret_deleted_before_the_resource(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess, policy: str
) -> None:
    body = manifest("secretless", deletionPolicy=policy)
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "secretless")
    meta = kube.core.read_namespaced_secret("coreweave-api", ns).metadata
    assert meta is not None
    assert "sandbox.coreweave.com/credentials-in-use" in (meta.finalizers or [])
    kube.core.delete_namespaced_secret("coreweave-api", ns)
    # Still readable while a ManagedRunner needs it to reach the API.
    deleting = kube.core.read_namespaced_secret("coreweave-api", ns).metadata
    assert deleting is not None
    assert deleting.deletion_timestamp
    delete(kube, ns, "secretless")
    wait_gone(kube, ns, "secretless")
    wait_for(lambda: _secret_gone(kube, ns), timeout=30, what="the Secret released and deleted")
    if policy == "Orphan":
        assert sim.runner(runner_id) is not None
        sim.api("DELETE", f"/{runner_id}")
    else:
        assert sim.runner(runner_id) is None


def _secret_gone(kube: Kube, ns: str) -> bool:
    try:
        kube.core.read_namespaced_secret("coreweave-api", ns)
    except client.ApiException as exc:
        return bool(exc.status == 404)
    return False


def test_namespace_deletion_decommissions_every_runner(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    bodies = [manifest("first"), manifest("second")]
    for body in bodies:
        create(kube, ns, body)
    for body in bodies:
        wait_ready(kube, ns, body["metadata"]["name"])
    kube.core.delete_namespace(ns)
    try:
        wait_for(lambda: _namespace_gone(kube, ns), timeout=120, what=f"namespace {ns} deleted")
    except AssertionError:
        left = kube.kubectl("get", "managedrunners,secrets,events", "-n", ns, "-o", "yaml", check=False)
        nsobj = kube.kubectl("get", "namespace", ns, "-o", "yaml", check=False)
        raise AssertionError(f"{left.stdout[-6000:]}\n{nsobj.stdout}\n{operator.output()[-3000:]}") from None
    for body in bodies:
        assert sim.runner(body["spec"]["runnerId"]) is None


def _namespace_gone(kube: Kube, ns: str) -> bool:
    try:
        kube.core.read_namespace(ns)
    except client.ApiException as exc:
        return bool(exc.status == 404)
    return False


def test_paused_identity_change_with_replace_makes_no_call(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    body = manifest("frozen", replacementPolicy="Replace")
    old_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "frozen")
    patch_spec(kube, ns, "frozen", {"paused": True})
    wait_condition(kube, ns, "frozen", "Synced", "False", "Paused")
    start = len(sim.requests())
    new_id = f"frozen-{uuid.uuid4().hex[:6]}"
    patch_spec(kube, ns, "frozen", {"runnerId": new_id})
    wait_for(
        lambda: (get(kube, ns, "frozen") or {}).get("status", {}).get("plan", {}).get("action") == "replace",
        timeout=30,
        what="the paused preview shows the replacement",
    )
    time.sleep(3)
    # The simulator is shared with other tests' objects: count only calls that touch these runners.
    assert mutating_calls(sim, old_id, since=start) == {"create": 0, "update": 0, "delete": 0}
    assert sim.runner(old_id) is not None
    assert sim.runner(new_id) is None
    delete(kube, ns, "frozen")
    wait_gone(kube, ns, "frozen")
    assert sim.runner(old_id) is None


def test_replacement_onto_a_taken_or_claimed_id_keeps_the_old_runner(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    body = manifest("mover", replacementPolicy="Replace")
    old_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "mover")
    # Taken in the cloud (not by a ManagedRunner).
    taken = manifest("outside")["spec"]
    sim.control(
        "POST",
        "/runners",
        {"runner": {"identity": {k: taken[k] for k in ("runnerId", "clusterId", "zone")}, "policy": {}}},
    )
    patch_spec(kube, ns, "mover", {"runnerId": taken["runnerId"]})
    obj = wait_condition(kube, ns, "mover", "Synced", "False", "ReplacementTargetTaken")
    assert obj["status"]["runnerId"] == old_id
    assert sim.runner(old_id) is not None
    # Claimed by another ManagedRunner.
    other = manifest("holder")
    create(kube, ns, other)
    wait_ready(kube, ns, "holder")
    patch_spec(kube, ns, "mover", {"runnerId": other["spec"]["runnerId"]})
    obj = wait_condition(kube, ns, "mover", "Synced", "False", "DuplicateRunnerId")
    assert sim.runner(old_id) is not None
    assert mutating_calls(sim, old_id)["delete"] == 0
    for name in ("mover", "holder"):
        delete(kube, ns, name)
        wait_gone(kube, ns, name)
    assert sim.runner(old_id) is None
    assert sim.runner(other["spec"]["runnerId"]) is None
    assert sim.runner(taken["runnerId"]) is not None
    sim.api("DELETE", f"/{taken['runnerId']}")


def test_lost_create_response_then_edit_binds_its_own_runner(
    kube: Kube, crd: str, sim: SimulatorThread, tmp_path: Path
) -> None:
    ns = kube.new_namespace("own")
    kube.create_secret(ns, "coreweave-api", {"token": sim.token})
    op = OperatorProcess(kube.kubeconfig, [ns], sim.url, tmp_path).start()
    body = manifest("lost", displayName="before")
    runner_id, cluster_id = body["spec"]["runnerId"], body["spec"]["clusterId"]
    sim.control("POST", "/faults", {"endpoint": "create", "kind": "lose", "times": 1000})
    try:
        create(kube, ns, body)
        wait_for(lambda: sim.runner(runner_id), timeout=60, what="runner created in the cloud")
        op.kill()
    finally:
        sim.control("DELETE", "/faults")
    assert "runnerId" not in ((get(kube, ns, "lost") or {}).get("status") or {})
    patch_spec(kube, ns, "lost", {"displayName": "after"})
    op = OperatorProcess(kube.kubeconfig, [ns], sim.url, tmp_path).start()
    try:
        obj = wait_ready(kube, ns, "lost", generation=2)
        assert obj["status"]["runnerId"] == runner_id
        assert (sim.runner(runner_id) or {}).get("displayName") == "after"
        assert len(runners_on_cluster(sim, cluster_id)) == 1
        reasons = kube.kubectl("get", "events", "-n", ns, "-o", "jsonpath={.items[*].reason}").stdout.split()
        assert "CreateConfirmed" in reasons
        delete(kube, ns, "lost")
        wait_gone(kube, ns, "lost")
    finally:
        op.stop()
    assert sim.runner(runner_id) is None


def test_rejected_token_shows_ready_false(kube: Kube, ns: str, operator: OperatorProcess) -> None:
    kube.create_secret(ns, "wrong-token", {"token": "CW-SECRET-not-a-valid-token"})
    create(kube, ns, manifest("rejected", secret="wrong-token"))
    obj = wait_condition(kube, ns, "rejected", "Ready", "False", "CredentialsRejected")
    assert condition(obj, "Stalled")["status"] == "True"
    assert condition(obj, "Synced")["reason"] == "CredentialsRejected"
    row = kube.kubectl("get", "managedrunner", "rejected", "-n", ns, "--no-headers").stdout.split()
    assert row[2:5] == ["False", "False", "CredentialsRejected"]  # READY, SYNCED, PHASE
    waited = kube.kubectl(
        "wait", "--for=condition=Ready=false", "managedrunner/rejected", "-n", ns, "--timeout=5s"
    )
    assert "condition met" in waited.stdout
    delete(kube, ns, "rejected")
    wait_gone(kube, ns, "rejected")


@pytest.fixture
def future_field(kube: Kube, crd: str) -> Iterator[str]:
    """The CRD grows a field this operator version does not know (a rollback after an upgrade)."""
    path = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/futureField"
    add = [{"op": "add", "path": path, "value": {"type": "string"}}]
    kube.kubectl("patch", "crd", crd, "--type=json", "-p", json.dumps(add))
    time.sleep(2)  # the API server rebuilds its schema
    try:
        yield "futureField"
    finally:
        kube.kubectl("patch", "crd", crd, "--type=json", "-p", json.dumps([{"op": "remove", "path": path}]))


def test_unreadable_spec_is_reported_once_and_still_deletable(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess, future_field: str
) -> None:
    body = manifest("known")
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "known")
    patch_spec(kube, ns, "known", {future_field: "from a newer version"})
    obj = wait_condition(kube, ns, "known", "Synced", "False", "InvalidSpec")
    assert future_field in condition(obj, "Synced")["message"]
    version = obj["metadata"]["resourceVersion"]
    time.sleep(3)
    after = get(kube, ns, "known")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == version, "no status write per pass"
    reasons = kube.kubectl("get", "events", "-n", ns, "-o=jsonpath={.items[*].reason}").stdout.split()
    assert reasons.count("InvalidSpec") == 1
    assert sim.runner(runner_id) is not None
    delete(kube, ns, "known")
    wait_gone(kube, ns, "known")
    assert sim.runner(runner_id) is None


def test_operator_started_while_the_api_server_is_down_serves_once_it_is_back(
    kube: Kube, crd: str, sim: SimulatorThread, tmp_path: Path
) -> None:
    """An operator (re)started during a control-plane restart must not come up watching nothing."""
    if kube.cluster is None:
        pytest.skip("needs the local control plane (stops its kube-apiserver)")
    ns = kube.new_namespace("boot")
    kube.create_secret(ns, "coreweave-api", {"token": sim.token})
    proc = OperatorProcess(kube.kubeconfig, [ns], sim.url, tmp_path)
    body = manifest("booted")

    def start_operator() -> None:
        proc.start()
        waiting = "waiting for the API server to serve"
        wait_for(lambda: waiting in proc.output(), timeout=60, what="a start-up wait")

    try:
        kube.cluster.restart_apiserver(while_down=start_operator)
        wait_for(lambda: _served(kube, ns), timeout=60, what="the API server back")
        create(kube, ns, body)
        wait_ready(kube, ns, "booted")
        assert "is served; starting" in proc.output()
        delete(kube, ns, "booted")
        wait_gone(kube, ns, "booted")
    finally:
        proc.stop()
    assert runners_on_cluster(sim, body["spec"]["clusterId"]) == []


def _served(kube: Kube, ns: str) -> bool:
    try:
        kube.custom.list_namespaced_custom_object("sandbox.coreweave.com", "v1alpha1", ns, "managedrunners")
    except Exception:
        return False
    return True
