"""Kubernetes status writes: a client per write against one shared client, side by side in one run.

    .venv/bin/python -m bench.kube_writes --writes 400

On the real kube-apiserver: the same merge patches of ManagedRunner status, made the way the
operator made them before 2026-12 (a new `CustomObjectsApi` per write, hence a new connection pool
and TLS connection each time) and the way it makes them now (one client, `handlers._objects`).
Reports CPU seconds per write in this process and in the kube-apiserver, and wall time, as ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from bench.scale import GROUP, PLURAL, VERSION, crd_cluster, proc_usage

OBJECTS = 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=400)
    args = parser.parse_args()
    with crd_cluster("bench-writes-") as (cluster, _):
        ns = "writes"
        client.CoreV1Api().create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        for i in range(OBJECTS):
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ManagedRunner",
                "metadata": {"name": f"w{i}"},
                "spec": {
                    "runnerId": f"w{i}",
                    "clusterId": str(uuid.uuid4()),
                    "zone": "us-east-04a",
                    "policy": {},
                },
            }
            client.CustomObjectsApi().create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        shared = client.CustomObjectsApi()
        apiserver = cluster.process("kube-apiserver").pid
        results = {
            "a client per write (before)": measure(
                lambda: client.CustomObjectsApi(), ns, args.writes, apiserver
            ),
            "one shared client (now)": measure(lambda: shared, ns, args.writes, apiserver),
        }
    print(render(results, args.writes))
    return 0


def measure(api: Callable[[], Any], ns: str, writes: int, apiserver: int) -> dict[str, float]:
    for i in range(20):  # warm-up, not measured
        _write(api(), ns, i)
    cpu, server, wall = time.process_time(), proc_usage(apiserver)[1], time.monotonic()
    for i in range(writes):
        _write(api(), ns, i)
    return {
        "operator CPU ms per write": 1000 * (time.process_time() - cpu) / writes,
        "kube-apiserver CPU ms per write": 1000 * (proc_usage(apiserver)[1] - server) / writes,
        "wall ms per write": 1000 * (time.monotonic() - wall) / writes,
    }


def _write(api: Any, ns: str, i: int) -> None:
    status = {"status": {"lastObservedTime": f"2026-12-05T00:00:{i % 60:02d}Z", "phase": "Ready"}}
    api.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, f"w{i % OBJECTS}", status, _content_type="application/merge-patch+json"
    )


def render(results: dict[str, dict[str, float]], writes: int) -> str:
    names = list(results)
    lines = [f"{writes} status merge patches per variant, one run.", "", f"| | {' | '.join(names)} | ratio |"]
    lines.append("| --- |" + " ---: |" * (len(names) + 1))
    for figure in results[names[0]]:
        before, after = (results[n][figure] for n in names)
        lines.append(f"| {figure} | {before:.2f} | {after:.2f} | {after / before:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
