"""The process's record of create keys it reserved and has not sent (docs/safety.md rule 6)."""

from __future__ import annotations

from runner_operator.unsent import UnsentKeys


def test_a_reserved_key_is_unsent_until_its_create_goes_out() -> None:
    keys = UnsentKeys()
    assert not keys.holds("uid", "k1")
    keys.reserved("uid", "k1")
    assert keys.holds("uid", "k1")
    assert not keys.holds("uid", "k2")
    assert not keys.holds("other", "k1")
    assert not keys.holds("uid", None)
    keys.sending("uid", "k1")
    assert not keys.holds("uid", "k1")


def test_a_sent_key_reserved_again_from_a_stale_status_stays_sent() -> None:
    keys = UnsentKeys()
    keys.reserved("uid", "k1")
    keys.sending("uid", "k1")
    keys.reserved("uid", "k1")  # a pass that read a status older than the reservation
    assert not keys.holds("uid", "k1")
    keys.sending("uid", "k3")  # reserved by the last process, sent by this one: sent, whatever comes
    keys.reserved("uid", "k3")
    assert not keys.holds("uid", "k3")
    keys.reserved("uid", "k2")  # a new key (another runner ID or recreation) is unsent
    assert keys.holds("uid", "k2")


def test_forget_drops_both_records() -> None:
    keys = UnsentKeys()
    keys.reserved("a", "k1")
    keys.reserved("b", "k2")
    keys.sending("b", "k2")
    assert len(keys) == 2
    keys.forget("a")
    keys.forget("b")
    assert len(keys) == 0
    keys.reserved("b", "k2")
    assert keys.holds("b", "k2")
