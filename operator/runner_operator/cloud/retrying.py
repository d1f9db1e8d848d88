"""How long the client keeps retrying transient failures: seconds, never minutes (kopf owns minutes)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Jittered exponential backoff bounded by an attempt cap and a total time budget."""

    initial: float = 0.2
    cap: float = 5.0
    max_attempts: int = 10
    budget: float = 10.0
    """Seconds from the first attempt after which no retry starts."""

    def backoff(self, attempt: int, jitter: Callable[[], float] = random.random) -> float:
        """Delay after failed attempt number `attempt` (1-based): half fixed, half random, never above cap."""
        ceiling = min(self.cap, self.initial * 2.0 ** (attempt - 1))
        return ceiling / 2 + jitter() * ceiling / 2

    def delay(
        self, attempt: int, retry_after: float | None, jitter: Callable[[], float] = random.random
    ) -> float:
        """The server's Retry-After wins over our own backoff."""
        return retry_after if retry_after is not None else self.backoff(attempt, jitter)
