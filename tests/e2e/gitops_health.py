"""The Argo CD health check seen from the e2e tier: run health.lua on live objects, keep them as testdata.

The Lua runs in the Go harness (argocd/healthcheck: gopher-lua with Argo CD's library set), built
once per session. Every object a test snapshots is sanitised (server bookkeeping dropped,
namespaces renamed to stable ones) and evaluated as it would be committed, so
`UPDATE_ARGOCD_TESTDATA=1 pytest tests/e2e/test_gitops.py` rewrites the testdata and
health_test.yaml from exactly what was asserted.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "argocd" / "healthcheck"
CHECK_DIR = ROOT / "argocd" / "resource_customizations" / "sandbox.coreweave.com" / "ManagedRunner"
SCRIPT = CHECK_DIR / "health.lua"
TESTDATA = CHECK_DIR / "testdata"
HEALTH_TESTS = CHECK_DIR / "health_test.yaml"
UPDATE = os.environ.get("UPDATE_ARGOCD_TESTDATA") == "1"

# The stable names snapshots are rewritten to (the tests use random namespaces).
STABLE_NAMESPACE = "sandboxes"
STABLE_UNWATCHED_NAMESPACE = "sandboxes-unmanaged"
DROPPED_METADATA = ("managedFields", "uid", "resourceVersion", "selfLink")
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)

HEADER = """\
# Generated from objects that tests/e2e/test_gitops.py drove into each state on a real API server:
#   UPDATE_ARGOCD_TESTDATA=1 pytest tests/e2e/test_gitops.py
# That test asserts each status (and key words of each message); messages are the script's own.
# argocd/healthcheck runs every case as Argo CD does: cd argocd/healthcheck && go test ./...
"""


def go_binary() -> str | None:
    return shutil.which("go")


def require_go() -> str:
    found = go_binary()
    if found is None:
        message = "Go is not installed: the Argo CD health harness (argocd/healthcheck) needs it"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(message)
    return found


def build(out_dir: Path) -> Path:
    """`go build` the argocd-health CLI into out_dir."""
    go = require_go()
    binary = out_dir / "argocd-health"
    proc = subprocess.run(
        [go, "build", "-o", str(binary), "./cmd/argocd-health"],
        cwd=HARNESS,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(f"building the health harness failed:\n{proc.stderr}")
    return binary


@dataclass(frozen=True)
class Verdict:
    script: dict[str, str]
    """what health.lua returns (what Argo CD's health tests compare)."""
    argocd: dict[str, str]
    """what the Argo CD UI shows (deleting objects are "Pending deletion" before any script)."""


@dataclass(frozen=True)
class Expected:
    status: str
    fragments: tuple[str, ...]
    argocd: tuple[str, str] | None = None
    """(status, message) Argo CD shows when it differs from the script's verdict."""


def sanitize(obj: dict[str, Any], namespaces: dict[str, str]) -> dict[str, Any]:
    """The object as committed: server bookkeeping dropped, random namespaces renamed."""
    clean = copy.deepcopy(obj)
    meta = clean.setdefault("metadata", {})
    for key in DROPPED_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    for key in DROPPED_ANNOTATIONS:
        annotations.pop(key, None)
    if "annotations" in meta and not annotations:
        del meta["annotations"]
    text = json.dumps(clean)
    # Longest first, so a namespace that prefixes another is not half-replaced.
    for old in sorted(namespaces, key=len, reverse=True):
        text = text.replace(old, namespaces[old])
    result: dict[str, Any] = json.loads(text)
    return result


class Health:
    """The built harness plus the snapshots taken in this session."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.namespaces: dict[str, str] = {}
        self.snapshots: dict[str, tuple[dict[str, Any], Expected, Verdict]] = {}

    def evaluate(self, obj: dict[str, Any], name: str = "object") -> Verdict:
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=True))
        proc = subprocess.run(
            [str(self.binary), "-script", str(SCRIPT), str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise AssertionError(f"health.lua failed on {name}:\n{proc.stdout}\n{proc.stderr}")
        out = json.loads(proc.stdout.splitlines()[0])
        return Verdict(script=out["script"], argocd=out["argocd"])

    def check(self, state: str, obj: dict[str, Any], expected: Expected) -> Verdict:
        """Snapshot `obj` as `state`, assert the verdict, remember it for the testdata."""
        clean = sanitize(obj, self.namespaces)
        verdict = self.evaluate(clean, state)
        where = f"state {state}: verdict {verdict.script}\nstatus: {json.dumps(obj.get('status'))[:3000]}"
        assert verdict.script.get("status") == expected.status, where
        for fragment in expected.fragments:
            assert fragment in verdict.script.get("message", ""), f"{fragment!r} missing; {where}"
        shown = expected.argocd or (expected.status, verdict.script.get("message", ""))
        assert (verdict.argocd.get("status"), verdict.argocd.get("message")) == shown, where
        self.snapshots[state] = (clean, expected, verdict)
        return verdict


def committed_cases() -> dict[str, dict[str, str]]:
    """inputPath -> healthStatus from the committed health_test.yaml."""
    if not HEALTH_TESTS.exists():
        return {}
    data = yaml.safe_load(HEALTH_TESTS.read_text()) or {}
    return {str(t["inputPath"]): dict(t["healthStatus"]) for t in data.get("tests") or []}


def write_testdata(health: Health, order: list[str]) -> None:
    """Rewrite testdata/<state>.yaml and health_test.yaml for the states snapshotted in this run.

    States not reached this run keep their committed files and cases.
    """
    TESTDATA.mkdir(parents=True, exist_ok=True)
    cases = committed_cases()
    for state, (clean, _expected, verdict) in health.snapshots.items():
        (TESTDATA / f"{state}.yaml").write_text(
            yaml.safe_dump(clean, sort_keys=False, default_flow_style=False, width=100)
        )
        cases[f"testdata/{state}.yaml"] = {
            "status": verdict.script["status"],
            "message": verdict.script["message"],
        }
    rank = {f"testdata/{state}.yaml": i for i, state in enumerate(order)}
    tests = [
        {"healthStatus": cases[path], "inputPath": path}
        for path in sorted(cases, key=lambda p: (rank.get(p, len(rank)), p))
    ]
    HEALTH_TESTS.write_text(HEADER + yaml.safe_dump({"tests": tests}, sort_keys=False, width=100))
