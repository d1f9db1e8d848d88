"""The chart's PrometheusRule and Grafana dashboard, checked by Prometheus' own promtool.

`promtool check rules` lints the rendered alerts, `promtool test rules` plays the scenarios in
tests/unit/alerts/alerts_test.yaml against them (series in, alerts and their text out), and every
metric an alert or a panel names must be one the operator exports.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner_operator import metrics, reasons
from tests.support.chart import ROOT, one, render
from tests.testenv.tools import tool

CHART = ROOT / "helm" / "managed-runner-operator"
SCENARIOS = Path(__file__).parent / "alerts" / "alerts_test.yaml"
DASHBOARD = CHART / "dashboards" / "managed-runner-operator.json"
# The release the scenarios are written for: job="mro-metrics", namespace="ops".
RELEASE = {"fullnameOverride": "mro", "metrics": {"enabled": True, "prometheusRule": {"enabled": True}}}
# What prometheus_client's collectors add to the operator's own metrics.
COLLECTED = {"process_resident_memory_bytes", "process_cpu_seconds_total"}


def rule_groups(values: dict[str, Any] = RELEASE) -> list[dict[str, Any]]:
    rule = one(render(values, release="mro", namespace="ops"), "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_alert_rules_pass_promtool_check_and_their_tests(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(SCENARIOS, tmp_path / "alerts_test.yaml")
    checked = promtool("check", "rules", "--lint-fatal", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_scenarios_fail_when_a_threshold_moves(tmp_path: Path) -> None:
    """The scenarios pin the thresholds: a rule that no longer fires where expected is caught."""
    moved = {
        "fullnameOverride": "mro",
        "metrics": {"enabled": True, "prometheusRule": {"enabled": True, "apiErrorRatio": 0.2}},
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups(moved)}))
    shutil.copy(SCENARIOS, tmp_path / "alerts_test.yaml")
    tested = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode != 0
    assert "alertname: ManagedRunnerAPIErrors" in tested.stdout + tested.stderr


def test_every_alert_has_a_scenario() -> None:
    alerts = {rule["alert"] for group in rule_groups() for rule in group["rules"]}
    tested = {
        case["alertname"]
        for test in yaml.safe_load(SCENARIOS.read_text())["tests"]
        for case in test.get("alert_rule_test", ())
        if case.get("exp_alerts")
    }
    assert alerts == tested


def test_the_credentials_alert_covers_every_credentials_reason() -> None:
    """One alert pages for credentials; the rest of Stalled warns. A new credentials reason must join."""
    (rule,) = [
        r for g in rule_groups() for r in g["rules"] if r["alert"] == "ManagedRunnerCredentialsRejected"
    ]
    listed = set(re.search(r'reason=~"([^"]+)"', rule["expr"]).group(1).split("|"))  # type: ignore[union-attr]
    stalled = {name for name, (where, _) in reasons.REASONS.items() if reasons.STALLED in where}
    assert listed <= stalled
    assert {name for name in stalled if "Credentials" in name or name == "PermissionDenied"} <= listed


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def test_the_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """Grafana's variables replaced by values, each query is a recording rule promtool parses."""
    rules = [
        {
            "record": f"dashboard:query_{i}",
            "expr": expr.replace("$__rate_interval", "5m")
            .replace("$job", "mro-metrics")
            .replace("$namespace", "ops"),
        }
        for i, expr in enumerate(dashboard_exprs())
    ]
    (tmp_path / "dashboard.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    checked = promtool("check", "rules", "dashboard.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_metric_named_is_exported(source: str) -> None:
    exprs = (
        [r["expr"] for g in rule_groups() for r in g["rules"]] if source == "alerts" else dashboard_exprs()
    )
    named = {m for expr in exprs for m in re.findall(r"\b(?:managed_runner_operator|process)_\w+", expr)}
    exported = set(metrics.METRIC_NAMES) | COLLECTED
    histogram_series = {n + s for n in exported for s in ("_bucket", "_sum", "_count")}
    assert named
    assert named <= exported | histogram_series


def test_the_dashboard_configmap_carries_the_json() -> None:
    docs = render(
        {
            "metrics": {
                "enabled": True,
                "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "CoreWeave"}},
            }
        }
    )
    configmap = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    )
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "CoreWeave"}
    assert json.loads(configmap["data"]["managed-runner-operator.json"]) == json.loads(DASHBOARD.read_text())
    assert not [d for d in render() if d["kind"] in ("PrometheusRule", "ConfigMap")]
