"""ManagedRunner life cycle against the real API server and the simulator (issue 5's must-show list)."""

from __future__ import annotations

from typing import Any

from tests.e2e.harness import (
    GROUP,
    PLURAL,
    VERSION,
    RunningOperator,
    SimulatorThread,
    condition,
    manifest,
    ready_at,
)
from tests.e2e.kube import Kube, json_object, wait_for

TIMEOUT = 60


def create(kube: Kube, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return json_object(kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))


def get(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return kube.get(GROUP, VERSION, ns, PLURAL, name)


def patch_spec(kube: Kube, ns: str, name: str, spec: dict[str, Any]) -> None:
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": spec})


def wait_ready(kube: Kube, ns: str, name: str, *, generation: int | None = None) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = get(kube, ns, name)
        return obj if ready_at(obj, generation) else None

    return wait_for(ready, timeout=TIMEOUT, what=f"{ns}/{name} Ready")


def wait_condition(kube: Kube, ns: str, name: str, type_: str, status: str, reason: str) -> dict[str, Any]:
    def matches() -> dict[str, Any] | None:
        obj = get(kube, ns, name)
        cond = condition(obj, type_)
        return obj if cond.get("status") == status and cond.get("reason") == reason else None

    return wait_for(matches, timeout=TIMEOUT, what=f"{ns}/{name} {type_}={status} ({reason})")


def wait_gone(kube: Kube, ns: str, name: str) -> None:
    wait_for(lambda: get(kube, ns, name) is None, timeout=TIMEOUT, what=f"{ns}/{name} deleted")


def test_create_reaches_ready_with_every_status_field(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    body = manifest(
        "basic", displayName="Basic runner", overrides={"env": [{"name": "FEATURE", "value": "on"}]}
    )
    create(kube, ns, body)
    obj = wait_ready(kube, ns, "basic")
    status = obj["status"]
    runner_id = body["spec"]["runnerId"]
    assert status["runnerId"] == runner_id
    assert status["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert status["connectionStatus"] == "RUNNER_CONNECTION_STATUS_CONNECTED"
    assert status["activeRevision"] == status["targetRevision"] == 1
    assert status["rolloutInProgress"] is False
    assert status["phase"] == "Ready"
    for key in (
        "etag",
        "clusterName",
        "createTime",
        "updateTime",
        "lastHeartbeatTime",
        "lastObservedTime",
        "activeConfigVersion",
        "createRequestId",
    ):
        assert status.get(key), key
    assert obj["metadata"]["finalizers"] == ["sandbox.coreweave.com/finalizer"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True",
        "Synced": "True",
        "Stalled": "False",
    }
    cloud = sim.runner(runner_id)
    assert cloud is not None
    assert cloud["displayName"] == "Basic runner"
    assert "deploymentSpec" not in status
    table = kube.kubectl("get", "managedrunners", "-n", ns).stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "RUNNER", "READY", "SYNCED", "PHASE", "CONNECTION"]
    assert table[1].split()[:6] == ["basic", runner_id, "True", "True", "Ready", "Connected"]
    waited = kube.kubectl("wait", "--for=condition=Ready", "managedrunner/basic", "-n", ns, "--timeout=5s")
    assert "condition met" in waited.stdout


def test_spec_and_policy_changes_roll_out_and_rotate_the_etag(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    body = manifest("changes", releaseChannel="RELEASE_CHANNEL_STABLE", overrides={"args": ["--verbose"]})
    create(kube, ns, body)
    first = wait_ready(kube, ns, "changes")
    runner_id = body["spec"]["runnerId"]
    patch_spec(kube, ns, "changes", {"releaseChannel": "RELEASE_CHANNEL_RAPID"})
    second = wait_ready(kube, ns, "changes", generation=2)
    assert second["status"]["targetRevision"] == first["status"]["targetRevision"] + 1
    assert second["status"]["activeRevision"] == second["status"]["targetRevision"]
    cloud = sim.runner(runner_id)
    assert cloud is not None
    assert cloud["spec"]["releaseChannel"] == "RELEASE_CHANNEL_RAPID"

    patch_spec(
        kube, ns, "changes", {"policy": {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 3600}}}}
    )
    third = wait_ready(kube, ns, "changes", generation=3)
    assert third["status"]["etag"] != second["status"]["etag"]
    cloud = sim.runner(runner_id)
    assert cloud is not None
    assert cloud["policy"]["constraints"]["lifecycle"]["defaultLifetimeSeconds"] == 3600
    assert cloud["etag"] == third["status"]["etag"]

    # Removing an optional field resets it in the cloud (explicit mask path, field absent).
    kube.kubectl(
        "patch",
        "managedrunner",
        "changes",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/spec/overrides"}]',
    )
    wait_ready(kube, ns, "changes", generation=4)
    wait_for(
        lambda: "overrides" not in (sim.runner(runner_id) or {}).get("spec", {}),
        timeout=TIMEOUT,
        what="overrides reset in the cloud",
    )


def test_drift_is_corrected_and_out_of_band_deletion_recreated(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    body = manifest("drift", displayName="as declared")
    create(kube, ns, body)
    wait_ready(kube, ns, "drift")
    runner_id = body["spec"]["runnerId"]
    sim.control("PATCH", f"/runners/{runner_id}", {"displayName": "changed behind our back"})
    wait_for(
        lambda: (sim.runner(runner_id) or {}).get("displayName") == "as declared",
        timeout=TIMEOUT,
        what="drift corrected",
    )
    events = kube.kubectl("get", "events", "-n", ns, "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert "DriftCorrected" in events
    sources = kube.kubectl(
        "get", "events", "-n", ns, "-o", "jsonpath={.items[*].source.component}"
    ).stdout.split()
    assert set(sources) == {"managed-runner-operator"}  # `kubectl describe`: "From: managed-runner-operator"

    sim.control("DELETE", f"/runners/{runner_id}")
    wait_for(
        lambda: (
            "RecreatingDeletedRunner"
            in kube.kubectl("get", "events", "-n", ns, "-o", "jsonpath={.items[*].reason}").stdout
        ),
        timeout=TIMEOUT,
        what="recreation event",
    )
    obj = wait_ready(kube, ns, "drift")
    assert obj["status"]["recreations"] == 1
    assert sim.runner(runner_id) is not None


def test_delete_waits_for_the_cloud_then_releases_the_finalizer(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    body = manifest("bye")
    create(kube, ns, body)
    wait_ready(kube, ns, "bye")
    runner_id = body["spec"]["runnerId"]
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "bye")
    deleting = wait_for(
        lambda: (get(kube, ns, "bye") or {}).get("status", {}).get("deletion"),
        timeout=TIMEOUT,
        what="deletion progress in status",
    )
    assert deleting["requestedTime"]
    assert deleting["deadlineTime"]
    wait_gone(kube, ns, "bye")
    assert sim.runner(runner_id) is None


def test_orphan_leaves_the_runner(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    body = manifest("keep", deletionPolicy="Orphan")
    create(kube, ns, body)
    wait_ready(kube, ns, "keep")
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "keep")
    wait_gone(kube, ns, "keep")
    cloud = sim.runner(body["spec"]["runnerId"])
    assert cloud is not None
    assert cloud["installStatus"] != "RUNNER_INSTALL_STATUS_DELETING"


def test_adoption_and_runner_id_conflicts(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    existing = manifest("existing")
    spec = existing["spec"]
    created = sim.api(
        "POST",
        "",
        params={"requestId": "out-of-band-1"},
        json={
            "identity": {"runnerId": spec["runnerId"], "zone": spec["zone"], "clusterId": spec["clusterId"]},
            "policy": {},
            "displayName": "made in the console",
        },
    )
    assert created.status_code == 200, created.text
    create(kube, ns, existing)
    obj = wait_condition(kube, ns, "existing", "Synced", "False", "RunnerIdTaken")
    assert "spec.adopt: true" in condition(obj, "Synced")["message"]
    assert condition(obj, "Stalled")["status"] == "True"

    patch_spec(kube, ns, "existing", {"adopt": True, "displayName": "now managed"})
    obj = wait_ready(kube, ns, "existing")
    assert obj["status"]["adopted"] is True
    assert (sim.runner(spec["runnerId"]) or {}).get("displayName") == "now managed"

    twin = manifest("twin", runner_id=spec["runnerId"], cluster_id=spec["clusterId"], adopt=True)
    create(kube, ns, twin)
    obj = wait_condition(kube, ns, "twin", "Synced", "False", "DuplicateRunnerId")
    assert f"{ns}/existing" in condition(obj, "Synced")["message"]


def test_second_runner_on_a_cluster_is_a_clear_conflict(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    first = manifest("first")
    create(kube, ns, first)
    wait_ready(kube, ns, "first")
    second = manifest("second", cluster_id=first["spec"]["clusterId"])
    create(kube, ns, second)
    obj = wait_condition(kube, ns, "second", "Synced", "False", "ClusterTaken")
    assert first["spec"]["runnerId"] in condition(obj, "Synced")["message"]
    assert sim.runner(second["spec"]["runnerId"]) is None


def test_bad_credentials_are_reported_then_recovered(
    kube: Kube, ns: str, sim: SimulatorThread, operator: RunningOperator
) -> None:
    body = manifest("creds", secret="missing-secret")
    create(kube, ns, body)
    wait_condition(kube, ns, "creds", "Synced", "False", "CredentialsSecretNotFound")
    kube.create_secret(ns, "missing-secret", {"token": "CW-SECRET-wrong"})
    wait_condition(kube, ns, "creds", "Synced", "False", "CredentialsRejected")
    kube.core.patch_namespaced_secret("missing-secret", ns, {"stringData": {"token": sim.token}})
    wait_ready(kube, ns, "creds")
    assert "CW-SECRET-wrong" not in operator.output()
    assert sim.token not in operator.output()
