"""One fault scenario's world: its namespace, simulator (own token), operator(s), call log and checks.

Every scenario uses a recognisable API token and an env value read from a Secret, so the final
secret scan has something to find if the operator ever leaks one.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from runner_operator.simulator.config import Timings
from tests.e2e.harness import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    SimulatorThread,
    condition,
    manifest,
    ready_at,
)
from tests.e2e.kube import Kube, json_object, wait_for
from tests.e2e.reliability import Call, CallLog, Cloud, Record, cloud_matches, secret_free

TIMINGS = Timings(
    install_seconds=0.5, provision_seconds=1.0, rollout_seconds=1.0, delete_seconds=1.5, heartbeat_seconds=1.0
)
# The operator settings every scenario starts from (a scenario may override some).
OPERATOR_ENV = {
    "RUNNER_OPERATOR_FAST_INTERVAL": "0.5",
    "RUNNER_OPERATOR_RESYNC_INTERVAL": "10",
    "RUNNER_OPERATOR_REQUEST_TIMEOUT": "2",
    "RUNNER_OPERATOR_RETRY_BUDGET": "10",  # the default (the shared e2e harness shortens it to 2)
}
TOKEN_SECRET, ENV_SECRET = "coreweave-api", "runner-env"


def new_token(kind: str = "token") -> str:
    return f"CW-SECRET-faults-{kind}-{secrets.token_hex(8)}"


class Conditions(threading.Thread):
    """Polls the namespace's ManagedRunners and records every distinct condition seen, in order."""

    def __init__(self, kubeconfig: Path, namespace: str, record: Callable[[str], None]) -> None:
        super().__init__(daemon=True, name=f"conditions-{namespace}")
        self._api = config.new_client_from_config(config_file=str(kubeconfig))
        self._namespace = namespace
        self._record = record
        self._halt = threading.Event()

    def run(self) -> None:
        custom = client.CustomObjectsApi(self._api)
        while not self._halt.wait(0.25):
            try:
                listed = custom.list_namespaced_custom_object(GROUP, VERSION, self._namespace, PLURAL)
                items = json_object(listed)["items"]
            except Exception:  # the API server may be restarting; keep sampling
                continue
            for obj in items:
                for cond in (obj.get("status") or {}).get("conditions") or ():
                    if cond.get("type") == "Stalled" and cond.get("status") == "False":
                        continue
                    self._record(f"{cond.get('type')}={cond.get('status')}:{cond.get('reason')}")

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self._api.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class FaultEnv:
    kube: Kube
    log_dir: Path
    extra_tokens: tuple[str, ...] = ()
    token: str = field(default_factory=new_token)
    env_value: str = field(default_factory=lambda: f"envsecret-{secrets.token_hex(8)}")
    operators: list[OperatorProcess] = field(default_factory=list)
    also_secret: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.control_token = f"sim-control-{secrets.token_hex(6)}"
        self.sim = SimulatorThread(
            TIMINGS, admin_tokens=(self.token, *self.extra_tokens), control_token=self.control_token
        )
        self.sim.start()
        self.sim.token = self.control_token  # the /_sim control API; API reads go through `cloud`
        self.calls = CallLog(self.sim)
        self.cloud = Cloud(self.sim)
        self.ns = self.kube.new_namespace("faults")
        self.kube.create_secret(self.ns, ENV_SECRET, {"apiKey": self.env_value})
        self._sim_log = _Lines()
        self._sim_logger = logging.getLogger("runner_operator.simulator")
        self._sim_level = self._sim_logger.level
        self._sim_logger.addHandler(self._sim_log)
        self._sim_logger.setLevel(logging.INFO)
        self.record: Record | None = None
        self._watcher: Conditions | None = None

    # -- set-up ---------------------------------------------------------------------------------

    def watch(self, record: Record) -> None:
        """Record every condition the scenario's resources go through."""
        self.record = record
        self._watcher = Conditions(self.kube.kubeconfig, self.ns, record.see)
        self._watcher.start()

    def token_secret(self, token: str | None = None, name: str = TOKEN_SECRET) -> None:
        self.kube.create_secret(self.ns, name, {"token": token or self.token})

    def operator(self, **env: str) -> OperatorProcess:
        """Start an operator for this namespace and wait until it is up (so timings exclude start-up)."""
        proc = OperatorProcess(
            self.kube.kubeconfig, [self.ns], self.sim.url, self.log_dir, env={**OPERATOR_ENV, **env}
        ).start()
        self.operators.append(proc)
        proc.wait_for_log("Initial authentication has finished", timeout=60)
        return proc

    def timeline(self) -> str:
        """Every API call, relative to the first one (for debugging a scenario: FAULTS_DEBUG=1)."""
        calls = self.calls.calls()
        origin = calls[0].arrived if calls else 0.0
        return "\n".join(
            f"{c.arrived - origin:7.2f} +{c.done - c.arrived:5.2f} {c.method:6} {c.endpoint:8} {c.status} "
            f"{c.fault or ''}"
            for c in calls
        )

    def close(self) -> None:
        for proc in self.operators:
            proc.stop()
        if os.environ.get("FAULTS_DEBUG"):
            print(f"\n== API calls ({self.ns})\n{self.timeline()}")
            for proc in self.operators:
                print(f"== operator log {proc.log_path}\n{proc.output()[-20000:]}")
        if self._watcher is not None:
            self._watcher.stop()
        self._sim_logger.removeHandler(self._sim_log)
        self._sim_logger.setLevel(self._sim_level)
        self.sim.stop()

    # -- resources ------------------------------------------------------------------------------

    def body(self, name: str, *, secret: str | None = TOKEN_SECRET, **spec: Any) -> dict[str, Any]:
        """A ManagedRunner whose token comes from a Secret and one env value from another Secret."""
        env = [
            {"name": "PLAIN", "value": "not-secret"},
            {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": ENV_SECRET, "key": "apiKey"}}},
        ]
        spec.setdefault("overrides", {"env": env})
        return manifest(name, secret=secret, **spec)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return json_object(
            self.kube.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)
        )

    def get(self, name: str) -> dict[str, Any] | None:
        return self.kube.get(GROUP, VERSION, self.ns, PLURAL, name)

    def patch_spec(self, name: str, spec: dict[str, Any]) -> int:
        """Merge-patch the spec; return the new generation."""
        obj = self.kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name, {"spec": spec}
        )
        return int(json_object(obj)["metadata"]["generation"])

    def delete(self, name: str) -> None:
        self.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    # -- waiting, timed -------------------------------------------------------------------------

    def ready(self, name: str, generation: int | None = None) -> dict[str, Any] | None:
        obj = self.get(name)
        return obj if ready_at(obj, generation) else None

    def wait_ready(self, *names: str, generation: int | None = None, timeout: float = 60) -> float:
        """Wait until every named resource is Ready for `generation` (default: its own); return seconds."""
        started = time.monotonic()
        wait_for(
            lambda: all(self.ready(n, generation) for n in names),
            timeout=timeout,
            interval=0.2,
            what=f"{', '.join(names)} Ready" + (f" at generation {generation}" if generation else ""),
        )
        return time.monotonic() - started

    def wait_reason(self, name: str, type_: str, reason: str, *, timeout: float = 60) -> float:
        """Wait until condition `type_` of `name` has `reason`; return seconds."""
        started = time.monotonic()
        wait_for(
            lambda: condition(self.get(name), type_).get("reason") == reason,
            timeout=timeout,
            interval=0.2,
            what=f"{name} {type_} reason {reason}",
        )
        return time.monotonic() - started

    def wait_gone(self, *names: str, timeout: float = 60) -> float:
        started = time.monotonic()
        wait_for(
            lambda: all(self.get(n) is None for n in names),
            timeout=timeout,
            interval=0.2,
            what=f"{', '.join(names)} deleted",
        )
        return time.monotonic() - started

    # -- the API calls --------------------------------------------------------------------------

    def fault(self, **body: Any) -> None:
        self.sim.control("POST", "/faults", body)

    def clear_faults(self) -> None:
        self.sim.control("DELETE", "/faults")

    def operator_calls(self, since: float = 0.0, until: float = float("inf")) -> list[Call]:
        return self.calls.calls(since, until)

    def successful(self, method: str, runner_id: str | None = None) -> int:
        """Calls of `method` answered 200 (for one runner, or any)."""
        return sum(
            1
            for c in self.calls.calls()
            if c.method == method and c.status == 200 and (runner_id is None or c.path.endswith(runner_id))
        )

    # -- the checks every scenario ends with ----------------------------------------------------

    def events(self) -> str:
        return self.kube.kubectl("get", "events", "-n", self.ns, "-o", "yaml").stdout

    def event_reasons(self) -> list[str]:
        items = yaml.safe_load(self.events()).get("items") or []
        return sorted({str(e.get("reason")) for e in items})

    def final_checks(self, record: Record) -> None:
        """Cloud = Kubernetes, nothing secret anywhere, the call count; filled into `record`."""
        record.api_calls = len(self.calls.calls())
        record.cloud = cloud_matches(self.kube, self.ns, self.cloud)
        resources = self.kube.kubectl("get", "managedrunners", "-n", self.ns, "-o", "yaml").stdout
        events = self.events()
        request_log = "\n".join(f"{c.method} {c.path}?{c.query} {c.status}" for c in self.calls.calls())
        sources = {
            "operator log": "\n".join(p.output() for p in self.operators),
            "Events": events,
            "ManagedRunners": resources,
            "simulator log": "\n".join(self._sim_log.lines) + "\n" + request_log,
        }
        assert sources["operator log"], "the operator printed nothing: the scan would prove nothing"
        record.secrets = secret_free(
            [self.token, self.env_value, *self.extra_tokens, *self.also_secret], sources
        )
        reasons = self.event_reasons()
        record.notes.append(f"Events: {', '.join(reasons) if reasons else 'none'}")
