"""Shards: which ManagedRunners a process handles, and when a shard may start acting.

The rules, in plain words (docs/install.md, "High availability and shards"):

1. With N shards, a ManagedRunner belongs to exactly one: sha256 of "namespace/name", modulo N. Every
   process and every release computes the same answer (not Python's salted `hash`), and it does not
   change when the object is edited, so only a change of N moves objects between shards.
2. Each shard index has its own Lease, with leader election as for one replica (`leases`): any number
   of replicas per shard, one acts. The Lease records N. One shard (N = 1) keeps the unsharded name,
   so turning shards on or off is a change of N like any other.
3. A process starts acting only if, once it holds its shard's Lease, no other live Lease of this
   operator records another N. If one does, it hands its own Lease back and waits: the processes of
   the old N keep acting until they stop (a rolling update stops them), and the new N starts within
   a retry period of the last one's release (one Lease duration if it was killed).
4. A process that is already acting keeps acting when a Lease with another N appears: the newcomer
   waits (rule 3). So processes of two different N never act at once, and an object is never handled
   by two shards; it goes unhandled only while the last process of the old N is stopping.
5. The API request budget of a token is split evenly: each of N shards spends 1/N of the configured
   rate and burst, so together they stay within what one process would spend.

Pure: the shell (`leader`) lists the Leases and keeps time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from runner_operator import leases

COUNT_ANNOTATION = "sandbox.coreweave.com/shards"
"""On each Lease: the shard count N of the process that wrote it (absent: 1, an unsharded leader)."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 <= index < count)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"a shard is I/N with 0 <= I < N, got {self.index}/{self.count}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N`, as given to `runner-operator run --shard`."""
        index, slash, count = text.strip().partition("/")
        if not slash or not index.isdigit() or not count.isdigit():
            raise ValueError(f"a shard is written I/N (for example 0/3), got {text!r}")
        return cls(int(index), int(count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, namespace: str, name: str) -> bool:
        return self.count == 1 or shard_of(namespace, name, self.count) == self.index

    def lease_name(self, base: str) -> str:
        return base if self.count == 1 else f"{base}-shard-{self.index}"

    def share(self, rate: float, burst: int) -> tuple[float, int]:
        """This shard's part of a token's request budget (rule 5)."""
        return rate / self.count, max(1, burst // self.count)


def shard_of(namespace: str, name: str, count: int) -> int:
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def is_peer(lease: str, base: str) -> bool:
    """Whether a Lease name is one of this operator's (the unsharded one or a shard's)."""
    return lease == base or (lease.startswith(f"{base}-shard-") and lease[len(base) + 7 :].isdigit())


@dataclass(frozen=True)
class Peer:
    """Another Lease of this operator as last read: its record (aged as `leases.Seen`) and its N."""

    seen: leases.Seen
    count: int


def blocking(me: Shard, identity: str, peers: Mapping[str, Peer], now: float) -> list[str]:
    """The live Leases that record another shard count: while any exists, this process may not start
    acting (rule 3). A Lease is live while it has a holder that is not us and has not expired by
    this process's own clock (`leases.free`)."""
    return sorted(
        name
        for name, peer in peers.items()
        if peer.count != me.count and not leases.free(peer.seen, identity, now)
    )
