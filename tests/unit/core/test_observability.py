"""Metrics exposition, the reason catalogue, and docs/observability.md generated from both.

Regenerate the doc with: UPDATE_DOCS=1 pytest tests/unit/core/test_observability.py
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import httpx
import pytest
from prometheus_client.metrics_core import Metric as Family
from prometheus_client.parser import text_string_to_metric_families

from runner_operator import metrics, reasons
from tests.testenv.localcluster import free_port

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
    registry.api_requests.labels("get", "200").inc()
    lines = [
        "# Observability: metrics, Events and condition reasons",
        "",
        "Generated from `operator/runner_operator/metrics.py` and `reasons.py` by",
        "`UPDATE_DOCS=1 pytest tests/unit/core/test_observability.py` (a test fails when it is stale).",
        "",
        "The operator serves Prometheus metrics on `:9090/metrics` "
        "(`RUNNER_OPERATOR_METRICS_PORT`, 0 = off), standbys included.",
        "Besides its own metrics below it exports prometheus_client's `process_*` (memory, CPU,",
        "open files) and `python_*` collectors.",
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
    for family in text_string_to_metric_families(registry.render()):
        name = family.name + ("_total" if family.type == "counter" else "")
        if name.startswith(metrics.PREFIX):
            lines.append(f"| `{name}` | {family.type} | {family.documentation} |")
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


def scrape(registry: metrics.Registry) -> dict[str, Family]:
    """The exposition as Prometheus reads it: family name (counters with `_total`) -> family."""
    return {
        f.name + ("_total" if f.type == "counter" else ""): f
        for f in text_string_to_metric_families(registry.render())
    }


def values(family: Family) -> dict[tuple[str, ...], float]:
    return {(s.name, *sorted(f"{k}={v}" for k, v in s.labels.items())): s.value for s in family.samples}


def test_every_metric_has_the_type_its_name_promises() -> None:
    """Ever-increasing series named `*_total` are counters; the rest are gauges or the histogram."""
    families = scrape(metrics.Registry())
    assert set(metrics.METRIC_NAMES) <= set(families)
    for name in metrics.METRIC_NAMES:
        kind = families[name].type
        if name.endswith("_total"):
            assert kind == "counter", name
        elif name.endswith("_duration_seconds"):
            assert kind == "histogram", name
        else:
            assert kind == "gauge", name
    ours = {n for n in families if n.startswith(metrics.PREFIX)}
    assert ours == set(metrics.METRIC_NAMES)


def test_process_and_build_metrics() -> None:
    families = scrape(metrics.Registry(version="1.2.3"))
    assert families["process_resident_memory_bytes"].samples[0].value > 0
    assert "process_cpu_seconds_total" in families
    assert "process_open_fds" in families
    (build,) = families["managed_runner_operator_build_info"].samples
    assert build.labels["version"] == "1.2.3"
    assert build.value == 1


@pytest.mark.parametrize("count", [1_234_567, 98_765_432_101, 2**53])
def test_large_counters_keep_every_digit(count: int) -> None:
    """A hand-written `{value:g}` printed 1,234,567 as 1.23457e+06; Prometheus would read 1234570."""
    registry = metrics.Registry()
    registry.reconciles.labels("synced", "none").inc(count)
    registry.budget_stats = lambda: [(count, 0.0, 0)]
    families = scrape(registry)
    (sample,) = families["managed_runner_operator_reconciles_total"].samples
    assert int(sample.value) == count
    assert int(families["managed_runner_operator_budget_waits_total"].samples[0].value) == count


def test_scraped_values() -> None:
    registry = metrics.Registry(clock=lambda: 1000.0)
    registry.observe_request("create", "200", 0.2)
    registry.observe_request("create", "200", 0.3)
    registry.api_latency.labels("get").observe(0.03)
    registry.api_latency.labels("get").observe(20.0)
    registry.track(
        "u1", metrics.RunnerView("RUNNER_INSTALL_STATUS_READY", "RUNNER_CONNECTION_STATUS_CONNECTED", None)
    )
    registry.track(
        "u2",
        metrics.RunnerView("RUNNER_INSTALL_STATUS_DELETING", "X", 940.0, not_ready_reason="Deleting"),
    )
    registry.track(
        "u3",
        metrics.RunnerView(
            "UNKNOWN",
            "UNKNOWN",
            None,
            stalled_reason="CredentialsRejected",
            not_ready_reason="CredentialsRejected",
        ),
    )
    registry.budget_stats = lambda: [(3, 1.5, 1), (1, 0.5, 0)]
    families = scrape(registry)
    P = metrics.PREFIX
    assert values(families[P + "api_requests_total"]) == {
        (P + "api_requests_total", "code=200", "endpoint=create"): 2.0
    }
    latency = values(families[P + "api_request_duration_seconds"])
    assert latency[(P + "api_request_duration_seconds_bucket", "endpoint=get", "le=0.05")] == 1
    assert latency[(P + "api_request_duration_seconds_bucket", "endpoint=get", "le=10.0")] == 1
    assert latency[(P + "api_request_duration_seconds_bucket", "endpoint=get", "le=+Inf")] == 2
    assert latency[(P + "api_request_duration_seconds_count", "endpoint=get")] == 2
    runners = values(families[P + "runners"])
    ready = (P + "runners", "connection_status=RUNNER_CONNECTION_STATUS_CONNECTED")
    assert runners[(*ready, "install_status=RUNNER_INSTALL_STATUS_READY")] == 1
    assert values(families[P + "resources_stalled"]) == {
        (P + "resources_stalled", "reason=CredentialsRejected"): 1
    }
    assert values(families[P + "resources_not_ready"]) == {
        (P + "resources_not_ready", "reason=CredentialsRejected"): 1,
        (P + "resources_not_ready", "reason=Deleting"): 1,
    }
    assert families[P + "deletion_age_seconds"].samples[0].value == 60
    assert families[P + "deleting_runners"].samples[0].value == 1
    assert families[P + "budget_waits_total"].samples[0].value == 4
    assert families[P + "budget_wait_seconds_total"].samples[0].value == 2.0
    assert families[P + "rate_limited_total"].samples[0].value == 1
    assert families[P + "leader"].samples[0].value == 0
    registry.leader.set(1)
    registry.track("u2", None)
    families = scrape(registry)
    assert families[P + "deletion_age_seconds"].samples[0].value == 0
    assert families[P + "leader"].samples[0].value == 1
    assert P + "resources_not_ready" in families


def test_label_values_are_escaped() -> None:
    registry = metrics.Registry()
    registry.events.labels("Warning", 'we"ird\nreason').inc()
    (sample,) = scrape(registry)["managed_runner_operator_events_total"].samples
    assert sample.labels["reason"] == 'we"ird\nreason'


def test_served_over_http_from_a_thread() -> None:
    """The endpoint answers from its own thread (a standby's event loop is not running yet)."""
    registry = metrics.Registry()
    port = free_port()
    stop = registry.serve(port)
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        with pytest.raises(OSError, match="in use"):  # the CLI logs this and goes on reconciling
            registry.serve(port)
    finally:
        stop()
    assert "managed_runner_operator_build_info" in {f.name for f in text_string_to_metric_families(text)}
