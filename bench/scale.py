"""Scale benchmark: N ManagedRunners on the real API server + simulator, reported as ratios.

    .venv/bin/python -m bench.scale --sizes 100,1000,3000 --out bench/RESULTS.md

For each N, in one run: apply-to-Ready time and its ratio to the lower bound set by the simulated
install time and the API request budget; apply-to-create-call latency (p50/p99); API calls per
runner while creating and per runner-hour at steady state; operator RSS and CPU; a restart with
N Ready runners (write calls, peak request rate); behaviour under a server-side quota (429s);
then all N deleted at once (time to all gone, API calls and Kubernetes writes per runner).

Every runner is shaped like examples/managedrunner.yaml (--spec example, the Secrets it names are
created in the namespace) or is the smallest valid spec (--spec minimal); only the identity differs.
Readiness and writes are seen through one watch per namespace, not by listing (a list of 3,000
example-sized objects every second would load the shared 2 cores more than the operator does).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import urllib3
import yaml
from kubernetes import client, config, watch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from runner_operator import reconciling, resource  # noqa: E402
from tests.e2e.kube import json_object  # noqa: E402
from tests.testenv.localcluster import LocalCluster, free_port  # noqa: E402

TOKEN = "CW-SECRET-bench-admin"
GROUP, VERSION, PLURAL = resource.GROUP, resource.VERSION, resource.PLURAL
EXAMPLE = ROOT / "examples" / "managedrunner.yaml"


@dataclass
class Run:
    n: int
    figures: dict[str, Any] = field(default_factory=dict)
    label: str = "current tree"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument(
        "--spec",
        choices=("example", "minimal"),
        default="example",
        help="runner spec shape: examples/managedrunner.yaml, or the smallest valid spec",
    )
    parser.add_argument("--install-seconds", type=float, default=20.0, help="simulated PENDING+PROVISIONING")
    parser.add_argument(
        "--delete-seconds",
        type=float,
        default=30.0,
        help="simulated DELETING -> gone (a decommission uninstalls what the install put there)",
    )
    parser.add_argument("--latency", type=float, default=0.05, help="simulated API latency per call")
    parser.add_argument("--api-rps", type=float, default=10.0, help="request budget (operator and API quota)")
    parser.add_argument("--steady-window", type=float, default=120.0)
    parser.add_argument("--resync", type=float, default=60.0, help="operator resync interval for the bench")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--baseline",
        default=None,
        help="git revision whose operator runs first, at --baseline-sizes (before/after in one run)",
    )
    parser.add_argument("--baseline-sizes", default="1000")
    parser.add_argument(
        "--baseline-env",
        default=None,
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="without --baseline: the current tree with this operator environment is the baseline",
    )
    parser.add_argument(
        "--apply-threads",
        type=int,
        default=1,
        help="objects created at once by the driver (1: one after another, like kubectl apply)",
    )
    parser.add_argument(
        "--skip-decommission",
        action="store_true",
        help="end each size after the restart (its runners go with the bench's cluster)",
    )
    parser.add_argument(
        "--memprobe",
        type=Path,
        default=None,
        help="run the operator under bench.memprobe; memory reports go to this directory",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.load_at_start = os.getloadavg()[0]
    signal.signal(signal.SIGTERM, _terminated)  # run the finally blocks: no leftovers
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    cluster = LocalCluster(work / "cluster").start()
    runs = []
    try:
        config.load_kube_config(config_file=str(cluster.kubeconfig))
        apply_crd(cluster)
        variants: list[tuple[int, Path, str, dict[str, str]]] = [(n, ROOT, "current tree", {}) for n in sizes]
        before = [int(s) for s in args.baseline_sizes.split(",")]
        if args.baseline:
            tree = checkout(args.baseline, work / "baseline")
            variants = [(n, tree, f"before: {args.baseline}", {}) for n in before] + variants
        elif args.baseline_env:
            env = dict(pair.split("=", 1) for pair in args.baseline_env.split(","))
            variants = [(n, ROOT, f"current tree, {args.baseline_env}", env) for n in before] + variants
        for n, root, label, env in variants:
            runs.append(bench_size(n, args, cluster, work, root, label, env))
            print(label, json.dumps(runs[-1].figures, indent=1), flush=True)
            if args.out:  # the sizes done so far survive an interrupted run
                args.out.write_text(render(runs, args))
    finally:
        cluster.stop()
        if args.baseline:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "baseline")])
    report = render(runs, args)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


def _terminated(*_: object) -> None:
    print("bench: SIGTERM received, stopping", file=sys.stderr, flush=True)
    sys.exit(1)


def checkout(revision: str, where: Path) -> Path:
    """The operator tree at `revision` (a detached worktree), for a baseline run."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), revision], check=True)
    return where


@contextlib.contextmanager
def crd_cluster(prefix: str) -> Iterator[tuple[LocalCluster, Path]]:
    """A local control plane in a new work directory, the CRD established and the kubernetes client
    configured for it; stopped on the way out. Yields the cluster and the work directory."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = LocalCluster(work / "cluster").start()
    try:
        config.load_kube_config(config_file=str(cluster.kubeconfig))
        apply_crd(cluster)
        yield cluster, work
    finally:
        cluster.stop()


def apply_crd(cluster: LocalCluster) -> None:
    kubectl = [str(ROOT / "tests/testenv/bin/kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
    crd = str(ROOT / "crds/managedrunners.sandbox.coreweave.com.yaml")
    subprocess.run([*kubectl, "apply", "--server-side", "-f", crd], check=True, capture_output=True)
    for _ in range(60):
        done = subprocess.run(
            [
                *kubectl,
                "wait",
                "--for=condition=Established",
                "--timeout=5s",
                "crd/managedrunners.sandbox.coreweave.com",
            ],
            capture_output=True,
        )
        if done.returncode == 0:
            return
        time.sleep(1)
    raise RuntimeError(f"CRD not established: {done.stderr.decode()}")


def start_simulator(args: argparse.Namespace, work: Path, quota: bool) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    half = args.install_seconds / 2
    cmd = [
        sys.executable,
        "-m",
        "runner_operator.cli",
        "simulate",
        "--port",
        str(port),
        "--admin-token",
        TOKEN,
        "--install-seconds",
        str(half),
        "--provision-seconds",
        str(half),
        "--delete-seconds",
        str(args.delete_seconds),
        "--latency",
        str(args.latency),
        "--heartbeat-seconds",
        "30",
        "--quiet",
    ]
    if quota:
        cmd += ["--rate-limit", str(args.api_rps), "--rate-burst", str(int(args.api_rps))]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
        stdout=(work / f"sim-{port}.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/_sim/state", headers=auth(), timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("simulator did not start")


class Kubeconfig(Protocol):
    """What an operator needs of a cluster: a LocalCluster, or any cluster given by a kubeconfig."""

    @property
    def kubeconfig(self) -> Path: ...


def start_operator(
    cluster: Kubeconfig,
    ns: str,
    url: str,
    args: argparse.Namespace,
    work: Path,
    root: Path,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PYTHONPATH": f"{root / 'operator'}{os.pathsep}{ROOT}",
        "RUNNER_OPERATOR_API_ENDPOINT": url,
        "COREWEAVE_API_TOKEN": TOKEN,
        "RUNNER_OPERATOR_REQUESTS_PER_SECOND": str(args.api_rps),
        "RUNNER_OPERATOR_REQUEST_BURST": str(int(args.api_rps)),
        "RUNNER_OPERATOR_RESYNC_INTERVAL": str(args.resync),
        "RUNNER_OPERATOR_METRICS_PORT": str(port),
        **(extra_env or {}),
    }
    launcher = ["-m", "runner_operator.cli"]
    if args.memprobe and root == ROOT:
        args.memprobe.mkdir(parents=True, exist_ok=True)
        launcher = ["-m", "bench.memprobe", str(args.memprobe / f"{ns}-{uuid.uuid4().hex[:4]}")]
    proc = subprocess.Popen(
        [sys.executable, *launcher, "run", "-n", ns],
        cwd=ROOT,
        env=env,
        stdout=(work / f"operator-{ns}-{uuid.uuid4().hex[:4]}.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    METRICS_PORTS[proc.pid] = port
    return proc


METRICS_PORTS: dict[int, int] = {}


def objects_passed(pid: int) -> int:
    """How many objects the operator has reconciled at least once (its runners gauge), 0 if not up yet."""
    try:
        text = httpx.get(f"http://127.0.0.1:{METRICS_PORTS[pid]}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("managed_runner_operator_runners{")
        )
    )


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def requests(url: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = httpx.get(f"{url}/_sim/requests", headers=auth(), timeout=30).json()[
        "requests"
    ]
    return entries


def _status_mb(pid: int, field: str) -> float:
    """A memory figure of /proc/<pid>/status (VmRSS, VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def proc_usage(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return _status_mb(pid, "VmRSS"), cpu


CORES = os.cpu_count() or 1


def apiserver_requests(api: client.ApiClient | None = None) -> Counter[str]:
    """kube-apiserver's own count of the requests it served so far (its /metrics), by verb, resource
    and subresource: which calls a phase's apiserver CPU went to."""
    api = api or client.ApiClient()
    method, url, headers, *_ = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    text: bytes = api.call_api(method, url, header_params=headers).response.data
    counts: Counter[str] = Counter()
    for line in text.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
        parts = (labels.get(k, "").strip('"') for k in ("verb", "resource", "subresource"))
        name = "/".join(parts).rstrip("/")
        counts[name] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process, and by the whole machine (`machine`, all
    cores, from /proc/stat): where the cores went when a phase is bound by CPU."""
    used = {name: proc_usage(pid)[1] for name, pid in pids.items()}
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    used["machine"] = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait
    return used


def peak_rss(pid: int) -> float:
    """The process's high-water mark of RSS in MB."""
    return _status_mb(pid, "VmHWM")


def runner_body(shape: str, ns: str, i: int) -> dict[str, Any]:
    """ManagedRunner number `i`: the example's spec (or the minimal one) with its own identity."""
    identity = {"runnerId": f"{ns}-{i:05d}", "clusterId": str(uuid.uuid4())}
    if shape == "example":
        spec = {**copy.deepcopy(_example()["spec"]), **identity}
    else:
        spec = {
            **identity,
            "zone": "us-east-04a",
            "policy": {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 3600}}},
        }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ManagedRunner",
        "metadata": {"name": f"r{i:05d}"},
        "spec": spec,
    }


def _example() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return loaded


def create_secrets(core: client.CoreV1Api, ns: str, shape: str) -> None:
    """The Secrets the example names: the API token (the simulator's admin token) and env values."""
    if shape != "example":
        return
    spec = _example()["spec"]
    secrets: dict[str, dict[str, str]] = {}
    ref = spec["credentials"]["secretRef"]
    secrets.setdefault(ref["name"], {})[ref.get("key", "token")] = TOKEN
    for var in spec.get("overrides", {}).get("env", []):
        if key_ref := var.get("valueFrom", {}).get("secretKeyRef"):
            secrets.setdefault(key_ref["name"], {})[key_ref["key"]] = f"bench-{key_ref['key']}"
    for name, data in secrets.items():
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        secret = client.V1Secret(metadata=client.V1ObjectMeta(name=name), data=encoded)
        core.create_namespaced_secret(ns, secret)


@dataclass(frozen=True)
class Tally:
    """Counts of a RunnerWatch at one moment; phases are differences of two tallies."""

    events: Counter[str]
    changes: Counter[str]
    gone: int


class RssTrace(threading.Thread):
    """The operator's RSS twice a second while it creates: when its peak comes, not only how high.

    Under --memprobe it also asks for a probe each time RSS passes the highest probed so far by
    PROBE_STEP_MB (at most every PROBE_GAP seconds), so the census nearest the peak is written too,
    not only the ones every 30 s.
    """

    PROBE_STEP_MB = 4.0
    PROBE_GAP = 10.0

    def __init__(self, proc: subprocess.Popen[bytes], *, probe: bool) -> None:
        super().__init__(daemon=True)
        self.proc, self.probe = proc, probe
        self.samples: list[tuple[float, float]] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        probed, probed_at = 0.0, 0.0
        while not self._stopping.wait(0.5):
            try:
                rss = _status_mb(self.proc.pid, "VmRSS")
            except OSError:
                return  # the operator exited
            now = time.time()
            self.samples.append((now, rss))
            if self.probe and rss >= probed + self.PROBE_STEP_MB and now - probed_at >= self.PROBE_GAP:
                self.proc.send_signal(signal.SIGUSR1)
                probed, probed_at = rss, now

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the figures: the highest sample's second and the highest per 30 s."""
        self._stopping.set()
        self.join(timeout=5)
        if not self.samples:
            return {}
        start = self.samples[0][0]
        by_interval: dict[str, float] = {}
        for at, rss in self.samples:
            bucket = str(int(at - start) // 30 * 30)
            by_interval[bucket] = max(by_interval.get(bucket, 0.0), round(rss, 1))
        at, rss = max(self.samples, key=lambda sample: sample[1])
        return {
            "operator_rss_mb_highest_sample_creation": round(rss, 1),
            "operator_rss_mb_highest_sample_second": round(at - start, 1),
            "operator_rss_mb_by_second_creation": by_interval,
        }


class RunnerWatch(threading.Thread):
    """The ManagedRunner events of one namespace, tallied as they arrive, on a thread of its own.

    A MODIFIED event is one write to one object; each is classified by the parts it changed
    (spec, status, status.kopf or annotations = kopf's progress, finalizers, deletionTimestamp = the
    delete call). Removing the last finalizer of a deleted object is seen as its DELETED event.
    """

    def __init__(self, kubeconfig: Path, ns: str) -> None:
        super().__init__(daemon=True)
        self.api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))
        self.ns = ns
        self.lock = threading.Lock()
        self.ready_at: dict[str, float] = {}
        self.gone: set[str] = set()
        self.events: Counter[str] = Counter()
        self.changes: Counter[str] = Counter()
        self.restarts = 0  # watch reconnections (expired or dropped); events are never double-counted
        self._parts: dict[str, dict[str, int]] = {}
        self._stopping = threading.Event()
        self._watch = watch.Watch()
        self._resource_version = self._relist()

    def tally(self) -> Tally:
        with self.lock:
            return Tally(Counter(self.events), Counter(self.changes), len(self.gone))

    def stop(self) -> None:
        self._stopping.set()
        self._watch.stop()
        self.join(timeout=45)

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                for event in self._watch.stream(
                    self.api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.ns,
                    PLURAL,
                    resource_version=self._resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=30,
                ):
                    self._note(event)
            except client.ApiException as exc:
                self.restarts += 1
                if exc.status == 410:
                    self._resource_version = self._relist()
            except Exception:  # a dropped connection: resume from the last version seen
                self.restarts += 1
                time.sleep(1)

    def _relist(self) -> str:
        """Start (again) from a list: objects missing from it were deleted while no watch ran."""
        listed = json_object(self.api.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL))
        items = {item["metadata"]["name"]: item for item in listed["items"]}
        with self.lock:
            for name in set(self._parts) - set(items):
                self.gone.add(name)
                self._parts.pop(name)
            for name, item in items.items():
                self._parts[name] = _parts(item)
                if name not in self.ready_at and _is_ready(item):
                    self.ready_at[name] = time.time()
        version: str = listed["metadata"]["resourceVersion"]
        return version

    def _note(self, event: dict[str, Any]) -> None:
        kind, obj = event["type"], json_object(event["object"])
        if kind == "ERROR":
            raise client.ApiException(status=obj.get("code"), reason=obj.get("message"))
        meta = obj["metadata"]
        self._resource_version = meta.get("resourceVersion", self._resource_version)
        if kind == "BOOKMARK":
            return
        name, now = meta["name"], time.time()
        with self.lock:
            self.events[kind] += 1
            if kind == "DELETED":
                self.gone.add(name)
                self._parts.pop(name, None)
                return
            parts, before = _parts(obj), self._parts.get(name)
            self._parts[name] = parts
            if kind == "MODIFIED" and before is not None:
                self.changes["+".join(p for p in parts if parts[p] != before[p]) or "nothing"] += 1
            if name not in self.ready_at and _is_ready(obj):
                self.ready_at[name] = now


def _parts(obj: dict[str, Any]) -> dict[str, int]:
    """A fingerprint of each part of an object a write may change."""
    meta, status = obj["metadata"], dict(obj.get("status") or {})
    parts = {
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "finalizers": meta.get("finalizers"),
        "annotations": meta.get("annotations"),
        "spec": obj.get("spec"),
        "status.kopf": status.pop("kopf", None),
        "status": status,
    }
    return {k: hash(json.dumps(v, sort_keys=True)) for k, v in parts.items()}


def _is_ready(obj: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def bench_size(
    n: int,
    args: argparse.Namespace,
    cluster: LocalCluster,
    work: Path,
    root: Path,
    label: str,
    env: dict[str, str] | None = None,
) -> Run:
    run = Run(n, label=label)
    # Only an operator started under bench.memprobe handles SIGUSR1 (a baseline's would exit on it).
    probing = bool(args.memprobe) and root == ROOT
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = f"bench-{n}-{uuid.uuid4().hex[:4]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    create_secrets(core, ns, args.spec)
    sim, url = start_simulator(args, work, quota=True)
    op = start_operator(cluster, ns, url, args, work, root, env)
    watcher = RunnerWatch(cluster.kubeconfig, ns)
    watcher.start()
    try:
        time.sleep(3)  # operator start-up, not part of the measurement
        applied: dict[str, tuple[float, dict[str, Any]]] = {}

        def apply(i: int) -> None:
            body = runner_body(args.spec, ns, i)
            created = _create(custom, ns, body)
            applied[body["metadata"]["name"]] = (time.time(), created)

        trace = RssTrace(op, probe=probing)
        trace.start()
        tally_before = watcher.tally()
        pids = {
            "operator": op.pid,
            "simulator": sim.pid,
            "bench": os.getpid(),
            **{name: cluster.process(name).pid for name in ("kube-apiserver", "etcd")},
        }
        cpu_start = cpu_seconds(pids)
        served_start = apiserver_requests()
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.apply_threads) as pool:
            list(pool.map(apply, range(n)))
        t_applied = time.time()
        probed = time.time()
        while len(watcher.ready_at) < n and time.time() - t0 < 60 * 30:
            if probing and time.time() - probed >= 30:
                op.send_signal(signal.SIGUSR1)
                probed = time.time()
            time.sleep(1.0)
        t_ready = time.time()
        cpu_ready = cpu_seconds(pids)
        served = apiserver_requests() - served_start
        busy = cpu_ready["machine"] - cpu_start["machine"]  # all cores
        tally_ready = watcher.tally()
        traced = trace.stop()
        with watcher.lock:
            first_ready = dict(watcher.ready_at)
        rss, cpu = proc_usage(op.pid)
        if probing:
            op.send_signal(signal.SIGUSR1)
        log = requests(url)
        # The last create cannot be sent before N requests at the budget, then it still installs.
        lower = n / args.api_rps + args.install_seconds
        named = {
            reconciling.request_key(resource.ManagedRunnerResource.from_body(created), recreations=0): name
            for name, (_, created) in applied.items()
        }
        latencies = sorted(
            e["at"] - applied[named[key]][0] for e in log if (key := _create_key(e)) and key in named
        )
        ready_times = sorted(first_ready[k] - applied[k][0] for k in first_ready)
        by_endpoint = Counter(e["endpoint"] for e in log)
        run.figures.update(
            {
                "n": n,
                "apply_seconds": round(t_applied - t0, 1),
                "all_ready_seconds": round(t_ready - t0, 1),
                "ready": len(first_ready),
                "lower_bound_seconds": lower,
                "ready_ratio_to_lower_bound": round((t_ready - t0) / lower, 2),
                "create_call_latency_p50": round(statistics.median(latencies), 2) if latencies else None,
                "create_call_latency_p99": round(latencies[int(len(latencies) * 0.99) - 1], 2)
                if latencies
                else None,
                "ready_latency_p50": round(statistics.median(ready_times), 1) if ready_times else None,
                "ready_latency_spread_p99_p1": round(
                    ready_times[int(len(ready_times) * 0.99) - 1] - ready_times[int(len(ready_times) * 0.01)],
                    1,
                )
                if ready_times
                else None,
                "calls_during_creation": len(log),
                "calls_per_runner_creation": round(len(log) / n, 2),
                "calls_by_endpoint_creation": dict(by_endpoint),
                "http_429_during_creation": sum(1 for e in log if e["status"] == 429),
                # Every MODIFIED event until all Ready is a write by the operator (or kopf for it).
                "creation_k8s_modified_per_runner": round(
                    (tally_ready.events["MODIFIED"] - tally_before.events["MODIFIED"]) / n, 2
                ),
                "creation_k8s_modified_by_change": dict(
                    (tally_ready.changes - tally_before.changes).most_common()
                ),
                "operator_rss_mb_after_ready": round(rss, 1),
                "operator_rss_mb_peak_creation": round(peak_rss(op.pid), 1),
                "operator_cpu_seconds_creation": round(cpu, 1),
                # The bench is the driver's apply threads and the watch that times Ready.
                "creation_cpu_seconds_by_process": {
                    name: round(cpu_ready[name] - cpu_start[name], 1) for name in cpu_start
                },
                "creation_k8s_requests_per_runner": {
                    name: round(count / n, 2) for name, count in served.most_common() if count >= n / 100
                },
                "creation_machine_busy_percent": round(100 * busy / (t_ready - t0) / CORES, 1),
            }
        )
        run.figures.update(creation_timeline(log, named, first_ready, t0, args))
        run.figures.update(traced)
        # Steady state.
        httpx.delete(f"{url}/_sim/requests", headers=auth(), timeout=30)
        cpu_before = proc_usage(op.pid)[1]
        time.sleep(args.steady_window)
        log = requests(url)
        rss, cpu = proc_usage(op.pid)
        reads = sum(1 for e in log if e["method"] == "GET")
        per_runner_interval = reads / n / (args.steady_window / args.resync)
        run.figures.update(
            {
                "steady_window_seconds": args.steady_window,
                "steady_calls": len(log),
                "steady_writes": sum(1 for e in log if e["method"] != "GET"),
                "steady_reads_per_runner_per_resync": round(per_runner_interval, 3),
                "steady_reads_per_runner_hour_at_default_300s_resync": round(per_runner_interval * 12, 3),
                "steady_calls_by_endpoint": dict(Counter(e["endpoint"] for e in log)),
                "operator_rss_mb_steady": round(rss, 1),
                "operator_cpu_percent_steady": round(100 * (cpu - cpu_before) / args.steady_window, 1),
            }
        )
        run.figures.update(drift(n, args, ns, url))
        # Restart with N Ready runners.
        stop(op)
        httpx.delete(f"{url}/_sim/requests", headers=auth(), timeout=30)
        t_restart = time.time()
        op = start_operator(cluster, ns, url, args, work, root, env)
        settle = args.resync + 60
        resynced_after = None
        timeline: dict[int, int] = {}
        while time.time() - t_restart < settle:
            passed = objects_passed(op.pid)
            timeline.setdefault(int(time.time() - t_restart) // 15 * 15, passed)
            if resynced_after is None and passed >= n:
                resynced_after = time.time() - t_restart
            time.sleep(1.0)
        if probing:
            op.send_signal(signal.SIGUSR1)
        log = requests(url)
        per_second = Counter(int(e["at"] - t_restart) for e in log)
        observed = objects_passed(op.pid)
        run.figures.update(
            {
                "restart_window_seconds": settle,
                "restart_calls": len(log),
                "restart_writes": sum(1 for e in log if e["method"] != "GET"),
                "restart_calls_by_endpoint": dict(Counter(e["endpoint"] for e in log)),
                "restart_peak_requests_per_second": max(per_second.values()) if per_second else 0,
                "restart_objects_passed_in_window": observed,
                "restart_seconds_until_every_object_passed": round(resynced_after, 1)
                if resynced_after is not None
                else None,
                "restart_objects_passed_by_second": {str(k): v for k, v in sorted(timeline.items())},
                "restart_http_429": sum(1 for e in log if e["status"] == 429),
                "operator_rss_mb_after_restart": round(proc_usage(op.pid)[0], 1),
                "operator_rss_mb_peak_after_restart": round(peak_rss(op.pid), 1),
            }
        )
        if not args.skip_decommission:
            run.figures.update(decommission(n, args, custom, ns, url, op, watcher))
    finally:
        watcher.stop()
        for proc in (op, sim):
            stop(proc)
    return run


def creation_timeline(
    log: list[dict[str, Any]],
    named: dict[str, str],
    ready_at: dict[str, float],
    t0: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Where apply-to-Ready goes beyond the calls it needs: the request budget left unused until the
    last create was answered, and how long after each runner finished installing its Ready was seen.
    """
    created = {
        named[key]: e["at"] for e in log if e["status"] < 300 and (key := _create_key(e)) and key in named
    }
    if not created:
        return {}
    first, last = min(created.values()), max(created.values())
    calls_until_last = sum(1 for e in log if e["at"] <= last)
    noticed = sorted(ready_at[k] - (at + args.install_seconds) for k, at in created.items() if k in ready_at)
    return {
        "first_create_seconds": round(first - t0, 1),
        "last_create_seconds": round(last - t0, 1),
        "budget_unused_seconds_until_last_create": round((last - t0) - calls_until_last / args.api_rps, 1),
        "ready_seen_after_install_p50": round(statistics.median(noticed), 1) if noticed else None,
        "ready_seen_after_install_max": round(noticed[-1], 1) if noticed else None,
        "last_ready_after_last_create": round(max(ready_at.values()) - last, 1) if ready_at else None,
    }


DRIFTED = 20


def drift(n: int, args: argparse.Namespace, ns: str, url: str) -> dict[str, Any]:
    """Edit DRIFTED runners out of band (the simulator's control API, as a console edit would) and
    time each until the operator's corrective update call reaches the API (its request log)."""
    httpx.delete(f"{url}/_sim/requests", headers=auth(), timeout=30)
    step = max(1, n // DRIFTED)
    edited: dict[str, float] = {}
    for i in range(0, n, step)[:DRIFTED]:
        runner_id = runner_body(args.spec, ns, i)["spec"]["runnerId"]
        reply = httpx.patch(
            f"{url}/_sim/runners/{runner_id}",
            json={"displayName": "edited in the console"},
            headers=auth(),
            timeout=30,
        )
        reply.raise_for_status()
        edited[runner_id] = time.time()
    deadline = time.time() + 2 * args.resync + 60
    corrected: dict[str, float] = {}
    while len(corrected) < len(edited) and time.time() < deadline:
        time.sleep(2.0)
        for e in requests(url):
            runner_id = e["path"].rsplit("/", 1)[-1].split(":", 1)[0]
            # Only an accepted PATCH corrects: a 429'd or dropped one (status 0) is retried later.
            accepted = 200 <= e["status"] < 300
            if e["method"] == "PATCH" and accepted and runner_id in edited and runner_id not in corrected:
                corrected[runner_id] = e["at"] - edited[runner_id]
    latencies = sorted(corrected.values())
    return {
        "drift_edited": len(edited),
        "drift_corrected": len(corrected),
        "drift_correction_seconds_p50": round(statistics.median(latencies), 1) if latencies else None,
        "drift_correction_seconds_max": round(latencies[-1], 1) if latencies else None,
    }


def decommission(
    n: int,
    args: argparse.Namespace,
    custom: client.CustomObjectsApi,
    ns: str,
    url: str,
    op: subprocess.Popen[bytes],
    watcher: RunnerWatch,
) -> dict[str, Any]:
    """Delete all N ManagedRunners at once (deletionPolicy Delete) and measure until every one is gone."""
    httpx.delete(f"{url}/_sim/requests", headers=auth(), timeout=30)
    before = watcher.tally()
    cpu_before = proc_usage(op.pid)[1]
    t_delete = time.time()
    # One DeleteCollection: the API server marks every object deleted, as a namespace teardown does.
    for attempt in range(1, 11):
        try:
            custom.delete_collection_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, _request_timeout=900
            )
        except urllib3.exceptions.ProtocolError as exc:
            # At N = 3,000 the response (every object, about 40 MB) broke off after the deletion was
            # accepted; the watch below says whether every object was marked and went.
            print(f"bench: DeleteCollection response broke off ({exc!r}); following the watch", flush=True)
        except client.ApiException as exc:
            if exc.status != 504:
                raise
            # The API server's own request timeout (60 s) can end a DeleteCollection of thousands
            # part-way on a loaded machine: send it again for the objects not marked yet.
            print(f"bench: DeleteCollection timed out on the server (attempt {attempt}); again", flush=True)
            continue
        break
    t_marked = time.time()
    timeline: dict[int, int] = {}
    while watcher.tally().gone < n and time.time() - t_delete < 60 * 40:
        gone = watcher.tally().gone
        timeline.setdefault(int(time.time() - t_delete) // 60 * 60, gone)
        time.sleep(1.0)
    t_gone = time.time()
    after = watcher.tally()
    log = requests(url)
    rss, cpu = proc_usage(op.pid)
    modified = after.events["MODIFIED"] - before.events["MODIFIED"]
    changes = after.changes - before.changes
    # The delete call itself is the write that sets deletionTimestamp; the rest are the operator's.
    requested = sum(v for k, v in changes.items() if "deletionTimestamp" in k)
    # Each runner needs one DELETE within the request budget; the last one then decommissions.
    lower = n / args.api_rps + args.delete_seconds
    return {
        "decommission_delete_call_seconds": round(t_marked - t_delete, 1),
        "decommission_seconds_until_all_gone": round(t_gone - t_delete, 1),
        "decommission_gone": after.gone - before.gone,
        "decommission_lower_bound_seconds": lower,
        "decommission_ratio_to_lower_bound": round((t_gone - t_delete) / lower, 2),
        "decommission_gone_by_second": {str(k): v for k, v in sorted(timeline.items())},
        "decommission_calls": len(log),
        "decommission_calls_per_runner": round(len(log) / n, 2),
        "decommission_calls_by_endpoint": dict(Counter(e["endpoint"] for e in log)),
        "decommission_http_429": sum(1 for e in log if e["status"] == 429),
        "decommission_k8s_modified_per_runner": round(modified / n, 2),
        "decommission_k8s_modified_per_runner_by_operator": round((modified - requested) / n, 2),
        "decommission_k8s_modified_by_change": dict(changes.most_common()),
        "decommission_k8s_deleted_events": after.events["DELETED"] - before.events["DELETED"],
        "decommission_watch_restarts": watcher.restarts,
        "operator_cpu_seconds_decommission": round(cpu - cpu_before, 1),
        "operator_rss_mb_after_decommission": round(rss, 1),
        "operator_rss_mb_peak_restart_and_decommission": round(peak_rss(op.pid), 1),
    }


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it has not exited within a minute."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _create(custom: client.CustomObjectsApi, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create one object, riding out the 5xx a saturated test API server answers (a 504 may still create)."""
    for attempt in range(6):
        try:
            return json_object(custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))
        except client.ApiException as exc:
            if exc.status == 409:
                return json_object(
                    custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body["metadata"]["name"])
                )
            if exc.status is None or exc.status < 500 or attempt == 5:
                raise
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def _query(entry: dict[str, Any]) -> dict[str, list[str]]:
    from urllib.parse import parse_qs

    return parse_qs(entry.get("query", ""))


def _create_key(entry: dict[str, Any]) -> str | None:
    """The requestId of a logged create call (None for any other call)."""
    if entry["method"] != "POST":
        return None
    keys = _query(entry).get("requestId")
    return keys[0] if keys else None


def apiserver_version() -> str:
    """The version the bench's kube-apiserver binary reports, e.g. v1.37.2."""
    shown = subprocess.run(
        [str(ROOT / "tests/testenv/bin/kube-apiserver"), "--version"], capture_output=True, text=True
    )
    return shown.stdout.split()[-1] if shown.returncode == 0 and shown.stdout else "unknown version"


def render(runs: list[Run], args: argparse.Namespace) -> str:
    lines = [
        "# Scale benchmark results",
        "",
        "Command: `.venv/bin/python -m bench.scale --sizes "
        f"{args.sizes} --spec {args.spec} --install-seconds {args.install_seconds:g} "
        f"--delete-seconds {args.delete_seconds:g} "
        f"--latency {args.latency:g} --api-rps {args.api_rps:g} --steady-window {args.steady_window:g} "
        f"--resync {args.resync:g}"
        + (f" --baseline {args.baseline} --baseline-sizes {args.baseline_sizes}" if args.baseline else "")
        + (
            f" --baseline-env {args.baseline_env} --baseline-sizes {args.baseline_sizes}"
            if args.baseline_env and not args.baseline
            else ""
        )
        + (f" --apply-threads {args.apply_threads}" if args.apply_threads != 1 else "")
        + (" --skip-decommission" if args.skip_decommission else "")
        + "`",
        "",
        f"Machine: {os.cpu_count()} cores, "
        f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB; real kube-apiserver "
        f"{apiserver_version()} + etcd, simulator, operator and bench driver on the same machine (everything "
        f"shares the {os.cpu_count()} cores; load average {args.load_at_start:.1f} when the run started).",
        "",
        "| figure | " + " | ".join(f"N = {r.n}, {r.label}" for r in runs) + " |",
        "| --- | " + " | ".join("---" for _ in runs) + " |",
    ]
    keys = list(runs[0].figures) if runs else []
    for key in keys:
        if key == "n":
            continue
        values = [r.figures.get(key) for r in runs]
        shown = [json.dumps(v) if isinstance(v, dict) else str(v) for v in values]
        lines.append(f"| {key} | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
