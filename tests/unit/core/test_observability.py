"""Metrics exposition, the reason catalogue, and docs/observability.md generated from both.

Regenerate the doc with: UPDATE_DOCS=1 pytest tests/unit/core/test_observability.py
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from runner_operator import metrics, reasons

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "observability.md"
PACKAGE = ROOT / "operator" / "runner_operator"


def test_the_reason_enum_is_the_catalogue() -> None:
    """Reasons are typed (`reasons.Reason`): mypy rejects a bare string where one is expected, and
    every member must say here what it means and where it is used."""
    assert set(reasons.REASONS) == {reason.value for reason in reasons.Reason}
    for places, meaning in reasons.REASONS.values():
        assert places
        assert set(places) <= {reasons.EVENT, reasons.READY, reasons.SYNCED, reasons.STALLED}
        assert meaning.endswith(".")


def test_no_reason_is_written_as_a_bare_string() -> None:
    """The typed fields catch calls mypy sees; this catches a literal slipped into an untyped place."""
    values = {reason.value for reason in reasons.Reason}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("reasons.py", "resource.py", "status.py"):  # the catalogue, and type literals
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "Event",
                "Condition",
                "Wait",
                "Conflict",
                "CredentialsProblem",
                "_not_ready",
            ):
                found += [
                    f"{path.name}:{arg.lineno} {arg.value}"
                    for arg in node.args
                    if isinstance(arg, ast.Constant) and arg.value in values
                ]
    assert found == []


def render_doc() -> str:
    registry = metrics.Registry()
    registry.api_requests.inc("get", "200")
    lines = [
        "# Observability: metrics, Events and condition reasons",
        "",
        "Generated from `operator/runner_operator/metrics.py` and `reasons.py` by",
        "`UPDATE_DOCS=1 pytest tests/unit/core/test_observability.py` (a test fails when it is stale).",
        "",
        "The operator serves Prometheus metrics on `:9090/metrics` "
        "(`RUNNER_OPERATOR_METRICS_PORT`, 0 = off).",
        "Logs go to stderr; `--json-logs` (or `RUNNER_OPERATOR_JSON_LOGS=true`) "
        "prints one JSON object a line.",
        "Tokens, env values from Secrets, `policy.base` and `deploymentSpec` never appear "
        "in logs, Events or status.",
        "",
        "## Metrics",
        "",
        "| metric | type | meaning |",
        "| --- | --- | --- |",
    ]
    helps: dict[str, list[str]] = {}
    for line in registry.render().splitlines():
        if line.startswith("# HELP "):
            name, text = line[7:].split(" ", 1)
            helps[name] = [text]
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ", 1)
            helps[name].append(kind)
    for name, (text, kind) in helps.items():
        lines.append(f"| `{name}` | {kind} | {text} |")
    lines += [
        "",
        "## Reasons",
        "",
        "Events (`kubectl get events --field-selector involvedObject.kind=ManagedRunner`) and the conditions",
        "`Ready`, `Synced` and `Stalled` use these reasons. `Stalled=True` means only a spec change",
        "or a person can fix it; everything else is retried by the operator.",
        "",
        "| reason | used in | meaning |",
        "| --- | --- | --- |",
    ]
    for name, (where, meaning) in reasons.REASONS.items():
        lines.append(f"| `{name}` | {', '.join(where)} | {meaning} |")
    return "\n".join(lines) + "\n"


def test_docs_list_every_metric_and_reason() -> None:
    text = render_doc()
    if os.environ.get("UPDATE_DOCS") == "1":
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/observability.md is stale: UPDATE_DOCS=1 pytest " + __file__
    for name in metrics.METRIC_NAMES:
        assert f"`{name}`" in text


def test_exposition_format() -> None:
    registry = metrics.Registry(clock=lambda: 1000.0)
    registry.api_requests.inc("create", "200")
    registry.api_requests.inc("create", "200")
    registry.api_latency.observe(0.03, "get")
    registry.api_latency.observe(20.0, "get")
    registry.track(
        "u1", metrics.RunnerView("RUNNER_INSTALL_STATUS_READY", "RUNNER_CONNECTION_STATUS_CONNECTED", None)
    )
    registry.track("u2", metrics.RunnerView("RUNNER_INSTALL_STATUS_DELETING", "X", 940.0))
    registry.budget_stats = lambda: [(3, 1.5, 1), (1, 0.5, 0)]
    text = registry.render()
    assert 'runner_operator_api_requests_total{endpoint="create",code="200"} 2' in text
    assert 'runner_operator_api_request_duration_seconds_bucket{endpoint="get",le="0.05"} 1' in text
    assert 'runner_operator_api_request_duration_seconds_bucket{endpoint="get",le="10"} 1' in text
    assert 'runner_operator_api_request_duration_seconds_bucket{endpoint="get",le="+Inf"} 2' in text
    assert 'runner_operator_api_request_duration_seconds_count{endpoint="get"} 2' in text
    assert 'runner_operator_runners{install_status="RUNNER_INSTALL_STATUS_READY",' in text
    assert "runner_operator_deletion_age_seconds 60" in text
    assert "runner_operator_deleting_runners 1" in text
    assert "runner_operator_budget_waits_total 4" in text
    assert "runner_operator_rate_limited_total 1" in text
    registry.track("u2", None)
    assert "runner_operator_deletion_age_seconds 0" in registry.render()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names == set(metrics.METRIC_NAMES)


def test_label_values_are_escaped() -> None:
    registry = metrics.Registry()
    registry.events.inc("Warning", 'we"ird\nreason')
    assert 'reason="we\\"ird\\nreason"' in registry.render()
