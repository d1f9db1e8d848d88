"""A shard leaves other shards' objects alone: no pass scheduled, no kopf diff-base stored."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf
import pytest

from runner_operator import handlers
from runner_operator.indexing import Indexes, Startup
from runner_operator.scheduling import Bodies
from runner_operator.sharding import Shard, shard_of


class FakeScheduler:
    def __init__(self) -> None:
        self.added: list[str] = []

    def start(self) -> None:
        return None

    def add(self, uid: str, delay: float) -> None:
        self.added.append(uid)

    def forget(self, uid: str) -> None:
        return None


def _body(name: str) -> dict[str, Any]:
    meta = {"uid": f"uid-{name}", "namespace": "team", "name": name, "finalizers": [], "generation": 1}
    return {"metadata": meta, "spec": {"runnerId": name}, "status": {}}


NAMES = [f"r{i}" for i in range(30)]
seen = cast(Any, handlers.seen)  # kopf's decorator types it as its callback protocol


@pytest.mark.parametrize("index", [0, 1, 2])
async def test_seen_schedules_only_this_shards_objects(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "SHARD", Shard(index, 3))
    memo = kopf.Memo()
    memo.bodies, memo.indexes, memo.scheduler = Bodies(), Indexes(), FakeScheduler()
    memo.startup, memo.started = Startup(listed=True), asyncio.Event()
    for name in NAMES:
        await seen(type="ADDED", body=kopf.Body(cast(Any, _body(name))), memo=memo)
    mine = [f"uid-{n}" for n in NAMES if shard_of("team", n, 3) == index]
    assert memo.scheduler.added == mine
    assert mine  # the split is not empty for any shard of these names
    assert all(memo.bodies.get(f"uid-{n}") is None for n in NAMES if f"uid-{n}" not in mine)
    assert len(memo.indexes) == len(NAMES)  # the cluster-claims indexes still see every object


@pytest.mark.parametrize("index", [0, 1, 2])
def test_kopfs_diff_base_is_stored_only_for_this_shards_objects(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handlers, "SHARD", Shard(index, 3))
    storage = handlers.ShardDiffBase(field="status.kopf.lastHandled")
    stored = []
    for name in NAMES:
        patch = kopf.Patch()
        storage.store(
            body=kopf.Body(cast(Any, _body(name))), patch=patch, essence=kopf.BodyEssence(spec={"x": 1})
        )
        if patch:
            stored.append(name)
    assert stored == [n for n in NAMES if shard_of("team", n, 3) == index]


def test_unsharded_owns_everything() -> None:
    assert Shard() == handlers.SHARD
    assert all(handlers.owned(_body(n)) for n in NAMES)
