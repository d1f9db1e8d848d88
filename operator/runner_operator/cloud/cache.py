"""Batched reads: one paginated list serves the observations of every runner on a credential.

With hundreds of runners polling, a GET each would exhaust the request budget; a list of 1,000
runners per page costs one request. Safety rules keep the cache from ever causing a write:
- a runner this process wrote after the snapshot was taken is read with a direct GET;
- "absent from the list" is confirmed with a direct GET (pagination under concurrent change could
  skip an entry) unless the caller says an absence leads only to writes the API arbitrates (a
  create, refused for a runner that exists); such a caller may take an older list's absence
  (`absence_age`) instead of waiting for a fresher list;
- a refresh drops a runner only once its list is complete: until then (or when it fails) the
  previous entry stays, never an absence that the partial list merely has not reached yet.

Memory: a pass reads one runner, so the snapshot keeps each runner as its list entry, compressed
JSON primed with the first entry (`jsoncodec.Packer`: runners made from one template share most of
their bytes; 20-40 KB each as a model; bench/snapshot_memory.py), parsed when a pass asks for it.
A refresh replaces entries as they arrive instead of building a second snapshot beside the first,
and a page is parsed one entry at a time as its body arrives (cloud/pages.py): neither a whole page
of dicts nor a whole page's text is held.

Cost: a list is O(N) in requests and CPU, so it is never taken more often than once per
SECONDS_PER_PAGE per page of the last list past the first, nor more often than LIST_SHARE of the
request budget allows, whatever age a pass asks for (except 0: now, and a create key's reservation).
At 10,000 runners and 10 req/s a pass in flight sees a list up to 20 s old instead of starting a
10-page list every 2-3 s, which kept two cores busy (bench/RESULTS.md, "N = 10,000"). A refresh
compresses only the entries whose content changed (a 16-byte digest tells), and writes each entry
with `jsoncodec` (orjson).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from runner_operator import jsoncodec
from runner_operator.cloud.client import CloudClient, runner_from_json
from runner_operator.cloud.models import CloudRunner, RunnerIdentity

PAGE_SIZE = 1000
SECONDS_PER_PAGE = 2.0
"""The least time between two lists per page of the last one past the first (module docstring): at most
half a request per second on lists, and a list's parsing (about 0.15 s of CPU per page) at most a
tenth of a core."""


LIST_SHARE = 0.05
"""The most of the credential's request budget that lists take when passes keep asking for fresh ones:
3 pages (3,000 runners) at 10 req/s at most every 6 s. Every other request serves one runner, and a
creation backlog is bound by that budget (bench/RESULTS.md, "Creates do not wait for lists"). A
create key's reservation still lists when the last list is older than it may rest on (30 s)."""


@dataclass
class CacheStats:
    lists: int = 0
    pages: int = 0
    hits: int = 0
    direct_gets: int = 0


HEARTBEAT = "lastHeartbeatTime"


class _Entry(NamedTuple):
    cluster_id: str | None
    """kept unpacked: finding a cluster's holder reads it for every runner."""
    packed: bytes
    """the entry without its heartbeat: the same bytes while nothing but the heartbeat moves."""
    digest: bytes
    """of the entry's JSON before compression: an unchanged entry is not compressed again."""
    heartbeat: str | None = None


@dataclass
class RunnerCache:
    client: CloudClient
    clock: Callable[[], float] = time.monotonic
    stats: CacheStats = field(default_factory=CacheStats)
    _snapshot: dict[str, _Entry] = field(default_factory=dict)
    _packer: jsoncodec.Packer = field(default_factory=jsoncodec.Packer)
    _taken: float = float("-inf")
    _written: dict[str, float] = field(default_factory=dict)
    _results: dict[str, tuple[float, CloudRunner]] = field(default_factory=dict)
    _refresh: asyncio.Task[None] | None = None
    on_change: Callable[[frozenset[str]], None] | None = None
    """Told, after each complete list, which runners changed since the list before (heartbeat aside)
    or vanished from it: the operator looks at those at once instead of at their next resync."""

    async def find(
        self, runner_id: str, max_age: float, *, trust_absence: bool = False, absence_age: float = 0.0
    ) -> CloudRunner | None:
        """The runner as of at most `max_age` seconds ago (or fresher), or as old as the time between
        lists that the snapshot's size allows, if that is longer (`_affordable`); 0: a GET now.

        None comes from a direct GET unless `trust_absence`: callers for whom "absent" leads to nothing
        the API does not arbitrate (reserving a create key, sending the create, which the API refuses
        for a runner that exists) may skip that GET. With `absence_age` too (`planning.absence_age`),
        their absence may come from a list up to that many seconds old without waiting for a refresh;
        what the list shows is still read as fresh as `max_age` asks. A listed entry that does not parse
        raises errors.IncompatibleServer here, for this runner only.
        """
        if max_age <= 0:
            return await self._get(runner_id)
        max_age = self._affordable(max_age)
        age = self.clock() - self._taken
        # An absence is as old as `absence_age` allows, no older even where the list interval is longer.
        unlisted = trust_absence and absence_age > 0 and self._unlisted(runner_id)
        if age > (absence_age if unlisted else max_age):
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
        return None if found is None else runner_from_json(_unpack(found, self._packer))

    async def entry(self, runner_id: str, max_age: float, *, refresh: bool = True) -> bytes | None:
        """The runner's packed list entry, at most `max_age` old (what `find` would parse), unparsed.

        Without the runner's heartbeat, which moves every few seconds and alone changes nothing a
        pass decides or writes (see `outcomes.STAMPS`). None when the snapshot cannot answer for it:
        absent, or written by this process since. The same bytes object is returned until a refresh
        replaces the entry. Without `refresh`, only the snapshot as it is now is read.
        """
        if max_age <= 0:
            return None
        if refresh and self.clock() - self._taken > self._affordable(max_age):
            await self._refreshed()
        if self._stale_for(runner_id):
            return None
        found = self._snapshot.get(runner_id)
        return None if found is None else found.packed

    async def identities(self, max_age: float) -> list[RunnerIdentity]:
        """ID and cluster of each runner of the credential, at most `max_age` seconds old (0: list now)."""
        if max_age <= 0 or self.clock() - self._taken > self._affordable(max_age):
            await self._refreshed()
        return [
            RunnerIdentity(runner_id=runner_id, cluster_id=entry.cluster_id)
            for runner_id, entry in self._snapshot.items()
        ]

    def _affordable(self, max_age: float) -> float:
        """`max_age`, raised to the least time between lists that the last list's size allows: in CPU
        (SECONDS_PER_PAGE) and in the credential's request budget (LIST_SHARE)."""
        pages = -(-len(self._snapshot) // PAGE_SIZE)
        return max(max_age, (pages - 1) * SECONDS_PER_PAGE, pages / (self.client.budget.rate * LIST_SHARE))

    def _unlisted(self, runner_id: str) -> bool:
        """Absent from the snapshot (a list was completed once; a refresh in flight or broken off only
        adds entries), and not written by this process since."""
        return (
            self._taken > float("-inf") and runner_id not in self._snapshot and not self._stale_for(runner_id)
        )

    def _stale_for(self, runner_id: str) -> bool:
        written = self._written.get(runner_id)
        return written is not None and written >= self._taken

    def note_write(self, runner_id: str, result: CloudRunner | None = None) -> None:
        """This process just changed the runner: the snapshot is stale for it; `result` is the response."""
        now = self.clock()
        self._written[runner_id] = now
        if result is None:
            self._results.pop(runner_id, None)
        else:
            self._results[runner_id] = (now, result)

    async def close(self) -> None:
        """Stop a refresh in flight (its client is about to close); passes awaiting it get CancelledError."""
        task, self._refresh = self._refresh, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _get(self, runner_id: str) -> CloudRunner | None:
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
        listed: set[str] = set()
        changed: set[str] = set()
        self.stats.lists += 1
        listing = self.client.iter_entries(page_size=PAGE_SIZE, on_send=lambda: sent.append(self.clock()))
        async with contextlib.aclosing(listing) as entries:
            async for identity, entry in entries:
                if started is None:
                    started = sent[-1]
                if identity.runner_id:
                    # In place: a replaced entry is fresher than `_taken`, which stays true for the rest.
                    heartbeat = entry.pop(HEARTBEAT, None)
                    raw = jsoncodec.dumps(entry)
                    digest = hashlib.blake2b(raw, digest_size=16).digest()
                    before = self._snapshot.get(identity.runner_id)
                    same = before is not None and before.digest == digest
                    if before is not None and not same:
                        changed.add(identity.runner_id)
                    self._snapshot[identity.runner_id] = _Entry(
                        identity.cluster_id,  # part of the digested entry
                        before.packed if same and before is not None else self._packer.compress(raw),
                        digest,
                        heartbeat if isinstance(heartbeat, str) else None,
                    )
                    listed.add(identity.runner_id)
        if started is None:  # nothing listed: the earliest send is the safe bound
            started = sent[0] if sent else self.clock()
        self.stats.pages += max(1, -(-len(listed) // PAGE_SIZE))
        for gone in self._snapshot.keys() - listed:
            del self._snapshot[gone]
            changed.add(gone)
        self._taken = started
        # Writes older than the snapshot's start are reflected in it; forget them.
        self._written = {k: t for k, t in self._written.items() if t >= started}
        self._results = {k: r for k, r in self._results.items() if k in self._written}
        if changed and self.on_change is not None:
            self.on_change(frozenset(changed))


def _unpack(found: _Entry, packer: jsoncodec.Packer) -> bytes:
    """The entry's JSON as listed, the heartbeat put back (it was the last key of a JSON object)."""
    raw = packer.decompress(found.packed)
    if found.heartbeat is None:
        return raw
    sep = b"," if raw != b"{}" else b""
    return raw[:-1] + sep + jsoncodec.dumps({HEARTBEAT: found.heartbeat})[1:]
