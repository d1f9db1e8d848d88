"""The operator's own indexes (runner claims, Secret users) and the gate that holds passes at a start.

Rules: an object is filed under what its latest body says and nothing else; a deleted object claims
and uses nothing; no pass runs before every object that existed at start is indexed, and an object
listed at start but deleted before the watch saw it stops holding its claim once a list says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runner_operator import claiming, handlers
from runner_operator.indexing import Indexes, Startup, secret_users
from runner_operator.unsent import UnsentKeys


def _body(
    uid: str,
    runner_id: str = "r1",
    *,
    held: bool = False,
    secret: str | None = "tok",
    protected: str | None = None,
    deleting: bool = False,
    name: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "uid": uid,
        "namespace": "team",
        "name": name or f"n-{uid}",
        "creationTimestamp": f"2026-01-0{uid[-1]}T00:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    spec: dict[str, Any] = {"runnerId": runner_id}
    if secret:
        spec["credentials"] = {"secretRef": {"name": secret}}
    status: dict[str, Any] = {"runnerId": runner_id} if held else {}
    if protected:
        status["credentialsSecret"] = protected
    return {"metadata": meta, "spec": spec, "status": status}


def test_claims_are_filed_by_runner_id_and_the_holder_wins() -> None:
    idx = Indexes()
    idx.put(_body("u1"))
    idx.put(_body("u2", held=True))
    assert sorted(e[3] for e in idx.claims["r1"]) == ["u1", "u2"]
    assert claiming.claimed_by("r1", "team", "u1", idx.claims["r1"]) == "team/n-u2"
    assert claiming.claimed_by("r1", "team", "u2", idx.claims["r1"]) is None


def test_a_changed_runner_id_moves_the_claim_and_leaves_no_trace() -> None:
    idx = Indexes()
    idx.put(_body("u1", "r1"))
    idx.put(_body("u1", "r2"))
    assert "r1" not in idx.claims
    assert [e[3] for e in idx.claims["r2"]] == ["u1"]
    assert len(idx.claims) == 1


def test_a_deleted_object_claims_and_uses_nothing() -> None:
    idx = Indexes()
    idx.put(_body("u1", protected="old"))
    idx.put(_body("u2"))
    idx.forget("u1")
    assert [e[3] for e in idx.claims["r1"]] == ["u2"]
    assert "team/old" not in idx.users
    assert idx.users["team/tok"] == (("u2", False),)
    idx.forget("u2")
    idx.forget("u2")  # twice, or never seen: nothing to do
    assert not idx.claims
    assert not idx.users
    assert len(idx) == 0


@pytest.mark.parametrize(
    ("secret", "protected", "deleting", "expected"),
    [
        ("tok", None, False, {"team/tok": ("u1", False)}),
        ("tok", "old", True, {"team/tok": ("u1", True), "team/old": ("u1", True)}),
        ("tok", "tok", False, {"team/tok": ("u1", False)}),
        (None, None, False, {}),
    ],
)
def test_secret_users_are_the_spec_secret_and_the_protected_one(
    secret: str | None, protected: str | None, deleting: bool, expected: dict[str, Any]
) -> None:
    body = _body("u1", secret=secret, protected=protected, deleting=deleting)
    assert secret_users(body) == expected


def test_secret_users_read_a_malformed_spec_without_failing() -> None:
    body = _body("u1", secret=None)
    body["spec"]["credentials"] = {"secretRef": "not-a-map"}
    assert secret_users(body) == {}


def test_a_user_that_stops_naming_a_secret_is_no_longer_its_user() -> None:
    idx = Indexes()
    idx.put(_body("u1", secret="a"))
    idx.put(_body("u1", secret="b"))
    assert "team/a" not in idx.users
    assert idx.users["team/b"] == (("u1", False),)


def test_the_gate_opens_only_after_the_list_and_every_listed_object_delivered() -> None:
    gate = Startup()
    assert not gate.done  # nothing listed yet: nothing is known
    gate.expect("u1")
    gate.expect("u2")
    gate.listed = True
    gate.delivered("u1")
    assert not gate.done
    assert gate.pending == 1
    gate.delivered("u9")  # created after the list: not waited for
    gate.delivered("u2")
    assert gate.done


def test_a_listed_object_missing_from_a_later_list_is_gone() -> None:
    gate = Startup(listed=True)
    for uid in ("u1", "u2", "u3"):
        gate.expect(uid)
    gate.delivered("u1")
    assert gate.relisted(frozenset({"u1", "u3"})) == ["u2"]
    assert gate.pending == 1
    assert not gate.done


async def test_passes_wait_until_the_watch_delivered_every_listed_object() -> None:
    idx, gate, started = Indexes(), Startup(), asyncio.Event()
    await handlers.index_existing(idx, gate, lambda: [_body("u1"), _body("u2")], within=5)
    assert len(idx) == 2
    assert gate.listed
    settle = handlers.settle(gate, idx, started, lambda: [], every=0.01, relist_after=60)
    settling = asyncio.create_task(settle)
    gate.delivered("u1")
    await asyncio.sleep(0.05)
    assert not started.is_set()
    gate.delivered("u2")
    await asyncio.wait_for(settling, 1)
    assert started.is_set()
    assert len(idx) == 2


async def test_an_object_deleted_before_the_watch_saw_it_releases_its_claim() -> None:
    idx, gate, started = Indexes(), Startup(), asyncio.Event()
    await handlers.index_existing(idx, gate, lambda: [_body("u1", held=True), _body("u2")], within=5)
    gate.delivered("u2")
    assert claiming.claimed_by("r1", "team", "u2", idx.claims["r1"]) == "team/n-u1"
    relists: list[int] = []

    def later() -> list[dict[str, Any]]:
        relists.append(1)
        if len(relists) == 1:
            raise OSError("connection reset")  # a failed list is retried, it proves nothing
        return [_body("u2")]

    await asyncio.wait_for(handlers.settle(gate, idx, started, later, every=0.01, relist_after=0.02), 2)
    assert started.is_set()
    assert len(relists) == 2
    assert claiming.claimed_by("r1", "team", "u2", idx.claims["r1"]) is None


async def test_a_list_that_keeps_failing_at_start_stops_the_start() -> None:
    def broken() -> list[dict[str, Any]]:
        raise OSError("refused")

    with pytest.raises(Exception, match="listing managedrunners failed"):
        await handlers.index_existing(Indexes(), Startup(), broken, within=0)


class _Scheduler:
    def start(self) -> None:
        pass

    def add(self, key: str, delay: float) -> None:
        pass

    def forget(self, key: str) -> None:
        pass


async def test_the_watch_files_every_event_and_opens_the_gate_with_the_last_listed_object() -> None:
    from typing import cast

    import kopf

    from runner_operator.scheduling import Bodies

    seen = cast(Any, handlers.seen)
    memo = kopf.Memo()
    memo.bodies, memo.indexes, memo.scheduler = Bodies(), Indexes(), _Scheduler()
    memo.startup, memo.started = Startup(listed=True), asyncio.Event()
    memo.unsent = UnsentKeys()
    memo.startup.expect("u1")
    await seen(type="ADDED", body=kopf.Body(cast(Any, _body("u2"))), memo=memo)
    assert not memo.started.is_set()
    await seen(type=None, body=kopf.Body(cast(Any, _body("u1", held=True))), memo=memo)
    assert memo.started.is_set()
    assert claiming.claimed_by("r1", "team", "u2", memo.indexes.claims["r1"]) == "team/n-u1"
    await seen(type="DELETED", body=kopf.Body(cast(Any, _body("u1", held=True))), memo=memo)
    assert claiming.claimed_by("r1", "team", "u2", memo.indexes.claims["r1"]) is None
