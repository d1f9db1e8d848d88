"""Steady-state CPU of the operator at a given pass rate, for several operator trees in one run.

    .venv/bin/python -m bench.steady_cpu --n 300 --resync 6 --trees e3601e4,HEAD,. --out steady.md

N Ready runners shaped like examples/managedrunner.yaml, resyncing every R seconds, make N/R steady
passes a second and read a list of N every R/2 seconds: 300 runners at 6 s load the operator as
3,000 at 60 s do, in a tenth of the set-up time. For each tree ("." is the working tree, anything
else a git revision checked out in a worktree; "+KEY=VALUE;..." sets the operator's environment, so
".+RUNNER_OPERATOR_MALLOC_ARENAS=0" is a variant of the working tree), on the same API server: CPU
over the window (percent of one core), RSS at its end and its peak since start, and the API calls
of the window per runner. Creation runs with an ample request budget; only the steady state is
measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench.scale import (
    GROUP,
    PLURAL,
    ROOT,
    VERSION,
    _create,
    _is_ready,
    apiserver_version,
    apply_crd,
    checkout,
    create_secrets,
    peak_rss,
    proc_usage,
    requests,
    runner_body,
    start_operator,
    start_simulator,
    stop,
)
from tests.e2e.kube import json_object
from tests.testenv.localcluster import LocalCluster


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--resync", type=float, default=6.0)
    parser.add_argument("--window", type=float, default=90.0)
    parser.add_argument(
        "--trees",
        default=".",
        help="comma-separated: '.' (the working tree) or a git revision, each optionally followed by "
        "+KEY=VALUE;KEY=VALUE (the operator's environment for that variant)",
    )
    parser.add_argument("--spec", default="example")
    parser.add_argument(
        "--kubeconfig", type=Path, default=None, help="an existing cluster (default: start one)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    # Creation only sets the scene: an ample budget and short installs.
    args.api_rps, args.install_seconds, args.delete_seconds, args.latency = 200.0, 2.0, 2.0, 0.0
    args.memprobe = None
    work = Path(tempfile.mkdtemp(prefix="bench-steady-"))
    cluster = None
    if args.kubeconfig is None:
        cluster = LocalCluster(work / "cluster").start()
        args.kubeconfig = cluster.kubeconfig
    config.load_kube_config(config_file=str(args.kubeconfig))
    results: list[dict[str, Any]] = []
    checked_out: list[Path] = []
    try:
        if cluster is not None:
            apply_crd(cluster)
        for i, tree in enumerate(args.trees.split(",")):
            revision, _, settings = tree.partition("+")
            env = dict(pair.split("=", 1) for pair in settings.split(";") if pair)
            root = ROOT
            if revision != ".":
                root = checkout(revision, work / f"tree-{i}")
                checked_out.append(root)
            results.append({"tree": tree, **measure(args, root, work, env)})
            print(results[-1], flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
        for tree in checked_out:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    report = render(results, args)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


@dataclass(frozen=True)
class _Cluster:
    kubeconfig: Path


def measure(args: argparse.Namespace, root: Path, work: Path, env: dict[str, str]) -> dict[str, Any]:
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = f"steady-{uuid.uuid4().hex[:4]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    create_secrets(core, ns, args.spec)
    sim, url = start_simulator(args, work, quota=False)
    op = start_operator(_Cluster(args.kubeconfig), ns, url, args, work, root, env)
    try:
        time.sleep(3)
        for i in range(args.n):
            _create(custom, ns, runner_body(args.spec, ns, i))
        t0 = time.time()
        ready = 0
        while ready < args.n and time.time() - t0 < 1800:
            time.sleep(5)
            listed = json_object(custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL))
            ready = sum(1 for obj in listed["items"] if _is_ready(obj))
        time.sleep(2 * args.resync)  # past the first steady passes of every object
        calls_before = len(requests(url))
        (_, cpu0), w0 = proc_usage(op.pid), time.time()
        time.sleep(args.window)
        (rss, cpu1), w1 = proc_usage(op.pid), time.time()
        calls = len(requests(url)) - calls_before
        return {
            "ready": ready,
            "steady_passes_per_second": round(args.n / args.resync, 1),
            "operator_cpu_percent": round(100 * (cpu1 - cpu0) / (w1 - w0), 1),
            "operator_rss_mb": round(rss, 1),
            "operator_rss_mb_peak": round(peak_rss(op.pid), 1),
            "api_calls_per_runner_in_window": round(calls / args.n, 3),
        }
    finally:
        stop(op)
        stop(sim)
        core.delete_namespace(ns)


def render(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    trees = [r["tree"] for r in results]
    lines = [
        "# Steady-state CPU",
        "",
        f"Command: `.venv/bin/python -m bench.steady_cpu --n {args.n} --resync {args.resync:g} "
        f"--window {args.window:g} --trees {args.trees}`",
        "",
        f"Machine: {os.cpu_count()} cores; kube-apiserver {apiserver_version()}; load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| figure | " + " | ".join(trees) + " |",
        "| --- | " + " | ".join("---" for _ in trees) + " |",
    ]
    for key in results[0]:
        if key != "tree":
            lines.append(f"| {key} | " + " | ".join(str(r[key]) for r in results) + " |")
    base = results[0]["operator_cpu_percent"]
    if base:
        lines += [
            "",
            "CPU relative to the first tree: "
            + ", ".join(f"{r['tree']} {r['operator_cpu_percent'] / base:.2f}x" for r in results),
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
