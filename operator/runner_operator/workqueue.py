"""Due passes per object: one entry per key, earliest due wins, bounded per lane and credential (pure).

The operator's scheduler of level-triggered passes, in the spirit of controller-runtime's
rate-limited work queue, replacing one kopf timer per object:
- dedupe: a key is queued at most once; adding it again keeps the earlier due time, and a key
  added while its pass runs is held and queued when that pass ends (never two passes at once);
- lanes and groups: each (lane, group) pair has its own limit of running passes, so creates for
  one credential cannot hold every slot while another credential's runners wait (fairness per
  credential), and steady passes never queue behind a creation backlog;
- first in line: among due keys of one (lane, group), those added with `first` are taken before
  the rest, so work already under way (a create whose key is reserved) is not queued behind a
  backlog of objects not yet looked at;
- failure backoff: a pass that raises is retried after base * 2**failures seconds (capped,
  jittered), reset by the next pass that ends normally.

Time and randomness come in as arguments: no clock, no I/O, table-testable.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class Backoff:
    """Seconds before retrying a pass that failed `failures` times in a row."""

    base: float = 1.0
    cap: float = 60.0
    """kopf retried a failed timer after 60 s; an API server back from a restart is seen as soon."""

    def delay(self, failures: int, jitter: float) -> float:
        """`jitter` in [0, 1) spreads retries over the upper half of the step, so failures that
        happened together (an API server restart) do not retry together."""
        step = min(self.cap, self.base * 2.0 ** max(0, failures - 1))
        return step * (0.5 + jitter / 2)


class Slot(NamedTuple):
    """Where a key waits: its lane and group share a limit; `first` keys are taken before the rest."""

    lane: str = ""
    group: str = ""
    first: bool = False


ANY = Slot()
"""The slot of a queue used without lanes (no limit, no order but due time)."""


@dataclass
class _Entry:
    due: float
    slot: Slot


@dataclass
class WorkQueue:
    """Keys due at a time, taken when due and allowed by their (lane, group) limit."""

    limits: Mapping[str, int] = field(default_factory=dict)
    """Running passes allowed per group in each lane; a lane not named here is unbounded."""
    backoff: Backoff = field(default_factory=Backoff)
    _queued: dict[str, _Entry] = field(default_factory=dict)
    _heaps: dict[Slot, list[tuple[float, int, str]]] = field(default_factory=dict)
    _running: dict[str, tuple[str, str]] = field(default_factory=dict)
    _held: dict[str, _Entry] = field(default_factory=dict)
    _busy: dict[tuple[str, str], int] = field(default_factory=dict)
    _failures: dict[str, int] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, key: str, at: float, slot: Slot = ANY) -> None:
        """Queue `key` at `at`, or earlier if it is already due sooner; held if its pass is running."""
        if key in self._running:
            held = self._held.get(key)
            if held is None or at < held.due:
                self._held[key] = _Entry(at, slot)
            return
        found = self._queued.get(key)
        if found is not None and found.due <= at and found.slot == slot:
            return
        if found is not None:
            at = min(at, found.due)
        self._queued[key] = _Entry(at, slot)
        heapq.heappush(self._heaps.setdefault(slot, []), (at, next(self._seq), key))

    def forget(self, key: str) -> None:
        """Drop a key (the object is gone or no longer ours); a running pass ends without requeueing."""
        self._queued.pop(key, None)
        self._held.pop(key, None)
        self._failures.pop(key, None)
        if key in self._running:
            self._held[key] = _Entry(float("inf"), ANY)  # a marker: nothing after the running pass

    def take(self, now: float) -> list[str]:
        """The keys due by `now` that their limits allow, marked running: per (lane, group), `first`
        keys before the rest, earliest due first."""
        taken: list[tuple[float, str]] = []
        for slot in sorted(self._heaps, key=lambda s: not s.first):
            heap, limited = self._heaps[slot], (slot.lane, slot.group)
            room = self.limits.get(slot.lane)
            while heap and heap[0][0] <= now and (room is None or self._busy.get(limited, 0) < room):
                due, _, key = heapq.heappop(heap)
                entry = self._queued.get(key)
                if entry is None or entry.due != due or entry.slot != slot:
                    continue  # superseded by a later add or a forget
                del self._queued[key]
                self._running[key] = limited
                self._busy[limited] = self._busy.get(limited, 0) + 1
                taken.append((due, key))
        self._heaps = {slot: heap for slot, heap in self._heaps.items() if heap}
        return [key for _, key in sorted(taken)]

    def done(self, key: str, now: float, after: float | None, slot: Slot = ANY) -> None:
        """The pass for `key` ended normally; look again `after` seconds from now (None: not by time)."""
        self._failures.pop(key, None)
        self._finish(key)
        self._requeue(key, None if after is None else now + after, slot)

    def failed(self, key: str, now: float, jitter: float, slot: Slot = ANY) -> float:
        """The pass for `key` raised: queue it after the backoff, returned in seconds."""
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        delay = self.backoff.delay(failures, jitter)
        self._finish(key)
        self._requeue(key, now + delay, slot)
        return delay

    def next_due(self) -> float | None:
        """The earliest due time among queued keys whose slot has room (None: nothing to wait for)."""
        times = [
            heap[0][0]
            for slot, heap in self._heaps.items()
            if heap
            and (
                self.limits.get(slot.lane) is None
                or self._busy.get((slot.lane, slot.group), 0) < self.limits[slot.lane]
            )
        ]
        return min(times, default=None)

    def due_at(self, key: str) -> float | None:
        entry = self._queued.get(key) or self._held.get(key)
        return None if entry is None or entry.due == float("inf") else entry.due

    def running(self, key: str) -> bool:
        return key in self._running

    def __len__(self) -> int:
        """Keys queued or running."""
        return len(self._queued) + len(self._running)

    def _finish(self, key: str) -> None:
        slot = self._running.pop(key, None)
        if slot is not None:
            self._busy[slot] -= 1
            if not self._busy[slot]:
                del self._busy[slot]

    def _requeue(self, key: str, at: float | None, slot: Slot) -> None:
        held = self._held.pop(key, None)
        if held is not None and held.due == float("inf"):
            return  # forgotten while running
        if held is not None:
            # The pass that just ended knows the object better than the event that woke it meanwhile.
            self.add(key, held.due if at is None else min(at, held.due), slot)
        elif at is not None:
            self.add(key, at, slot)
