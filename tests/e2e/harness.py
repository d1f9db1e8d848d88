"""The pieces an operator e2e test drives: the API simulator (in a thread) and the operator (a process).

The operator runs as a real `runner-operator run` subprocess so tests can SIGKILL and restart it;
its log is kept so the suites can scan everything it printed for secrets.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "sandbox.coreweave.com", "v1alpha1", "managedrunners"


class SimulatorThread:
    """The CoreWeave API simulator on 127.0.0.1, served from its own event loop in a thread."""

    def __init__(self, timings: Timings, **config: Any) -> None:
        self.config = SimulatorConfig(timings=timings, **config)
        self.token = self.config.admin_tokens[0] if self.config.admin_tokens else DEV_ADMIN_TOKEN
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="simulator")
        self._server: RunningServer | None = None
        self.url = ""

    def start(self) -> SimulatorThread:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(serve(self.config), self._loop).result(30)
        self.url = self._server.url
        return self

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def control(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """Call the /_sim test-control API."""
        response = httpx.request(
            method,
            f"{self.url}/_sim{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json() if response.content else None

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call the CoreWeave API itself, as another client would."""
        return httpx.request(
            method,
            f"{self.url}/v1/sandbox/managedRunners{path}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
            **kwargs,
        )

    def runner(self, runner_id: str) -> dict[str, Any] | None:
        response = self.api("GET", f"/{runner_id}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def requests(self) -> list[dict[str, Any]]:
        log: dict[str, Any] = self.control("GET", "/requests")
        entries: list[dict[str, Any]] = log.get("requests", log.get("entries", []))
        return entries


class RunningOperator(Protocol):
    """What a life-cycle test needs of the operator under test, however it was started."""

    def output(self) -> str: ...


class OperatorProcess:
    """`runner-operator run` in a subprocess with its own log file."""

    def __init__(
        self,
        kubeconfig: Path,
        namespaces: list[str],
        endpoint: str,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespaces = namespaces
        self.endpoint = endpoint
        self.log_path = log_dir / f"operator-{uuid.uuid4().hex[:6]}.log"
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "RUNNER_OPERATOR_API_ENDPOINT": self.endpoint,
            "RUNNER_OPERATOR_FAST_INTERVAL": "0.5",
            "RUNNER_OPERATOR_RESYNC_INTERVAL": "20",
            "RUNNER_OPERATOR_RETRY_BUDGET": "2",
            "RUNNER_OPERATOR_METRICS_PORT": "0",
            "PYTHONPATH": str(ROOT / "operator"),
            **self.extra_env,
        }
        if "COREWEAVE_API_TOKEN" not in self.extra_env:
            env.pop("COREWEAVE_API_TOKEN", None)
        args = [sys.executable, "-m", "runner_operator.cli", "run"]
        for ns in self.namespaces:
            args += ["-n", ns]
        self.launch(args, env, cwd=ROOT)
        return self

    def launch(self, args: list[str], env: Mapping[str, str], *, cwd: Path) -> None:
        """Start the process in its own session (so kill/stop reach its children), logging to log_path."""
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            args,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
        )
        log.close()

    def exited(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no finalizer handling, exactly like a node failure."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if self.proc and self.proc.poll() is not None:
                raise AssertionError(f"operator exited ({self.proc.returncode}):\n{self.output()[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"operator log never said {text!r}:\n{self.output()[-3000:]}")


def manifest(
    name: str,
    *,
    runner_id: str | None = None,
    cluster_id: str | None = None,
    zone: str = "us-east-04a",
    secret: str | None = "coreweave-api",
    **spec: Any,
) -> dict[str, Any]:
    """A ManagedRunner body with unique identity unless given; extra keyword arguments go into spec."""
    body_spec: dict[str, Any] = {
        "runnerId": runner_id or f"{name}-{uuid.uuid4().hex[:6]}",
        "clusterId": cluster_id or str(uuid.uuid4()),
        "zone": zone,
        "policy": {},
    }
    if secret:
        body_spec["credentials"] = {"secretRef": {"name": secret}}
    body_spec.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ManagedRunner",
        "metadata": {"name": name},
        "spec": body_spec,
    }


def ready_at(obj: Mapping[str, Any] | None, generation: int | None = None) -> bool:
    """The one "Ready for this generation" check of the e2e toolkit, the soak and the benches.

    Ready=True, and both the condition and status.observedGeneration at `generation` (default: the
    object's own), so a Ready left over from an older spec does not count.
    """
    if obj is None:
        return False
    cond = condition(obj, "Ready")
    want = generation or obj["metadata"]["generation"]
    return (
        cond.get("status") == "True"
        and cond.get("observedGeneration") == want
        and (obj.get("status") or {}).get("observedGeneration") == want
    )


def condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any]:
    for cond in (obj or {}).get("status", {}).get("conditions", []) or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}
