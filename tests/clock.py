"""The one fake clock of the test suite: time moves only when a test, or a sleep, moves it."""

from __future__ import annotations

import asyncio


class FakeClock:
    """Monotonic (or wall) seconds as a callable; `tick` moves it, `sleep` records and jumps.

    `sleep` jumps to the earliest pending wake-up once nothing else has run for a few loop rounds,
    so code under test that sleeps (back-off, budgets) runs instantly and in order.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self._wakes: list[float] = []

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        wake = self.now + seconds
        self._wakes.append(wake)
        try:
            idle_rounds = 0
            while self.now < wake:
                await asyncio.sleep(0)
                # Give runnable tasks a few rounds to start their own sleeps before time moves.
                idle_rounds = idle_rounds + 1 if wake == min(self._wakes) else 0
                if idle_rounds >= 5:
                    self.now = wake
        finally:
            self._wakes.remove(wake)
