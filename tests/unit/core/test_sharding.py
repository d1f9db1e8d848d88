"""Which shard handles a ManagedRunner, and when a shard may start (runner_operator.sharding)."""

from __future__ import annotations

import pytest

from runner_operator.leases import Record, Seen
from runner_operator.sharding import Peer, Shard, blocking, is_peer, shard_of

NAMES = [(f"team-{t}", f"runner-{i}") for t in range(10) for i in range(100)]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_every_object_belongs_to_exactly_one_shard(count: int) -> None:
    owners = [[i for i in range(count) if Shard(i, count).owns(ns, name)] for ns, name in NAMES]
    assert all(len(o) == 1 for o in owners)
    per_shard = [sum(1 for o in owners if o == [i]) for i in range(count)]
    assert min(per_shard) >= len(NAMES) / count * 0.8  # spread, not all on one shard


def test_the_shard_of_an_object_is_the_same_in_every_process_and_release() -> None:
    # Pinned: sha256 of "namespace/name", not Python's per-process salted hash().
    assert [shard_of("team-a", f"runner-{i}", 3) for i in range(6)] == [0, 2, 0, 2, 2, 2]
    assert shard_of("default", "example", 3) == 0


@pytest.mark.parametrize(
    ("text", "shard"), [("0/1", Shard(0, 1)), ("2/3", Shard(2, 3)), (" 0/10 ", Shard(0, 10))]
)
def test_parse(text: str, shard: Shard) -> None:
    assert Shard.parse(text) == shard
    assert str(Shard.parse(text)) == text.strip()


@pytest.mark.parametrize("text", ["3/3", "1", "a/3", "-1/3", "1/0", "1/3/4", ""])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"I/N|0 <= I < N"):
        Shard.parse(text)


def test_lease_names_and_budget_share() -> None:
    assert Shard().lease_name("mro") == "mro"  # unsharded: the leader election Lease as before
    assert Shard(2, 3).lease_name("mro") == "mro-shard-2"
    assert Shard(0, 4).share(10.0, 20) == (2.5, 5)
    assert Shard(0, 3).share(10.0, 2) == (10.0 / 3, 1)  # never a zero burst
    assert is_peer("mro", "mro")
    assert is_peer("mro-shard-12", "mro")
    assert not is_peer("mro-shard-", "mro")
    assert not is_peer("mro-other", "mro")
    assert not is_peer("x", "mro")


def peer(holder: str, count: int, seen_at: float = 0.0, duration: int = 15) -> Peer:
    return Peer(Seen(Record(holder=holder, lease_duration=duration), seen_at), count)


@pytest.mark.parametrize(
    ("peers", "now", "blocked"),
    [
        pytest.param({}, 0.0, [], id="alone"),
        pytest.param({"mro-shard-1": peer("b", 3)}, 0.0, [], id="same-count-peer-does-not-block"),
        pytest.param({"mro-shard-2": peer("c", 2)}, 0.0, ["mro-shard-2"], id="live-other-count-blocks"),
        pytest.param({"mro": peer("old", 1)}, 14.9, ["mro"], id="unsharded-leader-blocks-until-expiry"),
        pytest.param({"mro": peer("old", 1)}, 15.0, [], id="expired-by-our-clock-does-not-block"),
        pytest.param({"mro-shard-3": peer("", 4)}, 0.0, [], id="released-does-not-block"),
        pytest.param({"mro-shard-3": peer("me", 4)}, 0.0, [], id="our-own-record-does-not-block"),
        pytest.param(
            {"mro-shard-4": peer("d", 5), "mro-shard-1": peer("b", 3), "mro": peer("e", 1)},
            1.0,
            ["mro", "mro-shard-4"],
            id="every-blocker-named",
        ),
    ],
)
def test_blocking(peers: dict[str, Peer], now: float, blocked: list[str]) -> None:
    assert blocking(Shard(0, 3), "me", peers, now) == blocked
