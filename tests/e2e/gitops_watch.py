"""Records every version of one object with `kubectl get --watch`, to prove what changed and what did not.

A watch sees each resourceVersion (polling could miss a change that is reverted quickly).
`metadata.resourceVersion` and `metadata.managedFields` are the API server's bookkeeping (every
status write changes them, and Argo CD ignores both); everything else in `metadata`, and `spec`,
is compared version by version.
"""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.kube import Kube
from tests.testenv.localcluster import BIN_DIR

BOOKKEEPING = ("resourceVersion", "managedFields")
RUNNING: list[Watcher] = []


@dataclass
class Change:
    resource_version: str
    path: str
    before: Any
    after: Any


@dataclass
class Recording:
    versions: list[dict[str, Any]]
    seconds: float
    changes: list[Change] = field(default_factory=list)

    @property
    def status_versions(self) -> int:
        """How many versions changed status (shows the window was not idle)."""
        return sum(1 for a, b in itertools.pairwise(self.versions) if a.get("status") != b.get("status"))

    def managed_fields_versions(self) -> int:
        return len({json.dumps(v["metadata"].get("managedFields"), sort_keys=True) for v in self.versions})

    def describe(self) -> str:
        changes = [f"{c.path} @rv{c.resource_version}: {c.before!r} -> {c.after!r}" for c in self.changes]
        return (
            f"{len(self.versions)} versions over {self.seconds:.1f}s, {self.status_versions} status changes, "
            f"{self.managed_fields_versions()} distinct managedFields; "
            f"metadata/spec changes: {', '.join(changes) or 'none'}"
        )


def _watched(obj: dict[str, Any]) -> dict[str, Any]:
    meta = copy.deepcopy(obj.get("metadata") or {})
    for key in BOOKKEEPING:
        meta.pop(key, None)
    return {"metadata": meta, "spec": obj.get("spec")}


def _diff(path: str, before: Any, after: Any, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after)):
            _diff(f"{path}.{key}", before.get(key), after.get(key), out)
    elif before != after:
        out.append((path, before, after))


class Watcher:
    """`kubectl get managedrunners --watch` on one object; `stop()` returns every version seen."""

    def __init__(self, kube: Kube, namespace: str, name: str, log_dir: Path) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.out_path = log_dir / f"watch-{namespace}-{name}.json"
        self.err_path = log_dir / f"watch-{namespace}-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> Watcher:
        out = self.out_path.open("wb")
        err = self.err_path.open("wb")
        self.proc = subprocess.Popen(
            [
                str(BIN_DIR / "kubectl"),
                "--kubeconfig",
                str(self.kube.kubeconfig),
                "get",
                "managedrunners.sandbox.coreweave.com",
                "-n",
                self.namespace,
                f"--field-selector=metadata.name={self.name}",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
                "--request-timeout=0",
                "-v=6",  # logs each request with its status: tells when the watch is open
            ],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        out.close()
        err.close()
        RUNNING.append(self)
        self.started = time.monotonic()
        deadline = self.started + 30
        while "watch=true" not in self.err_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.terminate()
                raise AssertionError(f"kubectl --watch did not start:\n{self.err_path.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if self in RUNNING:
            RUNNING.remove(self)

    def stop(self, settle: float = 0.5) -> Recording:
        time.sleep(settle)
        assert self.proc is not None
        seconds = time.monotonic() - self.started
        self.terminate()
        text = self.out_path.read_text()
        decoder = json.JSONDecoder()
        versions: list[dict[str, Any]] = []
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            event, pos = decoder.raw_decode(text, pos)
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                versions.append(event["object"])
        return Recording(versions, seconds)


def stop_all() -> None:
    """Terminate every watch still running (a test failed between start and stop)."""
    for watcher in list(RUNNING):
        watcher.terminate()


def changes_between(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """The metadata/spec changes (bookkeeping excluded) from one version of an object to another."""
    diffs: list[tuple[str, Any, Any]] = []
    _diff("", _watched(before), _watched(after), diffs)
    rv = str(after["metadata"].get("resourceVersion"))
    return [Change(rv, path.lstrip("."), old, new) for path, old, new in diffs]


def changes_since(recording: Recording, start: int = 0) -> list[Change]:
    """Every metadata/spec change (bookkeeping excluded) from version `start` on, version by version."""
    found: list[Change] = []
    versions = recording.versions[start:]
    for before, after in itertools.pairwise(versions):
        found.extend(changes_between(before, after))
    recording.changes = found
    return found
