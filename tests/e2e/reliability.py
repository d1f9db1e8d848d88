"""Measuring fault scenarios and writing the reliability report (docs/reliability.md).

What a scenario measures, the same way for every scenario:

- the API calls the operator made, timestamped in-process (the simulator runs in this process,
  so a hook on its request log sees every call as it completes, and a hook on its fault plan
  sees every call as it arrives); calls the test itself makes go through `Cloud`, in-process,
  and never reach the log;
- the busiest second inside a fault window (a retry storm shows up there first);
- the time to converge (or to reach the expected condition);
- the final cloud-versus-Kubernetes check: one runner per ManagedRunner, same IDs, nothing extra;
- a scan of every output for the scenario's token and env Secret value.

Each finished scenario (passed or failed) is appended to a JSON file; `write_report` turns the
results into the Markdown report. Any e2e module can use it: wrap the test body in
`scenario(...)`, fill the record, and call `finish()` once at the end (a module or session
fixture does this).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runner_operator.simulator.core import Simulator
from runner_operator.simulator.faults import Decision, LoggedRequest
from tests.e2e.harness import GROUP, PLURAL, VERSION, SimulatorThread
from tests.e2e.kube import Kube, json_object

REPORT_ENV = "RELIABILITY_REPORT"
JSON_ENV = "RELIABILITY_JSON"
REGENERATE = "RELIABILITY_REPORT=docs/reliability.md pytest tests/e2e/test_faults.py"


# -- the API calls the operator made --------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    arrived: float
    """time.monotonic() when the request reached the simulator (completion minus its duration)."""
    done: float
    method: str
    endpoint: str
    path: str
    status: int
    fault: str | None
    query: str = ""


class CallLog:
    """Timestamps every API call the simulator serves (control routes excluded)."""

    def __init__(self, sim: SimulatorThread) -> None:
        assert sim._server is not None, "start the simulator first"
        self.simulator: Simulator = sim._server.simulator
        self._calls: list[Call] = []
        self._arrivals: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        log, faults = self.simulator.log, self.simulator.faults
        record, decide = log.record, faults.decide

        def timed_record(entry: LoggedRequest) -> None:
            if entry.endpoint and not entry.route.startswith("/_sim"):
                now = time.monotonic()
                call = Call(
                    now - entry.ms / 1000,
                    now,
                    entry.method,
                    entry.endpoint,
                    entry.path,
                    entry.status,
                    entry.fault,
                    str(getattr(entry, "query", "")),
                )
                with self._lock:
                    self._calls.append(call)
            record(entry)

        def timed_decide(endpoint: str) -> Decision:
            with self._lock:
                self._arrivals.append((time.monotonic(), endpoint))
            return decide(endpoint)

        # Instance attributes shadow the methods: only this simulator is instrumented.
        log.record = timed_record  # type: ignore[method-assign]
        faults.decide = timed_decide  # type: ignore[method-assign]

    def calls(self, since: float = 0.0, until: float = float("inf")) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if since <= c.arrived < until]

    def count(self, since: float = 0.0, until: float = float("inf"), **match: Any) -> int:
        return sum(1 for c in self.calls(since, until) if all(getattr(c, k) == v for k, v in match.items()))

    def arrivals(self, endpoint: str, since: float = 0.0) -> int:
        """Requests for `endpoint` that reached the fault plan (i.e. authenticated) since `since`,
        including ones still being served."""
        with self._lock:
            return sum(1 for t, e in self._arrivals if e == endpoint and t >= since)

    def busiest_second(self, since: float = 0.0, until: float = float("inf")) -> int:
        """The most calls that arrived within any one-second interval of [since, until)."""
        times = sorted(c.arrived for c in self.calls(since, until))
        best, start = 0, 0
        for end, moment in enumerate(times):
            while moment - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best


# -- the cloud, read in-process (so the test's own reads are never counted) -------------------------


class Cloud:
    """Runs Simulator methods on the simulator's event loop: no HTTP, no request-log entry."""

    def __init__(self, sim: SimulatorThread) -> None:
        assert sim._server is not None, "start the simulator first"
        self._simulator = sim._server.simulator
        self._loop = sim._loop

    def run(self, fn: Callable[[Simulator], Any]) -> Any:
        async def call() -> Any:
            return fn(self._simulator)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(30)

    def runners(self) -> dict[str, dict[str, Any]]:
        listed = self.run(lambda s: s.list_runners(page_size=1000))
        return {r["identity"]["runnerId"]: r for r in listed.get("managedRunners", [])}

    def runner(self, runner_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.runners().get(runner_id)
        return found


def cloud_matches(kube: Kube, namespace: str, cloud: Cloud) -> str:
    """Assert the cloud holds exactly one runner per ManagedRunner (same ID, same cluster), no more.

    Resources with `deletionPolicy: Orphan` are expected only while they exist. Returns a summary.
    """
    items = json_object(kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))["items"]
    runners = cloud.runners()
    wanted = {obj["spec"]["runnerId"]: obj for obj in items}
    assert set(runners) == set(wanted), (
        f"cloud runners {sorted(runners)} != ManagedRunners {sorted(wanted)} "
        f"(leaked: {sorted(set(runners) - set(wanted))}, lost: {sorted(set(wanted) - set(runners))})"
    )
    clusters: dict[str, str] = {}
    for runner_id, obj in wanted.items():
        runner = runners[runner_id]
        assert runner["identity"]["clusterId"] == obj["spec"]["clusterId"], runner_id
        status_id = (obj.get("status") or {}).get("runnerId")
        assert status_id == runner_id, f"{obj['metadata']['name']}: status.runnerId={status_id!r}"
        clusters[runner["identity"]["clusterId"]] = runner_id
    assert len(clusters) == len(runners), "two runners on one cluster"
    return f"{len(runners)} runner(s) = {len(items)} ManagedRunner(s)"


# -- secrets ----------------------------------------------------------------------------------------


def secret_free(values: Sequence[str], sources: Mapping[str, str]) -> str:
    """Assert none of `values` occurs in any source (name -> text); return a summary."""
    for name, text in sources.items():
        for value in values:
            assert value not in text, f"a secret value appears in {name}"
    return f"clean ({', '.join(sources)})"


# -- records and the report -------------------------------------------------------------------------


@dataclass
class Record:
    """The measured outcome of one scenario."""

    key: str
    title: str
    fault: str
    expected: str
    result: str = "running"
    error: str = ""
    wall_seconds: float = 0.0
    converge_seconds: float | None = None
    converge_what: str = ""
    api_calls: int = 0
    window_seconds: float | None = None
    window_calls: int | None = None
    busiest_second: int | None = None
    call_bound: str = ""
    cloud: str = ""
    secrets: str = ""
    observed: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    source: str = ""
    bug: str = ""

    def see(self, what: str) -> None:
        """Note an observed state (a condition reason, an Event) once, in order."""
        if what not in self.observed:
            self.observed.append(what)

    def time(self, name: str, seconds: float) -> float:
        self.timings[name] = round(seconds, 2)
        return seconds

    def window(self, calls: CallLog, since: float, until: float) -> tuple[int, int]:
        """Record the calls made during a fault window; return (calls, busiest second)."""
        self.window_seconds = round(until - since, 2)
        self.window_calls = len(calls.calls(since, until))
        self.busiest_second = calls.busiest_second(since, until)
        return self.window_calls, self.busiest_second


RESULTS: list[Record] = []


def json_path() -> Path:
    explicit = os.environ.get(JSON_ENV)
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"reliability-{os.getpid()}.json"


def save() -> Path:
    path = json_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in RESULTS], indent=2) + "\n")
    return path


@contextmanager
def scenario(
    key: str, title: str, *, fault: str, expected: str, source: str = "", bug: str = ""
) -> Iterator[Record]:
    """Run a scenario body; its record is kept whether it passes or fails.

    `bug` names a known operator bug the scenario is expected to fail on (the test is xfail).
    """
    record = Record(key, title, fault, expected, source=source, bug=bug)
    started = time.monotonic()
    try:
        yield record
        record.result = "passed (the known bug is fixed: drop the xfail)" if bug else "passed"
    except BaseException as exc:
        record.result = "FAILED (known operator bug, xfail)" if bug else "FAILED"
        record.error = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise
    finally:
        record.wall_seconds = round(time.monotonic() - started, 1)
        RESULTS[:] = [r for r in RESULTS if r.key != key] + [record]
        save()


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _revision() -> str:
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except OSError:
        return "unknown"
    return found.stdout.strip() or "unknown"


def render(records: Sequence[Record], *, wall_seconds: float, settings: Mapping[str, str]) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    passed = sum(1 for r in records if r.result == "passed")
    lines = [
        "# Reliability: the fault suite and what it measured",
        "",
        "Generated by the fault suite (`tests/e2e/test_faults.py`) against a real kube-apiserver + etcd,",
        "the CoreWeave API simulator and the operator as a real `runner-operator run` process. Regenerate:",
        "",
        "```bash",
        REGENERATE,
        "```",
        "",
        f"Last run: {stamp}, revision `{_revision()}`, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPU(s), "
        f"Python {platform.python_version()}; {passed}/{len(records)} scenarios passed; "
        f"suite wall time {wall_seconds:.0f} s.",
        "",
        "Every scenario runs its own simulator (with its own API token) and its own operator watching",
        "only the scenario's namespace. Settings (a scenario may override one, as its details say): "
        + ", ".join(f"`{k}={v}`" if k.isupper() else f"{k}: {v}" for k, v in settings.items())
        + ".",
        "",
        "What is checked in every scenario, not assumed:",
        "",
        "- **Cloud = Kubernetes**: at the end the simulator holds exactly one runner per ManagedRunner,",
        "  with the same runner ID and cluster, and no other runner (nothing leaked, duplicated or lost).",
        "- **Bounded time**: each resource converges, or reports the expected condition, within a bound.",
        "- **No hot loop**: the operator's API calls are counted from the simulator's request log",
        "  (timestamped in-process; the test's own reads bypass HTTP); the *busiest second* is the most",
        "  calls that arrived within any one second of the fault window.",
        "- **Nothing secret in any output**: each scenario's API token and an env value read from a",
        "  Secret (`overrides.env[].valueFrom.secretKeyRef`) are searched for in the operator's log,",
        "  the namespace's Events (`kubectl get events -o yaml`), the ManagedRunners",
        "  (`kubectl get managedrunners -o yaml`, status included) and the simulator's log.",
        "",
        "## Scenarios",
        "",
        "| # | scenario | converged / reported in | API calls: total (in the fault window) "
        "| busiest second in the window | cloud = Kubernetes at the end | secrets | result |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, r in enumerate(records, 1):
        window = "" if r.window_calls is None else f" ({r.window_calls} in {r.window_seconds:.0f} s)"
        busiest = "-" if r.busiest_second is None else f"{r.busiest_second}/s"
        converged = _seconds(r.converge_seconds) + (f" ({r.converge_what})" if r.converge_what else "")
        cells = (
            str(n),
            f"[{r.title}](#{n})",
            converged,
            f"{r.api_calls}{window}",
            busiest,
            r.cloud or "-",
            "clean" if r.secrets.startswith("clean") else (r.secrets or "-"),
            r.result + (f": {r.error}" if r.error else ""),
        )
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    bugs = [r for r in records if r.bug]
    if bugs:
        lines += ["", "## Operator bugs these scenarios found", ""]
        lines.extend(f"- **{r.title}** ({r.result}): {r.bug}" for r in bugs)
    lines += [
        "",
        "## Covered elsewhere",
        "",
        "SIGKILL during create (response lost), during a rollout and during delete, and a ManagedRunner",
        "deleted while the operator is down, are `tests/e2e/test_crash_safety.py`; they assert one runner,",
        "no leak and convergence, but are not measured in this report.",
    ]
    lines += ["", "## Details", ""]
    for n, r in enumerate(records, 1):
        lines.append(f'<a id="{n}"></a>')
        lines.append("")
        lines.append(f"### {n}. {r.title}")
        lines.append("")
        if r.source:
            lines.append(f"- test: `{r.source}`")
        lines.append(f"- fault: {r.fault}")
        lines.append(f"- expected: {r.expected}")
        if r.bug:
            lines.append(f"- known bug: {r.bug}")
        if r.observed:
            lines.append(f"- observed, in order: {', '.join(f'`{o}`' for o in r.observed)}")
        if r.timings:
            lines.append("- timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in r.timings.items()))
        if r.call_bound:
            lines.append(f"- call bound asserted: {r.call_bound}")
        lines.append(f"- secrets: {r.secrets or '-'}")
        lines.extend(f"- {note}" for note in r.notes)
        lines.append(
            f"- result: {r.result}{f' ({r.error})' if r.error else ''}; wall time {r.wall_seconds:.0f} s"
        )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def finish(*, wall_seconds: float, settings: Mapping[str, str]) -> Path | None:
    """Save the JSON; write the Markdown report when RELIABILITY_REPORT names a file."""
    save()
    target = os.environ.get(REPORT_ENV)
    if not target or not RESULTS:
        return None
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(RESULTS, wall_seconds=wall_seconds, settings=settings))
    return path
