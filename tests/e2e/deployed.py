"""Run the operator as the chart's Deployment would (e2e only); the chart itself is tests.support.chart."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.e2e.harness import OperatorProcess
from tests.support.chart import ROOT
from tests.support.probes import http_status
from tests.testenv.localcluster import free_port


class DeployedOperator(OperatorProcess):
    """`runner-operator run` with exactly the chart Deployment's args and env, as its ServiceAccount.

    Outside a pod there is no in-cluster config, so the ServiceAccount's token comes in a kubeconfig;
    Secret-backed env values are not supported (the chart uses none). The liveness and metrics
    endpoints move to free ports so operators can run side by side. Process handling (stop, kill,
    logs) is the e2e toolkit's one launcher, `OperatorProcess`.
    """

    def __init__(
        self,
        deployment: Mapping[str, Any],
        kubeconfig: Path,
        log_dir: Path,
        *,
        entry: Sequence[str] | None = None,
    ) -> None:
        super().__init__(kubeconfig, [], "", log_dir)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        self.health_port = free_port()
        self.args = [self._local(arg) for arg in container.get("args", [])]
        self.env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        self.metrics_port = 0
        if self.env.get("RUNNER_OPERATOR_METRICS_PORT", "0") != "0":
            self.metrics_port = free_port()
            self.env["RUNNER_OPERATOR_METRICS_PORT"] = str(self.metrics_port)
        self.probe_path = container["livenessProbe"]["httpGet"]["path"]
        self.entry = list(entry or [sys.executable, "-m", "runner_operator.cli", "run"])

    def _local(self, arg: str) -> str:
        prefix = "--liveness=http://0.0.0.0:"
        if arg.startswith(prefix):
            path = "/" + arg[len(prefix) :].partition("/")[2]
            return f"--liveness=http://127.0.0.1:{self.health_port}{path}"
        return arg

    def start(self) -> DeployedOperator:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RUNNER_OPERATOR_", "COREWEAVE_", "KUBERNETES_"))
        }
        env.update(self.env)
        env["KUBECONFIG"] = str(self.kubeconfig)
        if self.entry[0] == sys.executable:
            env["PYTHONPATH"] = str(ROOT / "operator")
        self.launch([*self.entry, *self.args], env, cwd=self.log_path.parent)
        return self

    def probe(self) -> int | None:
        """HTTP status of the liveness endpoint, or None when nothing answers."""
        return http_status(f"http://127.0.0.1:{self.health_port}{self.probe_path}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return str(response.read().decode())
