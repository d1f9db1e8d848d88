"""Runner updates under the user's control (spec.updates), end to end on the real API server.

A release published on the runner's channel (the simulator's /_sim/releases) shows in status; with
`Manual` nothing is applied until spec.updates.request changes, then exactly one
applyAvailableUpdate call and the runner reaches the new revision; the same request value again
does nothing; `WhenAvailable` applies on its own; `paused` blocks both. A watch records every
version of the object throughout: the operator changes nothing outside status (what Argo CD diffs).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.gitops_watch import Watcher, changes_since
from tests.e2e.harness import OperatorProcess, SimulatorThread, manifest
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_lifecycle import create, get, patch_spec, wait_ready

CHANNEL = "RELEASE_CHANNEL_RAPID"
QUIET_SECONDS = 6.0
"""How long "nothing happens" is watched: several fast passes (0.5 s) and list refreshes."""


@pytest.fixture
def own_ns(kube: Kube, crd: str) -> str:
    """A namespace outside e2e-*, which the suite's shared operator watches: only this test's acts."""
    return kube.new_namespace("updates")


@pytest.fixture
def operator_of_its_own(
    kube: Kube, own_sim: SimulatorThread, own_ns: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator on this test's own simulator: its request log and releases are this test's alone."""
    ns = own_ns
    kube.create_secret(ns, "own-api", {"token": own_sim.token})
    # A release is noticed at the next steady pass: resync 5 s keeps the test short and several passes
    # inside each "nothing happens" window.
    env = {"RUNNER_OPERATOR_RESYNC_INTERVAL": "5"}
    proc = OperatorProcess(kube.kubeconfig, [ns], own_sim.url, tmp_path, env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


def update_calls(sim: SimulatorThread, runner_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in sim.requests()
        if e["method"] == "POST" and e["path"].endswith(f"/{runner_id}:applyAvailableUpdate")
    ]


def status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return (get(kube, ns, name) or {}).get("status") or {}


def wait_status(kube: Kube, ns: str, name: str, what: str, check: Any) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        current = status(kube, ns, name)
        return current if check(current) else None

    return wait_for(found, timeout=120, what=f"{ns}/{name}: {what}")


def events(kube: Kube, ns: str, name: str, reason: str) -> list[str]:
    items = kube.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [str(e.message) for e in items if e.reason == reason]


def publish(sim: SimulatorThread) -> str:
    version: str = sim.control("POST", "/releases", {"channel": CHANNEL})["version"]
    return version


def test_updates_are_applied_on_request_or_when_available_and_never_while_paused(
    kube: Kube, own_ns: str, own_sim: SimulatorThread, operator_of_its_own: OperatorProcess, tmp_path: Path
) -> None:
    ns = own_ns
    body = manifest("upd", secret="own-api", releaseChannel=CHANNEL)
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    ready = wait_ready(kube, ns, "upd")
    assert ready["status"]["updateAvailable"] is False
    assert "updateAvailableSince" not in ready["status"]
    revision = ready["status"]["activeRevision"]
    watcher = Watcher(kube, ns, "upd", tmp_path).start()

    # 1. A release on the channel shows in status; Manual applies nothing on its own.
    publish(own_sim)
    seen = wait_status(kube, ns, "upd", "update available", lambda s: s.get("updateAvailable") is True)
    assert seen["updateAvailableSince"]
    time.sleep(QUIET_SECONDS)
    assert update_calls(own_sim, runner_id) == []
    assert status(kube, ns, "upd")["activeRevision"] == revision

    # 2. A request: exactly one call, then the new revision rolls out and the runner is Ready again.
    patch_spec(kube, ns, "upd", {"updates": {"request": "2026-12-04T10:00:00Z"}})
    done = wait_status(
        kube,
        ns,
        "upd",
        "update applied and rolled out",
        lambda s: (
            (s.get("lastUpdateRequest") or {}).get("outcome") == "Applied"
            and s.get("activeRevision") == revision + 1
            and s.get("updateAvailable") is False
        ),
    )
    wait_ready(kube, ns, "upd")
    assert len(update_calls(own_sim, runner_id)) == 1
    applied = done["lastAppliedUpdate"]
    assert applied["trigger"] == "Request"
    assert applied["request"] == "2026-12-04T10:00:00Z"
    assert (applied["fromRevision"], applied["toRevision"]) == (revision, revision + 1)
    assert applied["releaseChannel"] == CHANNEL
    assert "updateAvailableSince" not in done
    assert (own_sim.runner(runner_id) or {}).get("activeRevision") == revision + 1
    assert len(events(kube, ns, "upd", "UpdateApplied")) == 1

    # 3. The same request value again (a re-apply) does nothing, even with a new release out.
    publish(own_sim)
    wait_status(kube, ns, "upd", "second update available", lambda s: s.get("updateAvailable") is True)
    patch_spec(
        kube, ns, "upd", {"updates": {"request": "2026-12-04T10:00:00Z"}, "displayName": "same request"}
    )
    wait_ready(kube, ns, "upd", generation=(get(kube, ns, "upd") or {})["metadata"]["generation"])
    time.sleep(QUIET_SECONDS)
    assert len(update_calls(own_sim, runner_id)) == 1

    # 4. Paused blocks a new request and WhenAvailable alike; the preview shows the pending call.
    patch_spec(
        kube,
        ns,
        "upd",
        {"paused": True, "updates": {"apply": "WhenAvailable", "request": "2026-12-04T11:00:00Z"}},
    )
    wait_status(
        kube, ns, "upd", "paused preview", lambda s: (s.get("plan") or {}).get("action") == "applyUpdate"
    )
    time.sleep(QUIET_SECONDS)
    assert len(update_calls(own_sim, runner_id)) == 1

    # 5. Unpaused: the pending request is answered by one call (WhenAvailable has nothing left to do).
    patch_spec(kube, ns, "upd", {"paused": False})
    wait_status(
        kube,
        ns,
        "upd",
        "request applied after the pause",
        lambda s: (
            (s.get("lastUpdateRequest") or {}).get("request") == "2026-12-04T11:00:00Z"
            and s.get("activeRevision") == revision + 2
        ),
    )
    assert len(update_calls(own_sim, runner_id)) == 2

    # 6. WhenAvailable applies a new release on its own, with no request.
    publish(own_sim)
    auto = wait_status(
        kube,
        ns,
        "upd",
        "applied when available",
        lambda s: (
            (s.get("lastAppliedUpdate") or {}).get("trigger") == "WhenAvailable"
            and s.get("activeRevision") == revision + 3
        ),
    )
    assert "request" not in auto["lastAppliedUpdate"]  # the merge patch removed the last request's
    wait_ready(kube, ns, "upd")
    assert len(update_calls(own_sim, runner_id)) == 3

    # 7. A request with nothing available is answered NotAvailable, once, with no call.
    patch_spec(kube, ns, "upd", {"updates": {"apply": "Manual", "request": "nothing-to-apply"}})
    wait_status(
        kube,
        ns,
        "upd",
        "declined request",
        lambda s: (s.get("lastUpdateRequest") or {}).get("outcome") == "NotAvailable",
    )
    time.sleep(QUIET_SECONDS / 2)
    assert len(update_calls(own_sim, runner_id)) == 3
    assert len(events(kube, ns, "upd", "UpdateNotAvailable")) == 1

    # Throughout: the operator wrote nothing outside status (the test's own spec edits only).
    recording = watcher.stop()
    ours = ("spec.updates", "spec.paused", "spec.displayName", "metadata.generation")
    foreign = [c for c in changes_since(recording) if not c.path.startswith(ours)]
    assert foreign == [], recording.describe()
    assert recording.status_versions > 0
