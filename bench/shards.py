"""Shards benchmark: N ManagedRunners over 1 shard and over K shards, side by side in one run.

    .venv/bin/python -m bench.shards --n 3000 --shards 3 --out bench/shards.md

For each variant, on the real API server + simulator (a namespace and a simulator of its own):
apply-to-Ready time and its ratio to the lower bound (the API budget and the simulated install
time), API calls per runner while creating and at steady state, and per-process RSS (peak and
steady) and steady CPU. Every process runs with leader election on its shard's Lease and spends 1/K
of the request budget (sharding rule 5), so the K shards together stay within one token's budget.
Runners are shaped like examples/managedrunner.yaml. Teardown drops the cluster (no decommission:
bench.scale measures that).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config

from bench.scale import (
    ROOT,
    RunnerWatch,
    _create,
    apiserver_version,
    apply_crd,
    auth,
    create_secrets,
    peak_rss,
    proc_usage,
    requests,
    runner_body,
    start_operator,
    start_simulator,
    stop,
)
from tests.testenv.localcluster import LocalCluster


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--install-seconds", type=float, default=20.0)
    parser.add_argument("--delete-seconds", type=float, default=30.0)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--api-rps", type=float, default=10.0, help="the token budget, split over shards")
    parser.add_argument("--resync", type=float, default=60.0)
    parser.add_argument("--steady-window", type=float, default=120.0)
    parser.add_argument("--spec", default="example")
    parser.add_argument("--memprobe", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    cluster = LocalCluster(work / "cluster").start()
    results: list[dict[str, Any]] = []
    try:
        config.load_kube_config(config_file=str(cluster.kubeconfig))
        apply_crd(cluster)
        for count in (1, args.shards):
            results.append(variant(count, args, cluster, work))
            print(results[-1], flush=True)
    finally:
        cluster.stop()
    report = render(results, args)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


def variant(count: int, args: argparse.Namespace, cluster: LocalCluster, work: Path) -> dict[str, Any]:
    n = args.n
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = f"shards-{count}-{uuid.uuid4().hex[:4]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    create_secrets(core, ns, args.spec)
    sim, url = start_simulator(args, work, quota=True)
    procs: list[subprocess.Popen[bytes]] = []
    for i in range(count):
        env = {
            "RUNNER_OPERATOR_LEADER_ELECTION": "true",
            "RUNNER_OPERATOR_LEADER_ELECTION_NAMESPACE": ns,
            "RUNNER_OPERATOR_SHARD": f"{i}/{count}",
        }
        procs.append(start_operator(cluster, ns, url, args, work, ROOT, env))
    watcher = RunnerWatch(cluster.kubeconfig, ns)
    watcher.start()
    try:
        time.sleep(5)  # start-up and Lease, not part of the measurement
        applied: dict[str, float] = {}
        t0 = time.time()
        for i in range(n):
            body = runner_body(args.spec, ns, i)
            _create(custom, ns, body)
            applied[body["metadata"]["name"]] = time.time()
        while len(watcher.ready_at) < n and time.time() - t0 < 60 * 45:
            time.sleep(1.0)
        t_ready = time.time()
        with watcher.lock:
            ready = dict(watcher.ready_at)
        log = requests(url)
        lower = n / args.api_rps + args.install_seconds
        creation_rss = [peak_rss(p.pid) for p in procs]
        httpx.delete(f"{url}/_sim/requests", headers=auth(), timeout=30)
        cpu_before = [proc_usage(p.pid)[1] for p in procs]
        time.sleep(args.steady_window)
        steady = requests(url)
        usage = [proc_usage(p.pid) for p in procs]
        ready_times = sorted(ready[k] - applied[k] for k in ready)
        return {
            "shards": count,
            "n": n,
            "ready": len(ready),
            "all_ready_seconds": round(t_ready - t0, 1),
            "lower_bound_seconds": lower,
            "ready_ratio_to_lower_bound": round((t_ready - t0) / lower, 2),
            "ready_latency_p50": round(statistics.median(ready_times), 1) if ready_times else None,
            "calls_per_runner_creation": round(len(log) / n, 2),
            "calls_by_endpoint_creation": dict(Counter(e["endpoint"] for e in log)),
            "http_429_during_creation": sum(1 for e in log if e["status"] == 429),
            "steady_calls_per_runner_per_resync": round(
                len(steady) / n / (args.steady_window / args.resync), 3
            ),
            "steady_writes": sum(1 for e in steady if e["method"] != "GET"),
            "rss_mb_peak_per_process": [round(r, 1) for r in creation_rss],
            "rss_mb_steady_per_process": [round(u[0], 1) for u in usage],
            "cpu_percent_steady_per_process": [
                round(100 * (used - before) / args.steady_window, 1)
                for (_, used), before in zip(usage, cpu_before, strict=True)
            ],
        }
    finally:
        watcher.stop()
        for proc in [*procs, sim]:
            stop(proc)


def render(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    rows = [
        ("ManagedRunners Ready", "ready"),
        ("apply to all Ready, s", "all_ready_seconds"),
        ("lower bound, s", "lower_bound_seconds"),
        ("ratio to the lower bound", "ready_ratio_to_lower_bound"),
        ("Ready latency p50, s", "ready_latency_p50"),
        ("API calls per runner, creating", "calls_per_runner_creation"),
        ("HTTP 429 while creating", "http_429_during_creation"),
        ("API calls per runner per resync, steady", "steady_calls_per_runner_per_resync"),
        ("write calls, steady", "steady_writes"),
        ("peak RSS per process, MB", "rss_mb_peak_per_process"),
        ("steady RSS per process, MB", "rss_mb_steady_per_process"),
        ("steady CPU per process, % of a core", "cpu_percent_steady_per_process"),
    ]
    head = " | ".join(f"{r['shards']} shard{'s' if r['shards'] > 1 else ''}" for r in results)
    lines = [
        f"N = {args.n}, example-shaped specs, {args.api_rps:g} requests/s for the token in all "
        f"(1/K per shard), install {args.install_seconds:g} s, resync {args.resync:g} s, "
        f"kube-apiserver {apiserver_version()}, one run.",
        "",
        f"| | {head} |",
        "| --- |" + " ---: |" * len(results),
    ]
    for label, key in rows:
        cells = " | ".join(_cell(r[key]) for r in results)
        lines.append(f"| {label} | {cells} |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
