"""High availability (issue 16): replicas elect a leader on a Lease; exactly one acts.

On the real API server with the default timings (15 s Lease, 10 s renew deadline, 2 s retry):
the standby takes over after the leader is SIGKILLed, takes over at once after a clean stop (the
rolling-update case), and a leader that sees another holder exits. The simulator's request log
shows every write exactly once across the handovers.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import OperatorProcess, SimulatorThread, manifest
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_crash_safety import mutating_calls
from tests.e2e.test_lifecycle import create, patch_spec, wait_gone, wait_ready
from tests.e2e.test_ownership import delete
from tests.testenv.localcluster import free_port

LEASE = "managed-runner-operator"
HOLDS = "holds the Lease; starting"


def replica(
    kube: Kube, ns: str, sim: SimulatorThread, tmp_path: Path, metrics_port: int = 0
) -> OperatorProcess:
    env = {
        "RUNNER_OPERATOR_LEADER_ELECTION": "true",
        "RUNNER_OPERATOR_LEADER_ELECTION_NAMESPACE": ns,
        "RUNNER_OPERATOR_METRICS_PORT": str(metrics_port),
    }
    return OperatorProcess(kube.kubeconfig, [ns], sim.url, tmp_path, env=env).start()


def _some(value: float | None) -> list[float] | None:
    """A scraped 0 as a truthy answer for wait_for."""
    return None if value is None else [value]


def leader_gauge(port: int) -> float | None:
    """managed_runner_operator_leader as scraped from that replica (None while it does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        if family.name == "managed_runner_operator_leader":
            return float(family.samples[0].value)
    return None


def holder(kube: Kube, ns: str) -> str:
    try:
        lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(LEASE, ns)
    except client.ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str((lease.spec.holder_identity if lease.spec else None) or "")


def handover(kube: Kube, ns: str, before: str) -> tuple[str, float]:
    """Wait for the Lease to name another holder: (that holder, seconds it took)."""
    start = time.monotonic()
    found = wait_for(
        lambda: (h := holder(kube, ns)) not in ("", before) and h, timeout=60, what="a new holder"
    )
    return str(found), time.monotonic() - start


def test_the_standby_takes_over_and_every_write_happens_once(
    kube: Kube, crd: str, own_sim: SimulatorThread, tmp_path: Path
) -> None:
    ns = kube.new_namespace("ha")
    kube.create_secret(ns, "coreweave-api", {"token": own_sim.token})
    a = replica(kube, ns, own_sim, tmp_path)
    replicas = [a]
    try:
        a.wait_for_log(HOLDS, timeout=60)
        first = holder(kube, ns)
        b_metrics = free_port()
        b = replica(kube, ns, own_sim, tmp_path, b_metrics)
        replicas.append(b)
        b.wait_for_log("standby, the Lease is held by", timeout=60)
        assert HOLDS not in b.output()
        # A standby is scraped too, and says it is not the one acting (the chart's alert sums this).
        scraped = wait_for(lambda: _some(leader_gauge(b_metrics)), timeout=20, what="standby metrics")
        assert scraped == [0.0]

        body = manifest("ha")
        runner_id = body["spec"]["runnerId"]
        create(kube, ns, body)
        wait_ready(kube, ns, "ha")

        # The leader dies without a word: the standby waits for the Lease to expire, then acts.
        a.kill()
        second, waited = handover(kube, ns, first)
        assert waited >= 10, f"took over {waited:.1f} s after the kill, before the Lease could expire"
        b.wait_for_log(HOLDS, timeout=30)
        assert leader_gauge(b_metrics) == 1
        patch_spec(kube, ns, "ha", {"displayName": "after the kill"})
        wait_ready(kube, ns, "ha", generation=2)

        # A rolling update: the new pod waits, the old one stops cleanly and hands the Lease over.
        c = replica(kube, ns, own_sim, tmp_path)
        replicas.append(c)
        c.wait_for_log("standby, the Lease is held by", timeout=60)
        b.stop()
        assert b.exited() == 0
        patch_spec(kube, ns, "ha", {"displayName": "during the handover"})
        _, waited = handover(kube, ns, second)
        assert waited < 10, f"a released Lease took {waited:.1f} s to be taken"
        wait_ready(kube, ns, "ha", generation=3)
        assert (own_sim.runner(runner_id) or {}).get("displayName") == "during the handover"

        delete(kube, ns, "ha")
        wait_gone(kube, ns, "ha")
    finally:
        for proc in replicas:
            proc.stop()
    assert mutating_calls(own_sim, runner_id) == {"create": 1, "update": 2, "delete": 1}
    assert own_sim.runner(runner_id) is None


def test_a_leader_that_sees_another_holder_exits(
    kube: Kube, crd: str, own_sim: SimulatorThread, tmp_path: Path
) -> None:
    ns = kube.new_namespace("ha")
    a = replica(kube, ns, own_sim, tmp_path)
    try:
        a.wait_for_log(HOLDS, timeout=60)
        client.CoordinationV1Api(kube.api).patch_namespaced_lease(
            LEASE, ns, {"spec": {"holderIdentity": "someone-else"}}
        )
        wait_for(lambda: a.exited() is not None, timeout=30, what="the leader to exit")
        assert a.exited() == 75
        assert "leader election: lost (the Lease is now held by someone-else); exiting" in a.output()
    finally:
        a.stop()
