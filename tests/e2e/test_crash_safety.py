"""The operator SIGKILLed during create, rollout and delete: exactly one runner, nothing leaked, convergence.

Each test owns its simulator (slow life cycle, so the kill lands mid-step) and its operator
process, which watches only the test's namespace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner_operator.simulator.config import Timings
from tests.e2e.harness import GROUP, PLURAL, VERSION, OperatorProcess, SimulatorThread, condition, manifest
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_lifecycle import create, get, patch_spec, wait_gone, wait_ready

SLOW = Timings(
    install_seconds=1.5, provision_seconds=2.0, rollout_seconds=3.0, delete_seconds=3.0, heartbeat_seconds=1.0
)


@pytest.fixture
def slow_sim() -> Iterator[SimulatorThread]:
    simulator = SimulatorThread(SLOW).start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def own_ns(kube: Kube, crd: str, slow_sim: SimulatorThread) -> str:
    name = kube.new_namespace("crash")
    kube.create_secret(name, "coreweave-api", {"token": slow_sim.token})
    return name


def start_operator(kube: Kube, ns: str, sim: SimulatorThread, tmp_path: Path) -> OperatorProcess:
    return OperatorProcess(kube.kubeconfig, [ns], sim.url, tmp_path).start()


def mutating_calls(sim: SimulatorThread, runner_id: str, since: int = 0) -> dict[str, int]:
    """Successful writes since request number `since`; creates count only without `since` (any runner)."""
    counts: dict[str, int] = {"create": 0, "update": 0, "delete": 0}
    for entry in sim.requests()[since:]:
        method, path, status = entry.get("method"), str(entry.get("path", "")), entry.get("status")
        if status != 200:
            continue
        if method == "POST" and path.endswith("/managedRunners") and not since:
            counts["create"] += 1
        elif method == "PATCH" and path.endswith(f"/{runner_id}"):
            counts["update"] += 1
        elif method == "DELETE" and path.endswith(f"/{runner_id}"):
            counts["delete"] += 1
    return counts


def runners_on_cluster(sim: SimulatorThread, cluster_id: str) -> list[dict[str, Any]]:
    listed = sim.api("GET", "", params={"pageSize": 1000}).json()
    return [r for r in listed.get("managedRunners", []) if r["identity"]["clusterId"] == cluster_id]


def test_killed_during_create_makes_exactly_one_runner(
    kube: Kube, own_ns: str, slow_sim: SimulatorThread, tmp_path: Path
) -> None:
    op = start_operator(kube, own_ns, slow_sim, tmp_path)
    body = manifest("crash-create")
    runner_id, cluster_id = body["spec"]["runnerId"], body["spec"]["clusterId"]
    # The create is served but its response is lost, and the operator dies right then: the runner
    # exists in the cloud and nothing in Kubernetes says the operator made it.
    slow_sim.control("POST", "/faults", {"endpoint": "create", "kind": "lose", "times": 1000})
    create(kube, own_ns, body)
    wait_for(lambda: slow_sim.runner(runner_id), timeout=60, what="runner created in the cloud")
    op.kill()
    slow_sim.control("DELETE", "/faults")
    status = (get(kube, own_ns, "crash-create") or {}).get("status") or {}
    assert status.get("createRequestId"), "the key must be persisted before the call"
    assert "runnerId" not in status
    restarted = start_operator(kube, own_ns, slow_sim, tmp_path)
    try:
        obj = wait_ready(kube, own_ns, "crash-create")
    finally:
        restarted.stop()
    assert obj["status"]["runnerId"] == runner_id
    assert len(runners_on_cluster(slow_sim, cluster_id)) == 1
    assert condition(obj, "Synced")["status"] == "True"


def test_killed_during_rollout_converges_on_the_new_revision(
    kube: Kube, own_ns: str, slow_sim: SimulatorThread, tmp_path: Path
) -> None:
    op = start_operator(kube, own_ns, slow_sim, tmp_path)
    body = manifest("crash-rollout", releaseChannel="RELEASE_CHANNEL_STABLE")
    runner_id = body["spec"]["runnerId"]
    create(kube, own_ns, body)
    first = wait_ready(kube, own_ns, "crash-rollout")
    patch_spec(kube, own_ns, "crash-rollout", {"releaseChannel": "RELEASE_CHANNEL_RAPID"})
    wait_for(
        lambda: (slow_sim.runner(runner_id) or {}).get("rolloutInProgress"),
        timeout=60,
        what="rollout started",
    )
    op.kill()
    restarted = start_operator(kube, own_ns, slow_sim, tmp_path)
    try:
        obj = wait_ready(kube, own_ns, "crash-rollout", generation=2)
    finally:
        restarted.stop()
    assert obj["status"]["targetRevision"] == first["status"]["targetRevision"] + 1
    assert obj["status"]["activeRevision"] == obj["status"]["targetRevision"]
    assert mutating_calls(slow_sim, runner_id) == {"create": 1, "update": 1, "delete": 0}


def test_killed_during_delete_still_removes_runner_and_finalizer(
    kube: Kube, own_ns: str, slow_sim: SimulatorThread, tmp_path: Path
) -> None:
    op = start_operator(kube, own_ns, slow_sim, tmp_path)
    body = manifest("crash-delete")
    runner_id = body["spec"]["runnerId"]
    create(kube, own_ns, body)
    wait_ready(kube, own_ns, "crash-delete")
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, own_ns, PLURAL, "crash-delete")
    wait_for(
        lambda: (slow_sim.runner(runner_id) or {}).get("installStatus") == "RUNNER_INSTALL_STATUS_DELETING",
        timeout=60,
        what="deletion started in the cloud",
    )
    op.kill()
    # With no operator, the finalizer holds the resource: nothing is leaked or forgotten.
    held = get(kube, own_ns, "crash-delete")
    assert held is not None
    assert held["metadata"]["finalizers"] == ["sandbox.coreweave.com/finalizer"]
    restarted = start_operator(kube, own_ns, slow_sim, tmp_path)
    try:
        wait_gone(kube, own_ns, "crash-delete")
    finally:
        restarted.stop()
    assert slow_sim.runner(runner_id) is None


def test_deleted_while_the_operator_is_down(
    kube: Kube, own_ns: str, slow_sim: SimulatorThread, tmp_path: Path
) -> None:
    op = start_operator(kube, own_ns, slow_sim, tmp_path)
    body = manifest("down-delete")
    runner_id = body["spec"]["runnerId"]
    create(kube, own_ns, body)
    wait_ready(kube, own_ns, "down-delete")
    op.stop()
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, own_ns, PLURAL, "down-delete")
    assert get(kube, own_ns, "down-delete") is not None
    restarted = start_operator(kube, own_ns, slow_sim, tmp_path)
    try:
        wait_gone(kube, own_ns, "down-delete")
    finally:
        restarted.stop()
    assert slow_sim.runner(runner_id) is None


def test_api_rejection_is_reported_without_retrying(
    kube: Kube, own_ns: str, slow_sim: SimulatorThread, tmp_path: Path
) -> None:
    """An API rejection the CRD cannot foresee (it checks what it can since issue 17: here the API
    refuses the create with INVALID_ARGUMENT once). Report it, don't loop; a spec change recovers."""
    op = start_operator(kube, own_ns, slow_sim, tmp_path)
    try:
        refusal = "spec.policy: refused by a rule only the API knows"
        slow_sim.control(
            "POST",
            "/faults",
            {"endpoint": "create", "status": 400, "code": 3, "message": refusal, "times": 1},
        )
        body = manifest("rejected", displayName="first")
        create(kube, own_ns, body)

        def rejected() -> dict[str, Any] | None:
            obj = get(kube, own_ns, "rejected")
            return obj if condition(obj, "Synced").get("reason") == "InvalidSpec" else None

        obj = wait_for(rejected, timeout=60, what="InvalidSpec condition")
        assert refusal in condition(obj, "Synced")["message"]
        assert condition(obj, "Stalled")["status"] == "True"
        creates = sum(1 for e in slow_sim.requests() if e.get("method") == "POST")
        time.sleep(4)
        again = sum(1 for e in slow_sim.requests() if e.get("method") == "POST") - creates
        # A terminal error is re-tried only by the slow, jittered resync (at most one in this window;
        # the harness's resync interval is 20 s); a hot loop at the 0.5 s fast cadence would show 8.
        assert again <= 1, f"hot loop: {again} more create calls in 4 s"
        # Fixing the spec recovers without any other action.
        patch_spec(kube, own_ns, "rejected", {"displayName": "second"})
        wait_ready(kube, own_ns, "rejected", generation=2)
    finally:
        op.stop()
