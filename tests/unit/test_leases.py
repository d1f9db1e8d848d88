"""Leader election decisions (runner_operator.leases): who may write the Lease, from what was read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runner_operator.leases import Record, Seen, Timing, claim, free, observe, released, wait_before_retry

T = Timing()
WALL = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
HELD = Record(holder="a", lease_duration=15, acquire_time=WALL, renew_time=WALL, transitions=2)

FREE: dict[str, tuple[Record | None, str, float, bool]] = {
    # (record, candidate, seconds since the record was first seen as it is, free?)
    "no-lease": (None, "b", 0, True),
    "released": (Record(holder="", lease_duration=1), "b", 0, True),
    "own": (HELD, "a", 0, True),
    "held-and-fresh": (HELD, "b", 0, False),
    "held-just-before-expiry": (HELD, "b", 14.9, False),
    "held-and-expired": (HELD, "b", 15, True),
    "short-lease-expired": (Record(holder="a", lease_duration=5), "b", 5, True),
}


@pytest.mark.parametrize(("record", "me", "age", "expected"), FREE.values(), ids=FREE.keys())
def test_who_may_take_the_lease(record: Record | None, me: str, age: float, expected: bool) -> None:
    assert free(Seen(record, 100.0), me, 100.0 + age) is expected


def test_age_counts_from_when_this_process_first_saw_the_record() -> None:
    """Never from the record's own timestamps: another node's clock may be hours off."""
    stale_stamp = Record(holder="a", lease_duration=15, renew_time=datetime(2001, 1, 1, tzinfo=UTC))
    seen = observe(None, stale_stamp, now=100.0)
    assert not free(seen, "b", 110.0)
    seen = observe(seen, stale_stamp, now=110.0)  # unchanged: keeps ageing from 100
    assert seen.at == 100.0
    assert free(seen, "b", 115.0)
    renewed = Record(holder="a", lease_duration=15, renew_time=datetime(2001, 1, 1, 0, 0, 2, tzinfo=UTC))
    seen = observe(seen, renewed, now=116.0)  # renewed: young again
    assert seen.at == 116.0
    assert not free(seen, "b", 130.0)


def test_claiming_a_new_lease_creates_it_with_no_transition() -> None:
    wanted = claim(Seen(None, 0.0), "a", 0.0, WALL, T)
    assert wanted == Record(holder="a", lease_duration=15, acquire_time=WALL, renew_time=WALL, transitions=0)


def test_renewing_keeps_the_acquire_time_and_moves_the_renew_time() -> None:
    later = datetime(2026, 12, 3, 12, 0, 2, tzinfo=UTC)
    wanted = claim(Seen(HELD, 0.0), "a", 1.0, later, T)
    assert wanted == Record(holder="a", lease_duration=15, acquire_time=WALL, renew_time=later, transitions=2)


def test_taking_over_counts_a_transition() -> None:
    later = datetime(2026, 12, 3, 12, 1, tzinfo=UTC)
    wanted = claim(Seen(HELD, 0.0), "b", 15.0, later, T)
    assert wanted == Record(
        holder="b", lease_duration=15, acquire_time=later, renew_time=later, transitions=3
    )
    assert claim(Seen(HELD, 0.0), "b", 14.0, later, T) is None


def test_release_hands_over_only_our_own_lease() -> None:
    later = datetime(2026, 12, 3, 12, 0, 3, tzinfo=UTC)
    assert released(HELD, "a", later) == Record(
        holder="", lease_duration=1, acquire_time=WALL, renew_time=later, transitions=2
    )
    assert released(HELD, "b", later) is None


def test_a_standby_wakes_when_the_lease_expires_not_a_period_later() -> None:
    assert wait_before_retry(Seen(HELD, 100.0), "b", 100.0, T) == T.retry_period / 2
    assert wait_before_retry(Seen(HELD, 100.0), "b", 114.5, T) == pytest.approx(0.5)
    assert wait_before_retry(Seen(HELD, 100.0), "b", 120.0, T) == pytest.approx(0.05)
    assert wait_before_retry(Seen(HELD, 100.0), "a", 114.5, T) == T.retry_period


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"), [(10, 10, 2), (15, 2, 2), (15, 10, 0), (5, 10, 2)]
)
def test_timings_that_could_let_two_act_are_refused(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError, match="lease duration > renew deadline > retry period"):
        Timing(duration, deadline, retry)
