"""GitOps citizenship (issue 7) on a real API server: no self-inflicted drift, Argo CD health for every state.

The module runs its own simulator and operator (watching only its own namespace) so it can make
installs and deletions long and the deletion deadline short without touching the session's.
Each state a ManagedRunner reaches is snapshotted and judged by argocd/.../health.lua in the Go
harness (gopher-lua, Argo CD's library set); `UPDATE_ARGOCD_TESTDATA=1` turns the snapshots into
the committed testdata and health_test.yaml.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner_operator.simulator.config import Timings
from tests.e2e import gitops_health, gitops_watch
from tests.e2e.gitops_health import Expected, Health
from tests.e2e.gitops_watch import Watcher, changes_between, changes_since
from tests.e2e.harness import (
    GROUP,
    PLURAL,
    ROOT,
    VERSION,
    OperatorProcess,
    SimulatorThread,
    condition,
    manifest,
    ready_at,
)
from tests.e2e.kube import Kube, wait_for

TIMEOUT = 60
FINALIZER = "sandbox.coreweave.com/finalizer"
DELETION_TIMEOUT = 5
EXAMPLE = ROOT / "examples" / "managedrunner.yaml"
FAST = Timings(
    install_seconds=0.5, provision_seconds=1.0, rollout_seconds=1.0, delete_seconds=1.5, heartbeat_seconds=1.0
)
BAD_TOKEN = "CW-SECRET-gitops-wrong"

# Every state the tests reach, in the order health_test.yaml lists them.
STATES = [
    "no_status",
    "installing",
    "healthy",
    "generation_pending",
    "rolling_out",
    "paused",
    "install_failed",
    "disconnected",
    "runner_id_taken",
    "credentials_rejected",
    "deleting",
    "deletion_stalled",
]
PENDING_DELETION = ("Progressing", "Pending deletion")
EXPECTED = {
    "no_status": Expected("Progressing", ("Waiting for the ManagedRunner operator",)),
    "installing": Expected(
        "Progressing", ("is not ready yet: Installing: install status is RUNNER_INSTALL_STATUS_",)
    ),
    "healthy": Expected("Healthy", ("is installed, connected and at revision",)),
    "generation_pending": Expected("Progressing", ("process generation 2", "status is for generation 1")),
    "rolling_out": Expected("Progressing", ("is not ready yet: RollingOut: rolling out revision 2",)),
    "paused": Expected("Suspended", ("spec.paused is true", "set spec.paused: false")),
    "install_failed": Expected("Degraded", ("failed", "injected install failure", "hints:")),
    "disconnected": Expected("Degraded", ("not connected", "DISCONNECTED")),
    "runner_id_taken": Expected("Degraded", ("Needs a spec change: RunnerIdTaken", "spec.adopt: true")),
    "credentials_rejected": Expected("Degraded", ("CredentialsRejected", "check the credentials Secret")),
    "deleting": Expected("Progressing", ("Deleting runner", "stalled after"), argocd=PENDING_DELETION),
    "deletion_stalled": Expected(
        "Degraded", ("Deletion stalled", "spec.deletionPolicy: Orphan"), argocd=PENDING_DELETION
    ),
}


@dataclass
class Env:
    kube: Kube
    ns: str
    unwatched: str
    sim: SimulatorThread
    operator: OperatorProcess
    health: Health
    workdir: Path

    def get(self, name: str, ns: str | None = None) -> dict[str, Any] | None:
        return self.kube.get(GROUP, VERSION, ns or self.ns, PLURAL, name)

    def create(self, body: dict[str, Any], ns: str | None = None) -> None:
        self.kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns or self.ns, PLURAL, body)

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.kube.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, {"spec": spec})

    def timings(self, **seconds: float) -> None:
        self.sim.control("POST", "/timings", seconds)

    def wait(
        self, name: str, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        def matches() -> dict[str, Any] | None:
            obj = self.get(name)
            return obj if obj is not None and check(obj) else None

        try:
            return wait_for(matches, timeout=timeout, interval=0.1, what=f"{name}: {what}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\noperator log tail:\n{self.operator.output()[-3000:]}") from None

    def wait_ready(self, name: str) -> dict[str, Any]:
        return self.wait(name, is_ready, "Ready for the current generation")

    def update_calls(self, runner_id: str) -> int:
        return sum(1 for e in self.sim.requests() if e["endpoint"] == "update" and runner_id in e["path"])


def current(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition of that type if it is for the object's current generation, else {}."""
    cond = dict(condition(obj, type_))
    return cond if cond.get("observedGeneration") == obj["metadata"]["generation"] else {}


def is_ready(obj: dict[str, Any]) -> bool:
    return ready_at(obj)


def reason(obj: dict[str, Any], type_: str) -> str | None:
    return current(obj, type_).get("reason")


@pytest.fixture(scope="module")
def gitops(kube: Kube, crd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("gitops")
    health = Health(gitops_health.build(workdir), workdir)
    ns = kube.new_namespace("gitops")
    unwatched = kube.new_namespace("gitops-unwatched")
    health.namespaces = {
        ns: gitops_health.STABLE_NAMESPACE,
        unwatched: gitops_health.STABLE_UNWATCHED_NAMESPACE,
    }
    sim = SimulatorThread(FAST).start()
    kube.create_secret(ns, "coreweave-api", {"token": sim.token})
    kube.create_secret(ns, "runner-extra", {"registry-mirror-token": "mirror-token"})
    kube.create_secret(ns, "wrong-token", {"token": BAD_TOKEN})
    operator = OperatorProcess(
        kube.kubeconfig,
        [ns],
        sim.url,
        workdir,
        env={
            "RUNNER_OPERATOR_DELETION_TIMEOUT": str(DELETION_TIMEOUT),
            "RUNNER_OPERATOR_RESYNC_INTERVAL": "2",
        },
    ).start()
    try:
        yield Env(kube, ns, unwatched, sim, operator, health, workdir)
    finally:
        gitops_watch.stop_all()
        operator.stop()
        sim.stop()


def body(name: str, runner_id: str, **spec: Any) -> dict[str, Any]:
    """A minimal ManagedRunner with a stable identity (stable snapshots; the simulator is ours alone)."""
    cluster = str(uuid.uuid5(uuid.NAMESPACE_URL, f"gitops/{runner_id}"))
    return manifest(name, runner_id=runner_id, cluster_id=cluster, **spec)


def test_long_install_changes_only_the_finalizer_and_reapplying_changes_nothing(gitops: Env) -> None:
    env = gitops
    env.timings(installSeconds=4, provisionSeconds=4)
    example = env.workdir / "managedrunner.yaml"
    text = EXAMPLE.read_text()
    assert text.count("namespace: sandboxes") == 1
    example.write_text(text.replace("namespace: sandboxes", f"namespace: {env.ns}"))

    watcher = Watcher(env.kube, env.ns, "prod-east", env.workdir).start()
    env.kube.kubectl("apply", "-f", str(example))  # client-side apply: Argo CD's default sync
    installing = env.wait(
        "prod-east", lambda o: reason(o, "Ready") == "Installing", "installing", timeout=TIMEOUT
    )
    env.health.check("installing", installing, EXPECTED["installing"])
    ready = env.wait_ready("prod-east")
    recording = watcher.stop()

    changes = changes_since(recording)
    assert [c.path for c in changes] == ["metadata.finalizers"], recording.describe()
    assert changes[0].before is None
    assert changes[0].after == [FINALIZER]
    assert recording.seconds >= 7, recording.describe()
    assert recording.status_versions >= 3, recording.describe()
    print(f"\nlong install: {recording.describe()}")
    env.health.check("healthy", ready, EXPECTED["healthy"])

    runner_id = ready["spec"]["runnerId"]
    updates = env.update_calls(runner_id)
    diff = env.kube.kubectl("diff", "-f", str(example), check=False)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout + diff.stderr

    # Argo CD with ServerSideApply=true runs `kubectl apply --server-side --force-conflicts` as its
    # own field manager. The first such apply is the switch from client-side apply: the API server
    # drops kubectl's last-applied annotation (the caller's doing, not the operator's) and nothing else.
    apply = ["apply", "--server-side", "--force-conflicts", "--field-manager=argocd-controller"]
    before = env.get("prod-east")
    env.kube.kubectl(*apply, "-f", str(example))
    migrated = env.get("prod-east")
    assert before is not None
    assert migrated is not None
    switched = changes_between(before, migrated)
    assert [(c.path, c.after) for c in switched] == [("metadata.annotations", None)], switched
    assert set(before["metadata"]["annotations"]) == {"kubectl.kubernetes.io/last-applied-configuration"}

    # From then on the same manifest changes nothing in metadata or spec; the operator's periodic
    # status writes go on meanwhile, so resourceVersion alone would prove nothing.
    watcher = Watcher(env.kube, env.ns, "prod-east", env.workdir).start()
    env.kube.kubectl(*apply, "-f", str(example))
    for args in (
        ["diff", "-f", str(example)],
        ["diff", "--server-side", "--field-manager=argocd-controller", "-f", str(example)],
    ):
        diff = env.kube.kubectl(*args, check=False)
        assert (diff.returncode, diff.stdout) == (0, ""), f"{args}: {diff.stdout}{diff.stderr}"
    time.sleep(3)  # at least one steady-state resync pass (RESYNC_INTERVAL=2)
    recording = watcher.stop()
    assert changes_since(recording) == [], recording.describe()
    print(f"\nserver-side apply by argocd-controller: {recording.describe()}")
    after = env.get("prod-east")
    assert after is not None
    assert is_ready(after)
    assert after["spec"] == ready["spec"]
    assert after["metadata"]["generation"] == ready["metadata"]["generation"]
    appliers = {"kubectl-client-side-apply", "argocd-controller"}
    managers = {m["manager"] for m in after["metadata"]["managedFields"]}
    assert "argocd-controller" in managers, managers
    # Server-side proof that nobody but the appliers owns anything in spec: every other field
    # manager (the operator) owns status (subresource) or metadata.finalizers only.
    for entry in after["metadata"]["managedFields"]:
        if entry["manager"] in appliers:
            continue
        owned = entry.get("fieldsV1") or {}
        if entry.get("subresource") == "status":
            assert set(owned) <= {"f:status"}, entry
        else:
            assert owned == {"f:metadata": {"f:finalizers": owned["f:metadata"]["f:finalizers"]}}, entry
    owners = sorted((m["manager"], m.get("subresource", "")) for m in after["metadata"]["managedFields"])
    print(f"field managers: {owners}")
    assert env.update_calls(runner_id) == updates, "the operator sent an update after a no-op apply"


def example_copy(env: Env, name: str, *, explicit_protocol: bool) -> Path:
    """examples/managedrunner.yaml in our namespace under another name and identity."""
    text = EXAMPLE.read_text()
    cluster = uuid.uuid5(uuid.NAMESPACE_URL, f"gitops/{name}")
    replacements = {
        "namespace: sandboxes": f"namespace: {env.ns}",
        "name: prod-east": f"name: {name}",
        "runnerId: prod-us-east-1": f"runnerId: gitops-{name}",
        "clusterId: 00000000-0000-4000-8000-000000000001": f"clusterId: {cluster}",
    }
    if explicit_protocol:
        # Spell out the CRD default (protocol: TCP) on every port inside the atomic policy lists.
        replacements["- port: 5432"] = "- port: 5432\n                protocol: TCP"
        replacements["- port: 8443"] = "- port: 8443\n                protocol: TCP"
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = env.workdir / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "explicit_protocol",
    [
        pytest.param(False, id="example-as-is"),
        pytest.param(True, id="protocol-spelled-out"),
    ],
)
def test_another_field_manager_co_owns_the_example_without_conflicts(
    gitops: Env, explicit_protocol: bool
) -> None:
    """Server-side apply WITHOUT --force-conflicts by a second manager: the values match, so no conflict."""
    env = gitops
    env.timings(installSeconds=0.5, provisionSeconds=1)
    name = "coown-explicit" if explicit_protocol else "coown-asis"
    path = example_copy(env, name, explicit_protocol=explicit_protocol)
    env.kube.kubectl("apply", "-f", str(path))
    ready = env.wait_ready(name)
    result = env.kube.kubectl(
        "apply", "--server-side", "--field-manager=argocd-controller", "-f", str(path), check=False
    )
    assert result.returncode == 0, result.stderr
    after = env.get(name)
    assert after is not None
    assert after["spec"] == ready["spec"]
    assert after["metadata"]["generation"] == ready["metadata"]["generation"]


def test_long_deletion_changes_nothing_but_status_then_stalls(gitops: Env) -> None:
    env = gitops
    env.timings(installSeconds=0.5, provisionSeconds=1, deleteSeconds=3600)
    env.create(body("farewell", "gitops-farewell"))
    env.wait_ready("farewell")

    watcher = Watcher(env.kube, env.ns, "farewell", env.workdir).start()
    env.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, "farewell")
    deleting = env.wait(
        "farewell",
        lambda o: (
            (o["status"].get("deletion") or {}).get("stalled") is False and reason(o, "Ready") == "Deleting"
        ),
        "deleting within its deadline",
    )
    env.health.check("deleting", deleting, EXPECTED["deleting"])
    stalled = env.wait(
        "farewell",
        lambda o: (o["status"].get("deletion") or {}).get("stalled") is True,
        "deletion stalled",
        timeout=DELETION_TIMEOUT + 30,
    )
    env.health.check("deletion_stalled", stalled, EXPECTED["deletion_stalled"])
    recording = watcher.stop(settle=2)

    start = next(i for i, v in enumerate(recording.versions) if v["metadata"].get("deletionTimestamp"))
    changes = changes_since(recording, start)
    assert changes == [], recording.describe()
    deleting_versions = recording.versions[start:]
    assert all(v["metadata"]["finalizers"] == [FINALIZER] for v in deleting_versions)
    assert len(deleting_versions) >= 3, recording.describe()
    assert stalled["metadata"]["finalizers"] == [FINALIZER]
    print(f"\nlong deletion: {recording.describe()}")

    # The way out the message names: Orphan releases the object and leaves the runner.
    env.patch_spec("farewell", {"deletionPolicy": "Orphan"})
    wait_for(lambda: env.get("farewell") is None, timeout=TIMEOUT, what="farewell released")
    assert env.sim.runner("gitops-farewell") is not None


def test_health_verdict_for_every_other_state(gitops: Env) -> None:
    env = gitops
    env.timings(installSeconds=3, provisionSeconds=3, rolloutSeconds=4, deleteSeconds=1.5)

    # Nobody watches this namespace: the status is empty, as when the operator is not running.
    env.create(body("unmanaged", "gitops-unmanaged"), ns=env.unwatched)
    unmanaged = env.kube.get(GROUP, VERSION, env.unwatched, PLURAL, "unmanaged")
    assert unmanaged is not None
    env.health.check("no_status", unmanaged, EXPECTED["no_status"])

    taken = body("taken", "gitops-taken")
    spec = taken["spec"]
    made = env.sim.api(
        "POST",
        "",
        params={"requestId": "gitops-out-of-band"},
        json={
            "identity": {"runnerId": spec["runnerId"], "zone": spec["zone"], "clusterId": spec["clusterId"]},
            "policy": {},
        },
    )
    assert made.status_code == 200, made.text
    env.create(taken)
    env.create(body("failing", "gitops-failing"))
    env.create(body("badcreds", "gitops-badcreds", credentials={"secretRef": {"name": "wrong-token"}}))
    env.create(body("steady", "gitops-steady"))

    obj = env.wait("taken", lambda o: reason(o, "Synced") == "RunnerIdTaken", "RunnerIdTaken")
    env.health.check("runner_id_taken", obj, EXPECTED["runner_id_taken"])

    obj = env.wait("badcreds", lambda o: reason(o, "Synced") == "CredentialsRejected", "CredentialsRejected")
    env.health.check("credentials_rejected", obj, EXPECTED["credentials_rejected"])
    assert BAD_TOKEN not in str(obj)

    env.wait("failing", lambda o: o["status"].get("runnerId") == "gitops-failing", "created")
    env.sim.control("POST", "/runners/gitops-failing/installFailure", {"message": "injected install failure"})
    obj = env.wait("failing", lambda o: reason(o, "Ready") == "InstallFailed", "InstallFailed")
    env.health.check("install_failed", obj, EXPECTED["install_failed"])

    env.wait_ready("steady")
    # Slow API answers keep the operator's first pass on the new generation in flight for a while.
    env.sim.control("PUT", "/faults/latency", {"endpoint": "*", "seconds": 2.5})
    try:
        env.patch_spec("steady", {"releaseChannel": "RELEASE_CHANNEL_RAPID"})
        pending = env.get("steady")
        assert pending is not None
        assert pending["metadata"]["generation"] == 2
        assert current(pending, "Synced") == {}, "the operator answered before the snapshot"
        env.health.check("generation_pending", pending, EXPECTED["generation_pending"])
    finally:
        env.sim.control("PUT", "/faults/latency", {"endpoint": "*", "seconds": 0})
    obj = env.wait("steady", lambda o: reason(o, "Ready") == "RollingOut", "rolling out")
    env.health.check("rolling_out", obj, EXPECTED["rolling_out"])
    env.wait_ready("steady")

    env.patch_spec("steady", {"paused": True})
    obj = env.wait("steady", lambda o: reason(o, "Synced") == "Paused", "paused")
    env.health.check("paused", obj, EXPECTED["paused"])
    env.patch_spec("steady", {"paused": False})
    healthy_again = env.wait_ready("steady")
    assert env.health.evaluate(healthy_again).script["status"] == "Healthy"

    env.sim.control("POST", "/runners/gitops-steady/disconnect")
    obj = env.wait("steady", lambda o: reason(o, "Ready") == "Disconnected", "disconnected")
    env.health.check("disconnected", obj, EXPECTED["disconnected"])


def test_committed_testdata_matches_the_states_reached(gitops: Env) -> None:
    """health_test.yaml and testdata/ hold one real object per state, with the status asserted above."""
    reached = gitops.health.snapshots
    if gitops_health.UPDATE:
        gitops_health.write_testdata(gitops.health, STATES)
    missing = [state for state in STATES if state not in reached]
    assert not missing, f"states not reached in this run: {missing}"
    cases = gitops_health.committed_cases()
    for state in STATES:
        path = f"testdata/{state}.yaml"
        assert (gitops_health.TESTDATA / f"{state}.yaml").is_file(), f"{path} missing: regenerate (docs)"
        assert path in cases, f"{path} has no case in health_test.yaml"
        assert cases[path]["status"] == EXPECTED[state].status, (state, cases[path])
        for fragment in EXPECTED[state].fragments:
            assert fragment in cases[path]["message"], (state, fragment, cases[path])
