"""The embedded default: local control plane + API simulator + operator + the example ManagedRunner.

Run by `scripts/demo`. It prints progress until the example is Ready, then leaves everything
running for the user to explore with kubectl (Ctrl-C stops it all), or exits with --exit-when-ready.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.testenv.localcluster import BIN_DIR, LocalCluster, free_port

ROOT = Path(__file__).resolve().parents[2]
WORKDIR = ROOT / ".demo"
EXAMPLE = ROOT / "examples" / "managedrunner.yaml"
CRD = ROOT / "crds" / "managedrunners.sandbox.coreweave.com.yaml"
SIM_TOKEN = "CW-SECRET-simulator-admin"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--exit-when-ready", action="store_true", help="stop everything once the example is Ready"
    )
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for Ready")
    args = parser.parse_args(argv)
    # SIGTERM's and SIGHUP's default action (a `kill`, a closed terminal or SSH session) would kill
    # this process at once and leak every child (each runs in its own session); turn them into an
    # exit that runs the cleanup below.
    for stop in STOP_SIGNALS:
        signal.signal(stop, _exit_on_signal)

    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    cluster = LocalCluster(WORKDIR / "cluster")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        step("starting etcd + kube-apiserver + kube-controller-manager v1.37.2 on loopback")
        cluster.start()
        step(
            f"control plane ready in {cluster.started_in:.1f}s at {cluster.server} "
            f"(controller manager: {cluster.ready_in['kube-controller-manager']:.1f}s, "
            f"{cluster.rss_mib('kube-controller-manager'):.0f} MiB)"
        )
        kubeconfig = cluster.kubeconfig
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT / "operator")}

        port = free_port()
        sim_url = f"http://127.0.0.1:{port}"
        step(f"starting the CoreWeave API simulator at {sim_url}")
        procs.append(
            spawn(
                [
                    sys.executable,
                    "-m",
                    "runner_operator.cli",
                    "simulate",
                    "--port",
                    str(port),
                    "--state-file",
                    str(WORKDIR / "simulator-state.json"),
                ],
                "simulator.log",
                env,
            )
        )

        kubectl = [str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig)]
        step("installing the ManagedRunner CRD")
        run([*kubectl, "apply", "--server-side", "-f", str(CRD)])
        established(kubectl)

        example = list(yaml.safe_load_all(EXAMPLE.read_text()))
        runner = next(doc for doc in example if doc and doc.get("kind") == "ManagedRunner")
        namespace = runner["metadata"].get("namespace", "default")
        name = runner["metadata"]["name"]
        step(f"creating namespace {namespace} and the API token Secret")
        run([*kubectl, "create", "namespace", namespace], check=False)
        for secret, data in _secrets_needed(runner).items():
            run(
                [
                    *kubectl,
                    "-n",
                    namespace,
                    "create",
                    "secret",
                    "generic",
                    secret,
                    *[f"--from-literal={key}={value}" for key, value in data.items()],
                ]
            )

        step("starting the operator (runner-operator run)")
        op_env = {**env, "RUNNER_OPERATOR_API_ENDPOINT": sim_url, "RUNNER_OPERATOR_FAST_INTERVAL": "1"}
        procs.append(
            spawn([sys.executable, "-m", "runner_operator.cli", "run", "-A"], "operator.log", op_env)
        )

        step(f"applying {EXAMPLE.relative_to(ROOT)}")
        run([*kubectl, "apply", "-f", str(EXAMPLE)])
        ready = watch(kubectl, namespace, name, args.timeout)
        print()
        run([*kubectl, "get", "managedrunners", "-A"], echo=True)
        if not ready:
            step(f"not Ready after {args.timeout:.0f}s: see {WORKDIR}/operator.log")
            return 1
        print(f"\nkubeconfig: export KUBECONFIG={kubeconfig}")
        print(f"try:        kubectl describe managedrunner {name} -n {namespace}")
        print(f"logs:       {WORKDIR}/operator.log, {WORKDIR}/simulator.log")
        if args.exit_when_ready:
            return 0
        print("\nEverything keeps running; press Ctrl-C to stop.")
        # Block before waiting: an unblocked fatal signal kills the process even inside sigwait,
        # and a blocked SIGINT is queued even when a non-interactive shell started us ignoring it.
        stop_signals = {signal.SIGINT, *STOP_SIGNALS}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        signal.sigwait(stop_signals)
        return 0
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        cluster.stop()
        step("stopped")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _secrets_needed(runner: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The Secrets the example references, name to data: the API token and env values (demo values)."""
    spec = runner["spec"]
    assert isinstance(spec, dict)
    secrets: dict[str, dict[str, str]] = {}
    ref = (spec.get("credentials") or {}).get("secretRef")
    if ref:
        secrets.setdefault(ref["name"], {})[ref.get("key", "token")] = SIM_TOKEN
    for var in (spec.get("overrides") or {}).get("env") or []:
        secret_ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if secret_ref:
            secrets.setdefault(secret_ref["name"], {})[secret_ref["key"]] = f"demo-{secret_ref['key']}"
    return secrets


def established(kubectl: list[str], timeout: float = 60) -> None:
    """Wait for the CRD: `kubectl wait` errors out (not waits) while the new CRD has no conditions yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(
            [
                *kubectl,
                "wait",
                "--for=condition=Established",
                "crd/managedrunners.sandbox.coreweave.com",
                "--timeout=5s",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"the ManagedRunner CRD was not Established after {timeout:.0f}s")


def watch(kubectl: list[str], namespace: str, name: str, timeout: float) -> bool:
    """Print each change of phase/Ready until Ready or the timeout."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        out = subprocess.run(
            [*kubectl, "-n", namespace, "get", "managedrunner", name, "-o", "json"],
            capture_output=True,
            text=True,
        )
        if out.returncode == 0:
            status = json.loads(out.stdout).get("status", {})
            conds = {c["type"]: c for c in status.get("conditions", [])}
            ready = conds.get("Ready", {})
            line = (
                f"phase={status.get('phase', '-')} ready={ready.get('status', '-')} "
                f"({ready.get('reason', '-')}) revision={status.get('activeRevision', 0)}/"
                f"{status.get('targetRevision', 0)}"
            )
            if line != last:
                step(line)
                last = line
            if ready.get("status") == "True":
                return True
        time.sleep(0.5)
    return False


def spawn(args: list[str], log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with (WORKDIR / log).open("ab") as out:
        return subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )


def run(args: list[str], *, check: bool = True, echo: bool = False) -> None:
    proc = subprocess.run(args, capture_output=True, text=True)
    if echo:
        print(proc.stdout, end="")
    if check and proc.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(args[2:])}\n{proc.stderr}")


def step(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
