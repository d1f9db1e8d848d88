"""The operator's Prometheus metrics, on prometheus_client (the exposition format is its job, not ours).

Counters and the API latency histogram are updated as things happen. Everything about runners is
computed at scrape time from what the last pass of each resource reported, so nothing goes stale
when a resource is gone, and no series carries a per-object label: alerts on stalled or not-ready
resources count them by reason, and `kubectl get managedrunners` names them.
Every metric is listed in docs/observability.md (a test keeps the two in sync).
"""

from __future__ import annotations

import platform
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "managed_runner_operator_"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# A `<name>_created` series per counter doubles the series count for a timestamp nobody alerts on.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class RunnerView:
    """What the last pass of one resource reported, for the scrape-time gauges."""

    install_status: str
    connection_status: str
    deletion_started: float | None
    stalled_reason: str | None = None  # Stalled=True's reason
    not_ready_reason: str | None = None  # Ready=False's reason


class Registry:
    """The operator's metrics; one instance per process, with its own prometheus_client registry."""

    def __init__(self, clock: Callable[[], float] = time.time, version: str = "0+unknown") -> None:
        self.registry = CollectorRegistry()
        self.runners: dict[str, RunnerView] = {}
        # Returns (waits, wait seconds, 429s) for every shared request budget, retired ones included.
        self.budget_stats: Callable[[], Iterable[tuple[int, float, int]]] = list
        self.reconciles = Counter(
            PREFIX + "reconciles",
            "Reconcile passes by outcome (synced, waiting, retrying, terminal, released) and action.",
            ("outcome", "action"),
            registry=self.registry,
        )
        self.api_requests = Counter(
            PREFIX + "api_requests",
            "CoreWeave API requests by endpoint and response code (HTTP status, or 'transport').",
            ("endpoint", "code"),
            registry=self.registry,
        )
        self.api_latency = Histogram(
            PREFIX + "api_request_duration_seconds",
            "CoreWeave API request latency by endpoint (one attempt; retries are separate requests; "
            "a list page until its headers, as its body is read while it is parsed).",
            ("endpoint",),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.events = Counter(
            PREFIX + "events",
            "Kubernetes Events posted, by type and reason.",
            ("type", "reason"),
            registry=self.registry,
        )
        self.list_wakes = Counter(
            PREFIX + "list_wakes",
            "Passes brought forward because the shared list showed their runner changed (drift included).",
            registry=self.registry,
        )
        self.work_queue_depth = Gauge(
            PREFIX + "work_queue_depth",
            "ManagedRunners with a pass queued or running in the scheduler.",
            registry=self.registry,
        )
        self.passes_running = Gauge(
            PREFIX + "passes_running",
            "Scheduled passes running now (waiting for a create turn or the request budget included).",
            registry=self.registry,
        )
        self.leader = Gauge(
            PREFIX + "leader",
            "1 while this process reconciles (holds the Lease, or leader election is off); 0 on standby.",
            registry=self.registry,
        )
        Gauge(
            PREFIX + "build_info",
            "Always 1; the labels say which build is running.",
            ("version", "python_version"),
            registry=self.registry,
        ).labels(version, platform.python_version()).set(1)
        self.registry.register(_Scraped(self, clock))
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)

    def observe_request(self, endpoint: str, code: str, seconds: float) -> None:
        self.api_requests.labels(endpoint, code).inc()
        self.api_latency.labels(endpoint).observe(seconds)

    def track(self, uid: str, view: RunnerView | None) -> None:
        if view is None:
            self.runners.pop(uid, None)
        else:
            self.runners[uid] = view

    def render(self) -> str:
        return prometheus_client.generate_latest(self.registry).decode()

    def serve(self, port: int) -> Callable[[], None]:
        """GET /metrics on `port` from a thread, so a busy event loop or a standby still answers.

        Returns a function that stops the server; OSError when the port cannot be bound.
        """
        server, thread = prometheus_client.start_http_server(port, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop


class _Scraped(Collector):
    """Gauges about runners and counters kept by the request budgets, computed at each scrape."""

    def __init__(self, owner: Registry, clock: Callable[[], float]) -> None:
        self._owner = owner
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        # The scrape thread reads what the event loop writes: list() copies a dict in one step
        # under the GIL, so a pass that adds or drops a runner meanwhile cannot break the iteration.
        views = list(self._owner.runners.values())
        budgets = list(self._owner.budget_stats())
        yield _by_labels(
            "runners",
            "Managed runners by the install and connection status last seen.",
            ("install_status", "connection_status"),
            Tally((v.install_status or "UNKNOWN", v.connection_status or "UNKNOWN") for v in views),
        )
        yield _by_labels(
            "resources_stalled",
            "ManagedRunners with Stalled=True, by reason: only a spec change or a person fixes them.",
            ("reason",),
            Tally((v.stalled_reason,) for v in views if v.stalled_reason),
        )
        yield _by_labels(
            "resources_not_ready",
            "ManagedRunners with Ready=False, by reason.",
            ("reason",),
            Tally((v.not_ready_reason,) for v in views if v.not_ready_reason),
        )
        started = [v.deletion_started for v in views if v.deletion_started is not None]
        yield GaugeMetricFamily(
            PREFIX + "deletion_age_seconds",
            "Age of the oldest deletion still in progress (0 when none).",
            value=max(0.0, self._clock() - min(started)) if started else 0.0,
        )
        yield GaugeMetricFamily(
            PREFIX + "deleting_runners", "Runners whose deletion is in progress.", value=len(started)
        )
        yield CounterMetricFamily(
            PREFIX + "budget_waits",
            "Requests that waited for the shared per-token request budget.",
            value=sum(b[0] for b in budgets),
        )
        yield CounterMetricFamily(
            PREFIX + "budget_wait_seconds",
            "Seconds spent waiting for the shared per-token request budget.",
            value=sum(b[1] for b in budgets),
        )
        yield CounterMetricFamily(
            PREFIX + "rate_limited",
            "HTTP 429 answers that paused a shared request budget.",
            value=sum(b[2] for b in budgets),
        )


def _by_labels(
    name: str, documentation: str, labels: tuple[str, ...], counts: Tally[tuple[str, ...]]
) -> Metric:
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=labels)
    for values, count in sorted(counts.items()):
        family.add_metric(values, count)
    return family


METRIC_NAMES = tuple(
    PREFIX + name
    for name in (
        "reconciles_total",
        "api_requests_total",
        "api_request_duration_seconds",
        "events_total",
        "list_wakes_total",
        "work_queue_depth",
        "passes_running",
        "leader",
        "build_info",
        "runners",
        "resources_stalled",
        "resources_not_ready",
        "deletion_age_seconds",
        "deleting_runners",
        "budget_waits_total",
        "budget_wait_seconds_total",
        "rate_limited_total",
    )
)
"""The operator's own metrics (process_* and python_* come from prometheus_client's collectors)."""
