"""Who claims each runner ID and who uses each credentials Secret, over every ManagedRunner seen (pure).

kopf's own indexes (`kopf.index`) hold every handler until each object of the first list is
indexed, with one asyncio toggle per object on one shared condition: each object indexed wakes
every worker already waiting, N² wakeups at a start (bench/RESULTS.md: 31% of a restart's CPU at
N = 3,000; none of 10,000 objects passed in its first 120 s), and every object's body is held
until the last one is indexed. These indexes keep the same guarantee at O(1) per event: the
handlers fill them from one paged list before any pass runs (`Startup` says when every object
that list named has been delivered by the watch, or has been listed gone since), and keep them
with every watch event after.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from runner_operator import claiming

V = TypeVar("V")
User = tuple[str, bool]
"""(uid, deleting?) of a ManagedRunner that uses or protected a credentials Secret."""


class Keyed(Mapping[str, tuple[V, ...]], Generic[V]):
    """key -> the values of every object filed under it (what kopf's Index gave), one per object."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, V]] = {}

    def __getitem__(self, key: str) -> tuple[V, ...]:
        return tuple(self._by_key[key].values())

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def file(self, uid: str, before: tuple[str, ...], now: Mapping[str, V]) -> tuple[str, ...]:
        """File `uid` under the keys of `now` (and no longer under the rest of `before`); returns the
        keys now filed, as a tuple (kept per object: one or two keys, 48 bytes against 216 for a set)."""
        for key in before:
            if key not in now:
                self._drop(key, uid)
        for key, value in now.items():
            self._by_key.setdefault(key, {})[uid] = value
        return tuple(now)

    def _drop(self, key: str, uid: str) -> None:
        values = self._by_key.get(key)
        if values is not None:
            values.pop(uid, None)
            if not values:
                del self._by_key[key]


def secret_users(body: Mapping[str, Any]) -> dict[str, User]:
    """namespace/Secret -> this object's use of it: the Secret its spec names and the one its status
    says it protected. Read raw (not through the model) so a spec this version cannot parse counts."""
    meta: Mapping[str, Any] = body.get("metadata") or {}
    spec: Mapping[str, Any] = body.get("spec") or {}
    status: Mapping[str, Any] = body.get("status") or {}
    names = {status.get("credentialsSecret")}
    ref = (spec.get("credentials") or {}).get("secretRef") or {}
    names.add(ref.get("name") if isinstance(ref, Mapping) else None)
    user = (str(meta.get("uid")), meta.get("deletionTimestamp") is not None)
    # Interned: every object using a Secret files under the same key, one copy for all of them.
    namespace = meta.get("namespace")
    return {sys.intern(f"{namespace}/{name}"): user for name in names if isinstance(name, str) and name}


@dataclass
class Indexes:
    """The runner-claims and Secret-users indexes, kept together per object."""

    claims: Keyed[claiming.Claim] = field(default_factory=Keyed)
    users: Keyed[User] = field(default_factory=Keyed)
    _keys: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)

    def put(self, body: Mapping[str, Any]) -> None:
        """File an object as its latest body says (an object seen again replaces its entries)."""
        uid = str((body.get("metadata") or {}).get("uid"))
        claimed, used = self._keys.get(uid, ((), ()))
        runner_id, claim = claiming.claim(body)
        claimed = self.claims.file(uid, claimed, {runner_id: claim})
        self._keys[uid] = (claimed, self.users.file(uid, used, secret_users(body)))

    def forget(self, uid: str) -> None:
        """The object is gone: it claims and uses nothing any more."""
        claimed, used = self._keys.pop(uid, ((), ()))
        self.claims.file(uid, claimed, {})
        self.users.file(uid, used, {})

    def __len__(self) -> int:
        return len(self._keys)


@dataclass
class Startup:
    """The objects the first list named that the watch has not delivered yet.

    Passes wait until none is left, as kopf's indexes made them wait: a pass must not decide who
    holds a runner ID before every object that existed at start is indexed. One the watch never
    delivers was deleted in between; a later list without it says so (`relisted`).
    """

    _pending: set[str] = field(default_factory=set)
    listed: bool = False
    """the first list is complete (until then, nothing is known about what exists)."""

    def expect(self, uid: str) -> None:
        self._pending.add(uid)

    def delivered(self, uid: str) -> None:
        self._pending.discard(uid)

    def relisted(self, uids: frozenset[str]) -> list[str]:
        """A later list holds `uids`: the pending objects not in it are gone; returns their uids."""
        gone = sorted(self._pending - uids)
        self._pending &= uids
        return gone

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def done(self) -> bool:
        return self.listed and not self._pending
