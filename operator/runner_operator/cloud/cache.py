"""Batched reads: one paginated list serves the observations of every runner on a credential.

With hundreds of runners polling, a GET each would exhaust the request budget; a list of 1,000
runners per page costs one request. Safety rules keep the cache from ever causing a write:
- a runner this process wrote after the snapshot was taken is read with a direct GET;
- "absent from the list" is confirmed with a direct GET (pagination under concurrent change could
  skip an entry) unless the caller says an absence cannot lead it to write (nothing created yet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import ManagedRunner

PAGE_SIZE = 1000


@dataclass
class CacheStats:
    lists: int = 0
    pages: int = 0
    hits: int = 0
    direct_gets: int = 0


@dataclass
class RunnerCache:
    client: CloudClient
    clock: Callable[[], float] = time.monotonic
    stats: CacheStats = field(default_factory=CacheStats)
    _snapshot: dict[str, ManagedRunner] = field(default_factory=dict)
    _taken: float = float("-inf")
    _written: dict[str, float] = field(default_factory=dict)
    _results: dict[str, tuple[float, ManagedRunner]] = field(default_factory=dict)
    _refresh: asyncio.Task[None] | None = None

    async def find(
        self, runner_id: str, max_age: float, *, trust_absence: bool = False
    ) -> ManagedRunner | None:
        """The runner as of at most `max_age` seconds ago (or fresher).

        None comes from a direct GET unless `trust_absence`: callers for whom "absent" leads to no
        write (a runner not yet created) may skip that GET.
        """
        if max_age <= 0:
            return await self._get(runner_id)
        if self.clock() - self._taken > max_age:
            await self._refreshed()
        if self._stale_for(runner_id):
            # The response of our own write is the freshest view, as long as nothing wrote since.
            result = self._results.get(runner_id)
            if (
                result is not None
                and result[0] >= self._written[runner_id]
                and self.clock() - result[0] <= max_age
            ):
                self.stats.hits += 1
                return result[1]
            return await self._get(runner_id)
        found = self._snapshot.get(runner_id)
        if found is None and not trust_absence:
            return await self._get(runner_id)
        self.stats.hits += 1
        return found

    async def runners(self, max_age: float) -> list[ManagedRunner]:
        """Every runner of the credential as of at most `max_age` seconds ago (0: list now)."""
        if max_age <= 0 or self.clock() - self._taken > max_age:
            await self._refreshed()
        return list(self._snapshot.values())

    def _stale_for(self, runner_id: str) -> bool:
        written = self._written.get(runner_id)
        return written is not None and written >= self._taken

    def note_write(self, runner_id: str, result: ManagedRunner | None = None) -> None:
        """This process just changed the runner: the snapshot is stale for it; `result` is the response."""
        now = self.clock()
        self._written[runner_id] = now
        if result is None:
            self._results.pop(runner_id, None)
        else:
            self._results[runner_id] = (now, result)

    async def _get(self, runner_id: str) -> ManagedRunner | None:
        self.stats.direct_gets += 1
        return await self.client.find(runner_id)

    async def _refreshed(self) -> None:
        # Single flight: concurrent passes share one list instead of each starting their own.
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._list())
        await asyncio.shield(self._refresh)

    async def _list(self) -> None:
        # The snapshot is as recent as its first page's request (the one that got an answer), not as
        # the wait for the request budget before it: writes answered before that are reflected.
        sent: list[float] = []
        started: float | None = None
        snapshot: dict[str, ManagedRunner] = {}
        self.stats.lists += 1
        pages = self.client.iter_runners(page_size=PAGE_SIZE, on_send=lambda: sent.append(self.clock()))
        async for runner in pages:
            if started is None:
                started = sent[-1]
            if runner.runner_id:
                snapshot[runner.runner_id] = runner
        if started is None:  # nothing listed: the earliest send is the safe bound
            started = sent[0] if sent else self.clock()
        self.stats.pages += max(1, -(-len(snapshot) // PAGE_SIZE))
        self._snapshot = snapshot
        self._taken = started
        # Writes older than the snapshot's start are reflected in it; forget them.
        self._written = {k: t for k, t in self._written.items() if t >= started}
        self._results = {k: r for k, r in self._results.items() if k in self._written}
