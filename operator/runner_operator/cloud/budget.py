"""A request budget shared by every client using one credential, so many runners cannot flood the API.

Token bucket (virtual scheduling form) with a pause that one caller's 429 imposes on all. Clock and sleep
are injected so tests never wait.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

DEFAULT_RATE = 10.0
DEFAULT_BURST = 20
_EPSILON = 1e-9


@dataclass(frozen=True)
class BudgetStats:
    """Counters for metrics: grants, grants that had to wait, total seconds waited, 429s seen."""

    granted: int
    waits: int
    wait_seconds: float
    rate_limited: int


class BudgetExhausted(Exception):
    """The next slot is further away than the caller is willing to wait."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"request budget exhausted for {wait:.2f}s")
        self.wait = wait


class RequestBudget:
    """Token bucket: `rate` requests per second on average, bursts up to `burst`."""

    def __init__(
        self, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST, *, clock: Clock = time.monotonic
    ):
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._interval = 1.0 / rate
        self._tolerance = (burst - 1) * self._interval
        self._next = clock()  # theoretical time of the next grant when the bucket is drained
        self._paused_until = float("-inf")
        self._granted = 0
        self._waits = 0
        self._wait_seconds = 0.0
        self._rate_limited = 0

    @property
    def stats(self) -> BudgetStats:
        return BudgetStats(self._granted, self._waits, self._wait_seconds, self._rate_limited)

    @property
    def paused_until(self) -> float:
        return self._paused_until

    def pause(self, seconds: float) -> None:
        """Hold every caller for `seconds` (a 429's Retry-After), then resume at the steady rate, no burst."""
        until = self._clock() + max(0.0, seconds)
        if until > self._paused_until:
            self._paused_until = until
        self._next = max(self._next, until + self._tolerance)

    def record_rate_limited(self, retry_after: float | None) -> None:
        """Count a 429 and, when the server said how long, pause the whole bucket."""
        self._rate_limited += 1
        if retry_after is not None:
            self.pause(retry_after)

    async def acquire(
        self, sleep: Sleep = asyncio.sleep, *, max_wait: float = float("inf"), horizon: float | None = None
    ) -> None:
        """Wait for a slot; raise BudgetExhausted instead when it would take longer than `max_wait`.

        With `horizon`, the caller reserves a slot only once the next one is at most that many seconds
        away, and holds none until then: a caller without one (a list page, which serves every runner
        of the credential) then waits behind at most a horizon's worth of requests, not behind a
        backlog of creates (bench/RESULTS.md, "Creates do not wait for lists"). Callers with a
        horizon are granted in the order they wake, not the order they came.
        """
        waited = 0.0
        while horizon is not None and (ahead := self._ahead(self._clock())) > horizon + _EPSILON:
            if ahead > max_wait - waited:
                raise BudgetExhausted(ahead)
            waited = await self._wait(sleep, ahead - horizon, waited)
        while True:
            wait = self._reserve(max_wait - waited)
            if wait > 0:
                waited = await self._wait(sleep, wait, waited)
            if self._clock() >= self._paused_until:
                self._granted += 1
                return
            # A 429 arrived while we slept: the slot is void, queue again behind the pause.

    async def _wait(self, sleep: Sleep, seconds: float, waited: float) -> float:
        """Sleep, counted in the stats (one wait per caller, however many sleeps); the caller's total."""
        if not waited:
            self._waits += 1
        await sleep(seconds)
        self._wait_seconds += seconds
        return waited + seconds

    def _ahead(self, now: float) -> float:
        """Seconds from `now` until the next free slot, reserving nothing."""
        return max(max(self._next, now) - self._tolerance - now, self._paused_until - now, 0.0)

    def _reserve(self, max_wait: float) -> float:
        # Synchronous, hence atomic under asyncio: concurrent callers get distinct slots.
        now = self._clock()
        start = max(self._next, now)
        wait = self._ahead(now)
        if wait < _EPSILON:  # float dust from adding intervals must not turn a free slot into a sleep
            wait = 0.0
        if wait > max_wait:
            raise BudgetExhausted(wait)
        self._next = start + self._interval
        return wait


_registry: dict[tuple[str, str], RequestBudget] = {}


def shared(
    base_url: str,
    token: str,
    *,
    rate: float = DEFAULT_RATE,
    burst: int = DEFAULT_BURST,
    clock: Clock = time.monotonic,
) -> RequestBudget:
    """The process-wide budget for this credential; the first caller's rate, burst and clock win."""
    key = (base_url.rstrip("/").lower(), hashlib.sha256(token.encode()).hexdigest())
    budget = _registry.get(key)
    if budget is None:
        budget = _registry[key] = RequestBudget(rate, burst, clock=clock)
    return budget


def forget(budget: RequestBudget) -> None:
    """Drop this budget from the registry (its credential went unused); the next `shared` starts afresh."""
    for key in [key for key, found in _registry.items() if found is budget]:
        del _registry[key]


def clear_registry() -> None:
    """Forget every shared budget (tests, or a configuration reload)."""
    _registry.clear()
