"""Prometheus metrics in the text exposition format, without a client library (one less dependency).

Counters and histograms are updated in place; gauges about runners are computed at scrape time
from what the last pass of each resource reported, so nothing goes stale when a resource is gone.
Every metric is listed in docs/observability.md (a test keeps the two in sync).
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: LabelValues, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


@dataclass
class Counter:
    name: str
    help: str
    labels: tuple[str, ...] = ()
    values: dict[LabelValues, float] = field(default_factory=lambda: defaultdict(float))

    def inc(self, *labels: str, by: float = 1.0) -> None:
        self.values[labels] += by

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for labels, value in sorted(self.values.items()):
            yield f"{self.name}{_labels(self.labels, labels)} {value:g}"


@dataclass
class Histogram:
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
    counts: dict[LabelValues, list[int]] = field(default_factory=dict)
    sums: dict[LabelValues, float] = field(default_factory=lambda: defaultdict(float))

    def observe(self, value: float, *labels: str) -> None:
        counts = self.counts.setdefault(labels, [0] * (len(self.buckets) + 1))
        counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sums[labels] += value

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for labels, counts in sorted(self.counts.items()):
            running = 0
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                running += count
                le = "+Inf" if bound == float("inf") else f"{bound:g}"
                bucket = _labels(self.labels, labels, 'le="' + le + '"')
                yield f"{self.name}_bucket{bucket} {running}"
            yield f"{self.name}_sum{_labels(self.labels, labels)} {self.sums[labels]:g}"
            yield f"{self.name}_count{_labels(self.labels, labels)} {running}"


@dataclass
class Gauge:
    """A gauge whose samples come from a function at scrape time."""

    name: str
    help: str
    labels: tuple[str, ...]
    sample: Callable[[], dict[LabelValues, float]]

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        for labels, value in sorted(self.sample().items()):
            yield f"{self.name}{_labels(self.labels, labels)} {value:g}"


@dataclass
class RunnerView:
    install_status: str
    connection_status: str
    deletion_started: float | None


class Registry:
    """The operator's metrics; one instance per process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.runners: dict[str, RunnerView] = {}
        # Returns (waits, wait seconds, 429s) for every shared request budget in use.
        self.budget_stats: Callable[[], Iterable[tuple[int, float, int]]] = list
        self.reconciles = Counter(
            "runner_operator_reconciles_total",
            "Reconcile passes by outcome (synced, waiting, retrying, terminal, released) and action.",
            ("outcome", "action"),
        )
        self.api_requests = Counter(
            "runner_operator_api_requests_total",
            "CoreWeave API requests by endpoint and response code (HTTP status, or 'transport').",
            ("endpoint", "code"),
        )
        self.api_latency = Histogram(
            "runner_operator_api_request_duration_seconds",
            "CoreWeave API request latency by endpoint (one attempt; retries are separate requests).",
            ("endpoint",),
        )
        self.events = Counter(
            "runner_operator_events_total", "Kubernetes Events posted, by reason.", ("type", "reason")
        )
        self.gauges = [
            Gauge(
                "runner_operator_runners",
                "Managed runners by the install and connection status last seen.",
                ("install_status", "connection_status"),
                self._runner_counts,
            ),
            Gauge(
                "runner_operator_deletion_age_seconds",
                "Age of the oldest deletion still in progress (0 when none).",
                (),
                self._deletion_age,
            ),
            Gauge(
                "runner_operator_deleting_runners",
                "Runners whose deletion is in progress.",
                (),
                self._deleting,
            ),
            Gauge(
                "runner_operator_budget_waits_total",
                "Requests that waited for the shared per-token request budget.",
                (),
                lambda: {(): float(sum(b[0] for b in self.budget_stats()))},
            ),
            Gauge(
                "runner_operator_budget_wait_seconds_total",
                "Seconds spent waiting for the shared per-token request budget.",
                (),
                lambda: {(): sum(b[1] for b in self.budget_stats())},
            ),
            Gauge(
                "runner_operator_rate_limited_total",
                "HTTP 429 answers that paused a shared request budget.",
                (),
                lambda: {(): float(sum(b[2] for b in self.budget_stats()))},
            ),
        ]

    def observe_request(self, endpoint: str, code: str, seconds: float) -> None:
        self.api_requests.inc(endpoint, code)
        self.api_latency.observe(seconds, endpoint)

    def track(self, uid: str, view: RunnerView | None) -> None:
        if view is None:
            self.runners.pop(uid, None)
        else:
            self.runners[uid] = view

    def render(self) -> str:
        lines: list[str] = []
        metrics: list[Counter | Histogram | Gauge] = [
            self.reconciles,
            self.api_requests,
            self.api_latency,
            self.events,
            *self.gauges,
        ]
        for metric in metrics:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"

    def _runner_counts(self) -> dict[LabelValues, float]:
        counts: dict[LabelValues, float] = defaultdict(float)
        for view in self.runners.values():
            counts[(view.install_status or "UNKNOWN", view.connection_status or "UNKNOWN")] += 1
        return dict(counts)

    def _deletion_age(self) -> dict[LabelValues, float]:
        started = [v.deletion_started for v in self.runners.values() if v.deletion_started is not None]
        return {(): max(0.0, self._clock() - min(started)) if started else 0.0}

    def _deleting(self) -> dict[LabelValues, float]:
        return {(): float(sum(1 for v in self.runners.values() if v.deletion_started is not None))}


METRIC_NAMES = (
    "runner_operator_reconciles_total",
    "runner_operator_api_requests_total",
    "runner_operator_api_request_duration_seconds",
    "runner_operator_events_total",
    "runner_operator_runners",
    "runner_operator_deletion_age_seconds",
    "runner_operator_deleting_runners",
    "runner_operator_budget_waits_total",
    "runner_operator_budget_wait_seconds_total",
    "runner_operator_rate_limited_total",
)
