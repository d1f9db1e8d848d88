"""The work queue of due passes: dedupe, held re-adds, per-(lane, group) limits, backoff, forget."""

from __future__ import annotations

import pytest

from runner_operator.workqueue import Backoff, Slot, WorkQueue


def test_a_key_is_queued_once_and_the_earlier_due_time_wins() -> None:
    q = WorkQueue()
    q.add("a", 10)
    q.add("a", 5)
    q.add("a", 20)
    assert len(q) == 1
    assert q.due_at("a") == 5
    assert q.take(4) == []
    assert q.take(5) == ["a"]
    assert q.take(100) == [], "a running key is not handed out twice"


def test_keys_come_out_in_due_order_and_only_when_due() -> None:
    q = WorkQueue()
    for key, at in [("c", 3), ("a", 1), ("b", 2), ("later", 50)]:
        q.add(key, at)
    assert q.next_due() == 1
    assert q.take(3) == ["a", "b", "c"]
    assert q.next_due() == 50


def test_an_add_while_running_is_held_and_queued_when_the_pass_ends() -> None:
    q = WorkQueue()
    q.add("a", 0)
    assert q.take(0) == ["a"]
    q.add("a", 1)  # the watch saw a change while the pass ran
    assert q.take(1) == [], "never two passes at once for one key"
    q.done("a", now=2, after=60)
    assert q.due_at("a") == 1, "the held wake-up beats the pass's own next look"
    assert q.take(2) == ["a"]


def test_done_schedules_the_next_look_or_nothing() -> None:
    q = WorkQueue()
    q.add("a", 0)
    q.add("b", 0)
    assert q.take(0) == ["a", "b"]
    q.done("a", now=1, after=30)
    q.done("b", now=1, after=None)
    assert q.due_at("a") == 31
    assert q.due_at("b") is None
    assert len(q) == 1


@pytest.mark.parametrize(
    ("limit", "groups", "expected"),
    [
        (2, ["x", "x", "x", "y", "y"], ["x0", "x1", "y3", "y4"]),
        (1, ["x", "x", "y"], ["x0", "y2"]),
        (5, ["x", "x"], ["x0", "x1"]),
    ],
)
def test_each_group_in_a_limited_lane_has_its_own_room(
    limit: int, groups: list[str], expected: list[str]
) -> None:
    """Fairness per credential: one credential's creation backlog never takes another's turns."""
    q = WorkQueue(limits={"create": limit})
    for i, group in enumerate(groups):
        q.add(f"{group}{i}", float(i), Slot("create", group))
    assert sorted(q.take(100)) == sorted(expected)


def test_a_freed_slot_lets_the_next_key_of_that_group_run() -> None:
    q = WorkQueue(limits={"create": 1})
    q.add("a", 0, Slot("create", "g"))
    q.add("b", 0, Slot("create", "g"))
    assert q.take(0) == ["a"]
    assert q.next_due() is None, "b is due but has no room: nothing to wake for until a pass ends"
    q.done("a", now=1, after=None, slot=Slot("steady"))
    assert q.take(1) == ["b"]


def test_unlimited_lanes_never_wait_on_a_limited_one() -> None:
    q = WorkQueue(limits={"create": 1})
    q.add("c1", 0, Slot("create", "g"))
    q.add("c2", 0, Slot("create", "g"))
    q.add("s", 1, Slot("steady", "g"))
    assert q.take(0) == ["c1"]
    assert q.take(1) == ["s"]


def test_first_keys_are_taken_before_a_backlog_due_earlier() -> None:
    """A create whose key is reserved is not queued behind thousands of objects not yet looked at
    (at N = 10,000, every reservation ran before the first create)."""
    q = WorkQueue(limits={"create": 2})
    for i in range(5):
        q.add(f"new{i}", float(i), Slot("create", "g"))
    q.add("reserved", 3.5, Slot("create", "g", first=True))
    q.add("other-credential", 0, Slot("create", "h"))
    q.add("later", 50, Slot("create", "g", first=True))
    assert q.take(10) == ["new0", "other-credential", "reserved"], "new1 waits: reserved took its room"
    q.done("new0", now=11, after=None)
    assert q.take(11) == ["new1"], "then the backlog in due order; a first key not yet due waits"
    q.done("reserved", now=12, after=None)
    q.done("new1", now=12, after=None)
    assert q.take(60) == ["new2", "later"]


def test_becoming_first_moves_a_queued_key_ahead_without_a_second_entry() -> None:
    q = WorkQueue(limits={"create": 1})
    q.add("a", 0, Slot("create", "g"))
    q.add("b", 1, Slot("create", "g"))
    q.add("b", 1, Slot("create", "g", first=True))
    assert len(q) == 2
    assert q.take(2) == ["b"]
    q.done("b", now=2, after=None)
    assert q.take(2) == ["a"]
    assert q.take(100) == []


def test_moving_a_key_to_another_lane_keeps_one_entry() -> None:
    q = WorkQueue(limits={"create": 1})
    q.add("a", 5, Slot("create", "g"))
    q.add("a", 10, Slot("steady"))
    assert len(q) == 1
    assert q.take(5) == ["a"], "the earlier due time is kept across the move"
    assert q.take(100) == []


def test_failures_back_off_exponentially_up_to_the_cap() -> None:
    q = WorkQueue(backoff=Backoff(base=1, cap=8))
    q.add("a", 0)
    now, delays = 0.0, []
    for _ in range(6):
        assert q.take(now) == ["a"]
        delays.append(q.failed("a", now, jitter=0.999999))
        now += delays[-1]
    assert [round(d) for d in delays] == [1, 2, 4, 8, 8, 8]


def test_failed_requeues_after_the_backoff() -> None:
    q = WorkQueue(backoff=Backoff(base=2, cap=100))
    q.add("a", 0)
    q.take(0)
    first = q.failed("a", now=10, jitter=0.0)
    assert first == 1.0, "half the first step with no jitter"
    assert q.due_at("a") == 11
    q.take(11)
    second = q.failed("a", now=11, jitter=0.0)
    assert second == 2.0
    q.take(13)
    q.done("a", now=14, after=60)
    q.take(74)
    assert q.failed("a", now=74, jitter=0.0) == 1.0, "a normal end resets the count"


def test_forget_drops_a_queued_key_and_ends_a_running_one_without_requeueing() -> None:
    q = WorkQueue()
    q.add("queued", 5)
    q.add("running", 0)
    assert q.take(0) == ["running"]
    q.forget("queued")
    q.forget("running")
    q.add("running", 1)  # an event for an object that is going away
    q.forget("running")
    q.done("running", now=2, after=30)
    assert q.take(1000) == []
    assert len(q) == 0
    assert q.due_at("running") is None


def test_backoff_is_capped_and_jitter_stays_in_the_upper_half() -> None:
    b = Backoff(base=1, cap=60)
    assert b.delay(1, 0.0) == 0.5
    assert b.delay(1, 0.999) < 1.0
    assert b.delay(20, 0.0) == 30.0
    assert b.delay(20, 0.999) < 60.0
