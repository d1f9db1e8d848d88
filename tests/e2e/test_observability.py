"""Metrics and JSON logs of a real operator process (issue 8, observability)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import OperatorProcess, SimulatorThread, manifest
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_lifecycle import create, wait_ready
from tests.testenv.localcluster import free_port
from tests.testenv.tools import tool


def test_metrics_endpoint_and_json_logs(kube: Kube, crd: str, sim: SimulatorThread, tmp_path: Path) -> None:
    ns = kube.new_namespace("obs")
    kube.create_secret(ns, "coreweave-api", {"token": sim.token})
    port = free_port()
    op = OperatorProcess(
        kube.kubeconfig,
        [ns],
        sim.url,
        tmp_path,
        env={"RUNNER_OPERATOR_METRICS_PORT": str(port), "RUNNER_OPERATOR_JSON_LOGS": "true"},
    ).start()
    try:
        create(kube, ns, manifest("watched"))
        wait_ready(kube, ns, "watched")
        text = wait_for(lambda: _scrape(port), timeout=20, what="metrics endpoint")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        P = "managed_runner_operator_"

        def value(family: str, **labels: str) -> float:
            return next(s.value for s in families[family].samples if s.labels == labels)

        assert families[P + "api_requests"].type == "counter"
        assert value(P + "api_requests", endpoint="create", code="200") == 1
        assert (
            value(
                P + "runners",
                install_status="RUNNER_INSTALL_STATUS_READY",
                connection_status="RUNNER_CONNECTION_STATUS_CONNECTED",
            )
            == 1
        )
        assert value(P + "reconciles", outcome="synced", action="none") >= 1
        assert value(P + "events", type="Normal", reason="Created") == 1
        assert families[P + "api_request_duration_seconds"].type == "histogram"
        assert value(P + "leader") == 1
        assert families["process_resident_memory_bytes"].samples[0].value > 0
        checked = subprocess.run(
            [tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        op.stop()
    lines = [line for line in op.output().splitlines() if line.strip().startswith("{")]
    assert lines, op.output()[-2000:]
    records = [json.loads(line) for line in lines]
    assert any("Created" in str(r.get("message")) for r in records)
    assert sim.token not in op.output()


def _scrape(port: int) -> str | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except httpx.HTTPError:
        return None
    return (
        response.text
        if response.status_code == 200 and "managed_runner_operator_runners{" in response.text
        else None
    )
