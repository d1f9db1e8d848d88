"""The leader election shell (runner_operator.leader) over an in-memory Lease with resourceVersions.

The property that matters: a leader that can no longer renew gives up before any standby may take
the Lease, so two operators never act at once.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest

from runner_operator import leases, sharding
from runner_operator.leader import Conflict, Elector, standby_health
from tests.clock import FakeClock
from tests.support.probes import http_status

T = leases.Timing()


class Lease:
    """One Lease object: a record and a resourceVersion bumped on every write."""

    def __init__(self) -> None:
        self.record: leases.Record | None = None
        self.version = 0
        self.writes: list[str] = []


class View:
    """One replica's connection to the Lease; `down` partitions it from the API server."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.down = False

    def read(self) -> tuple[leases.Record, str] | None:
        self._reachable()
        return None if self.lease.record is None else (self.lease.record, str(self.lease.version))

    def create(self, record: leases.Record) -> str:
        self._reachable()
        if self.lease.record is not None:
            raise Conflict("exists")
        return self._write(record)

    def update(self, record: leases.Record, version: str) -> str:
        self._reachable()
        if version != str(self.lease.version):
            raise Conflict("changed")
        return self._write(record)

    def _write(self, record: leases.Record) -> str:
        self.lease.record, self.lease.version = record, self.lease.version + 1
        self.lease.writes.append(record.holder)
        return str(self.lease.version)

    def _reachable(self) -> None:
        if self.down:
            raise ConnectionError("the API server is unreachable")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0)


def candidate(lease: Lease, name: str, clock: FakeClock) -> tuple[Elector, View]:
    view = View(lease)
    return Elector(view, name, T, clock=clock, wall=lambda: datetime.fromtimestamp(clock.now, UTC)), view


def test_one_holds_the_others_wait(clock: FakeClock) -> None:
    lease = Lease()
    a, _ = candidate(lease, "a", clock)
    b, _ = candidate(lease, "b", clock)
    assert a.try_once()
    assert not b.try_once()
    assert b.holder() == "a"
    for _ in range(20):  # the leader renews every period; the standby never gets in
        clock.tick(T.retry_period)
        assert a.renew_once() is None
        assert not b.try_once()
    assert lease.record is not None
    assert lease.record.holder == "a"
    assert lease.record.transitions == 0


def test_a_partitioned_leader_stops_before_a_standby_may_start(clock: FakeClock) -> None:
    lease = Lease()
    a, a_view = candidate(lease, "a", clock)
    b, _ = candidate(lease, "b", clock)
    assert a.try_once()
    assert not b.try_once()
    a_view.down = True
    lost_at = took_at = None
    while took_at is None:
        clock.tick(0.5)
        if lost_at is None and (why := a.renew_once()) is not None:
            lost_at = clock.now
            assert why == "the Lease was not renewed for 10 s"
        if b.try_once():
            took_at = clock.now
    assert lost_at is not None
    assert lost_at <= 100.0 + T.renew_deadline + 0.5
    assert took_at >= 100.0 + T.lease_duration
    assert lost_at < took_at  # never two leaders
    assert lease.record is not None
    assert (lease.record.holder, lease.record.transitions) == ("b", 1)


def test_a_leader_that_sees_another_holder_gives_up_at_once(clock: FakeClock) -> None:
    lease = Lease()
    a, _ = candidate(lease, "a", clock)
    assert a.try_once()
    assert lease.record is not None
    lease.record = leases.Record(holder="b", lease_duration=15)  # e.g. someone edited the Lease
    lease.version += 1
    assert a.renew_once() == "the Lease is now held by b"


def test_two_standbys_racing_for_an_expired_lease_cannot_both_win(clock: FakeClock) -> None:
    lease = Lease()
    a, _ = candidate(lease, "a", clock)
    assert a.try_once()
    b, b_view = candidate(lease, "b", clock)
    c, c_view = candidate(lease, "c", clock)
    assert not b.try_once()
    assert not c.try_once()
    clock.tick(T.lease_duration)
    # Both read the same version; the first write wins, the second is a conflict.
    b_read, c_read = b_view.read, c_view.read
    snapshot = b_read()
    b_view.read = c_view.read = lambda: snapshot  # type: ignore[method-assign]
    assert b.try_once()
    assert not c.try_once()
    b_view.read, c_view.read = b_read, c_read  # type: ignore[method-assign]
    assert lease.writes == ["a", "b"]


def test_a_released_lease_is_taken_at_once(clock: FakeClock) -> None:
    lease = Lease()
    a, _ = candidate(lease, "a", clock)
    b, _ = candidate(lease, "b", clock)
    assert a.try_once()
    assert not b.try_once()
    a.release()
    clock.tick(0.1)
    assert b.try_once()
    b.release()
    a.release()  # no longer ours: nothing written
    assert lease.writes == ["a", "", "b", ""]


def test_an_unreachable_api_server_keeps_a_standby_waiting(clock: FakeClock) -> None:
    lease = Lease()
    a, view = candidate(lease, "a", clock)
    view.down = True
    assert not a.try_once()
    assert a.read_at is None
    view.down = False
    assert a.try_once()
    assert a.read_at == clock.now


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str) -> int | None:
    return http_status(url, timeout=5)


def test_a_standby_answers_the_probe_while_it_can_read_the_lease(clock: FakeClock) -> None:
    lease = Lease()
    elector, view = candidate(lease, "a", clock)
    port = free_port()
    with standby_health(f"http://127.0.0.1:{port}/healthz", elector):
        url = f"http://127.0.0.1:{port}/healthz"
        assert status(url) == 503  # never read the Lease yet
        view.read()
        elector.try_once()
        assert status(url) == 200
        assert status(f"http://127.0.0.1:{port}/other") == 503
        clock.tick(T.lease_duration)
        assert status(url) == 503  # cannot reach the API server for a whole Lease period
    with socket.socket() as s:  # the port is free again for kopf's own endpoint (aiohttp reuses addresses)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


class Shards:
    """This operator's Leases in one namespace; each records the shard count of its last writer."""

    def __init__(self) -> None:
        self.leases: dict[str, Lease] = {}
        self.counts: dict[str, int] = {}

    def candidate(self, name: str, shard: str, clock: FakeClock) -> Elector:
        mine = sharding.Shard.parse(shard)
        lease_name = mine.lease_name("mro")
        lease = self.leases.setdefault(lease_name, Lease())
        world = self

        class Writer(View):
            def _write(self, record: leases.Record) -> str:
                world.counts[lease_name] = mine.count
                return super()._write(record)

        def peers() -> dict[str, tuple[leases.Record, int]]:
            return {
                n: (held.record, self.counts[n])
                for n, held in self.leases.items()
                if n != lease_name and held.record is not None
            }

        wall = datetime.fromtimestamp(clock.now, UTC)
        return Elector(Writer(lease), name, T, clock=clock, wall=lambda: wall, shard=mine, peers=peers)


def test_shards_of_one_count_all_act(clock: FakeClock) -> None:
    world = Shards()
    electors = [world.candidate(f"p{i}", f"{i}/3", clock) for i in range(3)]
    assert [e.attempt() for e in electors] == [(True, [])] * 3


def test_a_new_shard_count_waits_until_the_old_one_has_stopped(clock: FakeClock) -> None:
    world = Shards()
    old = [world.candidate(f"old{i}", f"{i}/3", clock) for i in range(3)]
    assert all(e.attempt()[0] for e in old)
    new0 = world.candidate("new0", "0/2", clock)  # same Lease name as old0: a standby there
    new1 = world.candidate("new1", "1/2", clock)
    assert new0.attempt() == (False, ["mro-shard-1", "mro-shard-2"])
    assert new1.attempt() == (False, ["mro-shard-0", "mro-shard-2"])
    for e in old:  # the old ones keep acting meanwhile (rule 4)
        clock.tick(0.5)
        assert e.renew_once() is None
    old[0].release()
    old[1].release()  # a rolling update stops them one by one
    held, blockers = new0.attempt()
    assert (held, blockers) == (False, ["mro-shard-2"])
    assert world.leases["mro-shard-0"].writes == ["old0", "old0", ""]  # blocked: never even taken
    old[2].release()
    assert new0.attempt() == (True, [])
    assert new1.attempt() == (True, [])


def test_a_killed_old_shard_blocks_for_one_lease_duration_by_our_clock(clock: FakeClock) -> None:
    world = Shards()
    old = world.candidate("old", "0/1", clock)
    assert old.attempt()[0]  # then SIGKILL: it never renews nor releases
    new = world.candidate("new", "1/2", clock)
    waited = 0.0
    while not new.attempt()[0]:
        clock.tick(1.0)
        waited += 1.0
    assert T.lease_duration <= waited <= T.lease_duration + 1


def test_two_counts_starting_together_never_both_act(clock: FakeClock) -> None:
    world = Shards()
    a = world.candidate("a", "0/3", clock)
    b = world.candidate("b", "1/2", clock)
    # Interleaved: both read no blockers, both take their Lease, then both look again.
    assert a.blockers() == []
    assert b.blockers() == []
    assert a.try_once()
    assert b.try_once()
    assert a.blockers() == ["mro-shard-1"]
    assert b.blockers() == ["mro-shard-0"]
    # Whatever the order of the steps back, at most one acts afterwards.
    a.release()
    assert b.attempt() == (True, [])
    assert a.attempt() == (False, ["mro-shard-1"])


def test_a_peer_list_that_fails_blocks(clock: FakeClock) -> None:
    lease = Lease()

    def fail() -> dict[str, tuple[leases.Record, int]]:
        raise ConnectionError("the API server is unreachable")

    e = Elector(View(lease), "a", T, clock=clock, shard=sharding.Shard(0, 2), peers=fail)
    assert e.attempt() == (False, ["(the Leases could not be listed)"])
    assert lease.writes == []
