"""Fault injection plans and the request log, consulted by the HTTP layer on every API call.

Faults are transport-level: they apply to HTTP requests, never to in-process API calls.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from runner_operator.simulator import errors
from runner_operator.simulator.errors import ApiError

ENDPOINTS = ("create", "get", "list", "update", "delete", "applyAvailableUpdate")
ANY = "*"
API_PREFIX = "/v1/sandbox/managedRunners"
CONTROL_PREFIX = "/_sim"
BARE_404 = "bare404"

FaultKind = Literal["error", "drop", "hang", "lose"]


def check_endpoint(endpoint: str) -> str:
    if endpoint != ANY and endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; expected one of {', '.join((ANY, *ENDPOINTS))}")
    return endpoint


@dataclass
class Scripted:
    kind: FaultKind
    remaining: int
    status: int = 503
    code: int | None = None
    message: str | None = None
    retry_after: float | None = None
    seconds: float = 0.0


@dataclass
class Rate:
    probability: float
    status: int
    retry_after: float | None
    rng: random.Random


@dataclass(frozen=True)
class Decision:
    """What the HTTP layer must do with one request before (or instead of) serving it."""

    latency: float = 0.0
    error: ApiError | None = None
    drop: bool = False
    hang: float = 0.0
    lose: bool = False
    """serve the request, then close the connection: the change happened, the caller never learns it."""

    @property
    def label(self) -> str | None:
        if self.drop:
            return "drop"
        if self.lose:
            return "lose"
        if self.hang:
            return "hang"
        return "error" if self.error else None


@dataclass
class FaultPlan:
    scripted: dict[str, deque[Scripted]] = field(default_factory=dict)
    rates: dict[str, Rate] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    bare404: set[str] = field(default_factory=set)
    """path prefixes answered with a plain-text 404, as by a proxy without a route (contract A.27)."""

    def add(self, endpoint: str, fault: Scripted) -> None:
        if fault.remaining < 1:
            raise ValueError("times must be at least 1")
        self.scripted.setdefault(check_endpoint(endpoint), deque()).append(fault)

    def set_rate(
        self, endpoint: str, probability: float, status: int, seed: int | None, retry_after: float | None
    ) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError("rate must be between 0 and 1")
        if probability == 0.0:
            self.rates.pop(check_endpoint(endpoint), None)
            return
        self.rates[check_endpoint(endpoint)] = Rate(probability, status, retry_after, random.Random(seed))

    def set_latency(self, endpoint: str, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("latency must not be negative")
        self.latency[check_endpoint(endpoint)] = seconds

    def set_bare404(self, prefix: str, enabled: bool) -> None:
        if not prefix.startswith("/"):
            raise ValueError("prefix must be an absolute path such as " + API_PREFIX)
        if prefix.startswith(CONTROL_PREFIX):
            raise ValueError(f"the control API {CONTROL_PREFIX} is never misrouted")
        if enabled:
            self.bare404.add(prefix)
        else:
            self.bare404.discard(prefix)

    def misrouted(self, path: str) -> bool:
        """True when `path` falls under a bare-404 prefix (plain string prefix match)."""
        return any(path.startswith(prefix) for prefix in self.bare404)

    def clear(self) -> None:
        self.scripted.clear()
        self.rates.clear()
        self.latency.clear()
        self.bare404.clear()

    def decide(self, endpoint: str) -> Decision:
        latency = self.latency.get(endpoint, self.latency.get(ANY, 0.0))
        for key in (endpoint, ANY):
            queue = self.scripted.get(key)
            if queue:
                fault = queue[0]
                fault.remaining -= 1
                if fault.remaining <= 0:
                    queue.popleft()
                if fault.kind == "drop":
                    return Decision(latency, drop=True)
                if fault.kind == "lose":
                    return Decision(latency, lose=True)
                if fault.kind == "hang":
                    return Decision(latency, hang=fault.seconds)
                return Decision(
                    latency, error=errors.injected(fault.status, fault.message, fault.code, fault.retry_after)
                )
        for key in (endpoint, ANY):
            rate = self.rates.get(key)
            if rate and rate.rng.random() < rate.probability:
                return Decision(latency, error=errors.injected(rate.status, None, None, rate.retry_after))
        return Decision(latency)

    def describe(self) -> dict[str, Any]:
        return {
            "scripted": {k: [asdict(f) for f in q] for k, q in self.scripted.items() if q},
            "rates": {k: {"rate": r.probability, "status": r.status} for k, r in self.rates.items()},
            "latency": dict(self.latency),
            "bare404": sorted(self.bare404),
        }


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    route: str
    path: str
    endpoint: str
    status: int  # 0 when the connection was dropped without a response
    ms: float
    fault: str | None = None
    query: str = ""
    """the raw query string (requestId, updateMask, allowMissing...), for tests that compare calls."""
    at: float = 0.0
    """wall-clock time the request arrived (for latency measurements in benchmarks)."""

    @property
    def key(self) -> str:
        return f"{self.method} {self.route} {self.status}"


@dataclass
class RateLimiter:
    """A token bucket per API token: the server-side quota behind `SimulatorConfig.rate_limit`."""

    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    limited: int = 0

    def admit(self, token: str, rate: float, burst: int, now: float) -> float:
        """0 when the request may proceed, else the seconds until a token is available."""
        tokens, last = self.buckets.get(token, (float(burst), now))
        tokens = min(float(burst), tokens + (now - last) * rate)
        if tokens >= 1.0:
            self.buckets[token] = (tokens - 1.0, now)
            return 0.0
        self.buckets[token] = (tokens, now)
        self.limited += 1
        return (1.0 - tokens) / rate


@dataclass
class RequestLog:
    """Recent requests (bounded) plus lifetime counts keyed by `METHOD route status`."""

    entries: deque[LoggedRequest] = field(default_factory=lambda: deque(maxlen=10_000))
    counts: Counter[str] = field(default_factory=Counter)

    def record(self, entry: LoggedRequest) -> None:
        self.entries.append(entry)
        self.counts[entry.key] += 1

    def clear(self) -> None:
        self.entries.clear()
        self.counts.clear()

    def count(self, endpoint: str | None = None, status: int | None = None) -> int:
        return sum(
            1
            for e in self.entries
            if (endpoint is None or e.endpoint == endpoint) and (status is None or e.status == status)
        )
