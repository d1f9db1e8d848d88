"""One scheduler of due passes for every ManagedRunner, in place of a kopf timer per object.

kopf's timers cost a task and a full parsed body per object for the life of the process, cannot be
woken early, and stop for good when the status patch after a pass fails past kopf's retries. Here
the watch feeds `Bodies` (the latest object, compressed) and a `workqueue.WorkQueue` (when to look
again); `Scheduler.serve` starts a task per due pass and requeues it from what the pass returns, or
after a backoff when it raises. A failing write delays that object's next look; it never ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runner_operator import cadence, jsoncodec
from runner_operator.workqueue import Slot, WorkQueue

log = logging.getLogger(__name__)

CREATE, STEADY = "create", "steady"
"""Lanes: passes that may create a runner take turns per credential; the rest never wait on them."""

WRITTEN_TRUST = 60.0
"""Seconds our own status write is preferred over older watched bodies (the watch catches up in less)."""


@dataclass(frozen=True)
class Kept:
    """What the scheduler knows of one object between passes: its body, compressed, and its lane."""

    packed: bytes
    resource_version: str
    lane: str
    group: str
    runner_id: str | None
    """the runner the status says this object holds: a change to it in the shared list wakes it."""
    deleting: bool = False
    reserved: bool = False
    """its create key is reserved (the create is next): ahead of objects not yet looked at."""
    generation: int = 0


def _json(body: Mapping[str, Any]) -> bytes:
    raw = {k: v for k, v in body.items()}
    meta = dict(raw.get("metadata") or {})
    meta.pop("managedFields", None)
    raw["metadata"] = meta
    return jsoncodec.dumps(raw)


def _older(version: str, than: str) -> bool:
    """Whether a watched resourceVersion precedes ours; unknown when either is not a number."""
    try:
        return int(version) < int(than)
    except ValueError:
        return False


@dataclass
class Bodies:
    """The latest body of each object, compressed primed with the first one (`jsoncodec.Packer`): at
    most a few KB each instead of kopf's parsed copy, a few hundred bytes in a fleet from one template.

    A pass reads the body it is given; after our own status write the watch may still deliver older
    bodies for a moment, so the write's response is preferred until the watch shows a body at least
    as new (or for WRITTEN_TRUST seconds when versions cannot be compared).
    """

    clock: Callable[[], float] = time.monotonic
    _kept: dict[str, Kept] = field(default_factory=dict)
    _written: dict[str, tuple[Kept, float]] = field(default_factory=dict)
    _packer: jsoncodec.Packer = field(default_factory=jsoncodec.Packer)
    _new_specs: set[str] = field(default_factory=set)

    def put(self, uid: str, body: Mapping[str, Any]) -> bool:
        """Keep what the watch delivered; True when the object is new here. A spec not looked at yet
        (`cadence.spec_is_new`) is noted until a pass takes it (`take_new_spec`)."""
        kept = self._keep(body)
        before = self._kept.get(uid)
        seen = None if before is None else before.generation
        if cadence.spec_is_new(kept.generation, seen, body.get("status") or {}, deleting=kept.deleting):
            self._new_specs.add(uid)
        written = self._written.get(uid)
        if written is not None and (
            not _older(kept.resource_version, written[0].resource_version) or self.clock() > written[1]
        ):
            del self._written[uid]
        new = uid not in self._kept
        self._kept[uid] = kept
        return new

    def wrote(self, uid: str, body: Mapping[str, Any]) -> None:
        """Our status write returned this body: passes use it until the watch catches up."""
        if uid in self._kept:
            self._written[uid] = (self._keep(body), self.clock() + WRITTEN_TRUST)

    def spec_pending(self, uid: str) -> bool:
        """Whether a spec not looked at yet waits for this object's next pass."""
        return uid in self._new_specs

    def take_new_spec(self, uid: str) -> bool:
        """Whether this pass is the first to look at the object's spec (it reads its Secrets now)."""
        if uid in self._new_specs:
            self._new_specs.discard(uid)
            return True
        return False

    def get(self, uid: str) -> dict[str, Any] | None:
        kept = self._latest(uid)
        return None if kept is None else dict(jsoncodec.loads(self._packer.decompress(kept.packed)))

    def unless_newer(self, uid: str, read: dict[str, Any], version: str | None) -> dict[str, Any] | None:
        """The body a pass acts on once it holds the object's lock: `read` (unpacked when the object
        was at `version`) if nothing newer has come since, else the latest (None: gone). Unpacking
        is a few percent of a pass's CPU; most passes never wait for another, so it is done once."""
        return read if version and self.version(uid) == version else self.get(uid)

    def version(self, uid: str) -> str | None:
        """The resourceVersion of the body a pass would read now (None: not kept)."""
        kept = self._latest(uid)
        return None if kept is None else kept.resource_version

    def slot(self, uid: str) -> Slot:
        """Where an object waits: CREATE until the status names a runner, per credential, and first
        in line once its create key is reserved."""
        kept = self._latest(uid)
        return Slot(STEADY) if kept is None else Slot(kept.lane, kept.group, kept.reserved)

    def _latest(self, uid: str) -> Kept | None:
        written = self._written.get(uid)
        return written[0] if written is not None and self.clock() <= written[1] else self._kept.get(uid)

    def deleting(self, uid: str) -> bool:
        """Whether the object was already being deleted when last seen."""
        kept = self._kept.get(uid)
        return kept is not None and kept.deleting

    def holding(self, runner_ids: frozenset[str]) -> list[str]:
        """The objects whose status names one of these runners."""
        return [
            uid for uid in self._kept if (k := self._latest(uid)) is not None and k.runner_id in runner_ids
        ]

    def forget(self, uid: str) -> None:
        self._kept.pop(uid, None)
        self._written.pop(uid, None)
        self._new_specs.discard(uid)

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, uid: object) -> bool:
        return uid in self._kept

    def _keep(self, body: Mapping[str, Any]) -> Kept:
        meta = body.get("metadata") or {}
        spec, status = body.get("spec") or {}, body.get("status") or {}
        ref = (spec.get("credentials") or {}).get("secretRef") or {}
        secret = ref.get("name") if isinstance(ref, Mapping) else None
        return Kept(
            packed=self._packer.compress(_json(body)),
            resource_version=str(meta.get("resourceVersion") or ""),
            lane=STEADY if status.get("runnerId") else CREATE,
            runner_id=status.get("runnerId") or None,
            deleting=bool(meta.get("deletionTimestamp")),
            reserved=bool(status.get("createRequestId")) and not status.get("runnerId"),
            group=sys.intern(f"{meta.get('namespace')}/{secret}") if secret else "default",  # shared by many
            generation=generation if isinstance(generation := meta.get("generation"), int) else 0,
        )


@dataclass
class Scheduler:
    """Runs due passes: `run(key)` returns seconds to the next look (None: only when woken)."""

    queue: WorkQueue
    run: Callable[[str], Awaitable[float | None]]
    slot: Callable[[str], Slot]
    clock: Callable[[], float] = time.monotonic
    rng: Callable[[], float] = random.random
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _serving: asyncio.Task[None] | None = None

    def add(self, key: str, delay: float) -> None:
        """Look at `key` within `delay` seconds (sooner if it is already due sooner)."""
        self.queue.add(key, self.clock() + delay, self.slot(key))
        self._wake.set()

    def forget(self, key: str) -> None:
        self.queue.forget(key)

    def start(self) -> None:
        """Serve in a task of the caller's context (kopf's handler context carries its Event poster)."""
        if self._serving is None:
            self._serving = asyncio.create_task(self.serve(), name="runner-operator scheduler")

    async def serve(self) -> None:
        while True:
            self._wake.clear()
            for key in self.queue.take(self.clock()):
                task = asyncio.create_task(self._one(key), name=f"pass {key}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            due = self.queue.next_due()
            timeout = None if due is None else max(0.0, due - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _one(self, key: str) -> None:
        try:
            after = await self.run(key)
        except asyncio.CancelledError:
            raise
        except Exception:
            delay = self.queue.failed(key, self.clock(), self.rng(), self.slot(key))
            log.exception("pass for %s failed; looking again in %.1fs", key, delay)
        else:
            self.queue.done(key, self.clock(), after, self.slot(key))
        finally:
            self._wake.set()

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._serving] if self._serving else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._serving = None
