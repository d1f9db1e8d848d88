"""docs/api.md names every route the simulator serves and every error code the client knows."""

from __future__ import annotations

from pathlib import Path

from runner_operator.cloud import errors
from runner_operator.outcomes import FAILURES
from runner_operator.simulator import app, control

DOC = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()


def test_every_simulator_route_is_documented() -> None:
    api = [(m, p.replace(app.BASE, "/v1/sandbox/managedRunners")) for m, p, _, _ in app.ROUTES]
    ours = [(m, control.PREFIX + p) for m, p, _ in control.ROUTES] + [("GET", app.HEALTHZ)]
    missing = [
        f"{method} {path}"
        for method, path in api + ours
        if f"`{method}` | `{path}" not in DOC and not (path.endswith("{runnerId}") and method == "POST")
    ]
    assert missing == []
    assert "`POST` | `/v1/sandbox/managedRunners/{runnerId}:applyAvailableUpdate`" in DOC


def test_every_error_code_and_reason_is_documented() -> None:
    for code in errors._BY_CODE:
        assert f"`{code}`" in DOC, code
    for kind, reason, _, _ in FAILURES:
        assert kind.__name__ in DOC, kind
        assert f"`{reason.value}`" in DOC, reason
