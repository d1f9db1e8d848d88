"""What the cluster alone costs per ManagedRunner on this machine: the floor under bench.scale's time.

    .venv/bin/python -m bench.cluster_floor --runners 2000 --out /tmp/floor.md

No operator runs. On the real API server, in one run: (1) the driver creates N objects shaped like
examples/managedrunner.yaml, as bench.scale's driver does; (2) a plain client makes, for each object,
the writes the operator makes while creating one runner (bench.scale's figure
creation_k8s_requests_per_runner: a finalizer patch, four status patches, two Events), with no
deciding, no cloud calls and no reads. One watch is open on the namespace throughout, as an
operator's is. For each phase: wall time, CPU seconds of kube-apiserver, etcd and this process, and
how busy the machine's cores were.

bench.scale runs everything on this machine's cores. When the API server's CPU per runner times N
exceeds the cores' time in the target, no operator can meet the target here: the report says how
many seconds N runners need at the least, against the lower bound of bench.scale's ratio.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.scale import (
    CORES,
    GROUP,
    PLURAL,
    ROOT,
    VERSION,
    RunnerWatch,
    _create,
    apiserver_requests,
    cpu_seconds,
    crd_cluster,
    create_secrets,
    runner_body,
)
from runner_operator import resource

FINALIZER = resource.FINALIZER


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--runners", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4, help="requests in flight at once (bench.scale: 4)")
    parser.add_argument("--target-runners", type=int, default=10000, help="N of the target to compare with")
    parser.add_argument("--target-seconds", type=float, default=264.0, help="1.2x of 220 s at 50 req/s")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with crd_cluster("floor-") as (cluster, _):
        pids = {name: cluster.process(name).pid for name in ("kube-apiserver", "etcd")}
        phases, _ = measure(client.ApiClient(), cluster.kubeconfig, pids, args.runners, args.threads)
        report = render(phases, args)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


Phases = dict[str, dict[str, Any]]


def measure(
    api: client.ApiClient, kubeconfig: Path, pids: dict[str, int], n: int, threads: int
) -> tuple[Phases, str]:
    """Both phases in a new namespace (returned too); CPU of the processes in `pids` and of this one."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"floor-{uuid.uuid4().hex[:4]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    create_secrets(core, ns, "example")
    watcher = RunnerWatch(kubeconfig, ns)
    watcher.start()
    time.sleep(2)  # the watch open before the first phase, as bench.scale's
    pids = {"bench": os.getpid(), **pids}
    created: dict[int, dict[str, Any]] = {}

    def create(i: int) -> None:
        created[i] = _create(custom, ns, runner_body("example", ns, i))

    def write(i: int) -> None:
        operator_writes(core, custom, ns, created[i])

    phases = {}
    try:
        for phase, work in (("driver's creates", create), ("the operator's writes", write)):
            phases[phase] = timed(functools.partial(run_all, work, n, threads), pids, api)
    finally:
        watcher.stop()
    return phases, ns


def run_all(work: Callable[[int], None], n: int, threads: int) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(n)))


def timed(phase: Callable[[], None], pids: dict[str, int], api: client.ApiClient) -> dict[str, Any]:
    """Run `phase`; its wall time, the CPU of each process and of the machine, the requests served."""
    cpu, served, start = cpu_seconds(pids), apiserver_requests(api), time.time()
    phase()
    wall = time.time() - start
    after = cpu_seconds(pids)
    return {
        "seconds": wall,
        "cpu": {name: after[name] - cpu[name] for name in cpu},
        "requests": dict((apiserver_requests(api) - served).most_common(8)),
    }


def operator_writes(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, obj: dict[str, Any]
) -> None:
    """The Kubernetes writes the operator makes while creating one runner, in the same order and sizes."""
    meta = obj["metadata"]
    name = meta["name"]
    change = {"metadata": {"finalizers": [FINALIZER]}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, change)
    for status in statuses(obj):
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, name, {"status": status}, field_manager="managed-runner-operator"
        )
    for reason in ("Created", "Ready"):  # docs/observability.md
        event(core, ns, meta, reason)


def statuses(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Four status patches shaped like the operator's: the key reserved, the runner created (pending),
    provisioning, then Ready with everything the API reported (the fields of a bench.scale run's status)."""
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    runner_id = obj["spec"]["runnerId"]

    def conditions(ready: str, reason: str) -> list[dict[str, Any]]:
        return [
            {
                "type": kind,
                "status": status,
                "reason": why,
                "message": f"runner {runner_id}: {why}",
                "lastTransitionTime": now,
                "observedGeneration": 1,
            }
            for kind, status, why in (
                ("Ready", ready, reason),
                ("Synced", "True", "Synced"),
                ("Stalled", "False", "Progressing"),
            )
        ]

    reserved = {
        "createRequestId": str(uuid.uuid4()),
        "createRequestedTime": now,
        "credentialFingerprint": uuid.uuid4().hex,
        "credentialsSecret": "coreweave-api",
        "observedGeneration": 1,
        "phase": "Pending",
        "conditions": conditions("False", "Creating"),
    }
    created = {
        **reserved,
        "runnerId": runner_id,
        "createTime": now,
        "clusterName": "cks-bench",
        "installStatus": "RUNNER_INSTALL_STATUS_PENDING",
        "connection": "Disconnected",
        "connectionStatus": "RUNNER_CONNECTION_STATUS_DISCONNECTED",
        "etag": uuid.uuid4().hex[:16],
        "phase": "Creating",
        "conditions": conditions("False", "Creating"),
    }
    provisioning = {
        **created,
        "installStatus": "RUNNER_INSTALL_STATUS_PROVISIONING",
        "phase": "Provisioning",
        "conditions": conditions("False", "Provisioning"),
    }
    ready = {
        **provisioning,
        "activeConfigVersion": "stable-1.0.0",
        "activeRevision": 1,
        "targetRevision": 1,
        "adopted": False,
        "connection": "Connected",
        "connectionStatus": "RUNNER_CONNECTION_STATUS_CONNECTED",
        "dataPlaneStatus": {"state": "DISABLED"},
        "installStatus": "RUNNER_INSTALL_STATUS_READY",
        "lastHeartbeatTime": now,
        "lastObservedTime": now,
        "phase": "Ready",
        "rolloutInProgress": False,
        "updateAvailable": False,
        "conditions": conditions("True", "Available"),
    }
    return [copy.deepcopy(s) for s in (reserved, created, provisioning, ready)]


def event(core: client.CoreV1Api, ns: str, meta: dict[str, Any], reason: str) -> None:
    now = datetime.now(UTC)
    core.create_namespaced_event(
        ns,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}."),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind="ManagedRunner",
                name=meta["name"],
                namespace=ns,
                uid=meta["uid"],
            ),
            reason=reason,
            message=f"{reason} for runner {meta['name']}",
            type="Normal",
            source=client.V1EventSource(component="managed-runner-operator"),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        ),
    )


def render(phases: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    n = args.runners
    lines = [
        f"# The cluster's floor: {n} ManagedRunners, no operator",
        "",
        f"Command: `.venv/bin/python -m bench.cluster_floor --runners {n} --threads {args.threads}`. "
        f"Machine: {CORES} cores, shared by kube-apiserver, etcd and this process.",
        "",
        "| phase | seconds | per runner, ms of kube-apiserver CPU | etcd | bench | machine busy | requests |",
        "|---|---|---|---|---|---|---|",
    ]
    apiserver = 0.0
    for phase, figures in phases.items():
        cpu = figures["cpu"]
        apiserver += cpu["kube-apiserver"] + cpu["etcd"]
        busy = 100 * cpu["machine"] / figures["seconds"] / CORES
        lines.append(
            f"| {phase} | {figures['seconds']:.1f} | {1000 * cpu['kube-apiserver'] / n:.1f} "
            f"| {1000 * cpu['etcd'] / n:.1f} | {1000 * cpu['bench'] / n:.1f} | {busy:.0f}% "
            f"| {json.dumps(figures['requests'])} |"
        )
    floor = apiserver / n * args.target_runners / CORES
    lines += [
        "",
        f"kube-apiserver and etcd need {1000 * apiserver / n:.1f} ms of CPU per runner for these writes "
        f"alone: {args.target_runners} runners need at least {floor:.0f} s of both cores "
        f"({floor / args.target_seconds:.2f}x the target's {args.target_seconds:.0f} s), before any "
        "operator, simulator or driver CPU.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
