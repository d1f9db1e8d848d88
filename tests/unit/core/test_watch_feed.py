"""The watch feed: a shard schedules only its own objects, a new spec is due at once, and kopf
itself writes nothing (no change handler, no diff-base)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf
import pytest

from runner_operator import handlers
from runner_operator.cadence import Cadence
from runner_operator.indexing import Indexes, Startup
from runner_operator.outcomes import Outcome
from runner_operator.scheduling import Bodies
from runner_operator.settings import Settings
from runner_operator.sharding import Shard, shard_of
from runner_operator.status import StatusPatch
from runner_operator.unsent import UnsentKeys


class FakeScheduler:
    def __init__(self) -> None:
        self.added: list[str] = []
        self.delays: list[float] = []

    def start(self) -> None:
        return None

    def add(self, uid: str, delay: float) -> None:
        self.added.append(uid)
        self.delays.append(delay)

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
    memo.unsent = UnsentKeys()
    for name in NAMES:
        await seen(type="ADDED", body=kopf.Body(cast(Any, _body(name))), memo=memo)
    mine = [f"uid-{n}" for n in NAMES if shard_of("team", n, 3) == index]
    assert memo.scheduler.added == mine
    assert mine  # the split is not empty for any shard of these names
    assert all(memo.bodies.get(f"uid-{n}") is None for n in NAMES if f"uid-{n}" not in mine)
    assert len(memo.indexes) == len(NAMES)  # the cluster-claims indexes still see every object


def test_kopf_has_no_change_handler_and_keeps_no_diff_base() -> None:
    """kopf stores what a change handler last handled (a status write at every creation) and copies
    every watched object to compare: with no such handler, neither is needed nor done."""
    resource = kopf.Resource(handlers.GROUP, handlers.VERSION, handlers.PLURAL)
    registry = kopf.get_default_registry()
    assert registry._watching.has_handlers(resource=resource)  # `seen`: the feed is registered
    assert not registry._changing.has_handlers(resource=resource)
    kopf_settings = kopf.OperatorSettings()
    handlers.tune(kopf_settings, Settings.from_env({}))
    storage = kopf_settings.persistence.diffbase_storage
    for name in NAMES:
        body, patch = kopf.Body(cast(Any, _body(name))), kopf.Patch()
        assert storage.build(body=body) == {}
        assert storage.fetch(body=body) is None
        storage.store(body=body, patch=patch, essence=kopf.BodyEssence(spec={"x": 1}))
        assert not patch


def _memo() -> kopf.Memo:
    memo = kopf.Memo()
    memo.bodies, memo.indexes, memo.scheduler = Bodies(), Indexes(), FakeScheduler()
    memo.startup, memo.started = Startup(listed=True), asyncio.Event()
    memo.unsent = UnsentKeys()
    return memo


def _ready(generation: int, observed: int) -> dict[str, Any]:
    body = _body("r0")
    body["metadata"]["generation"] = generation
    body["metadata"]["finalizers"] = [handlers.FINALIZER]
    body["status"] = {
        "runnerId": "r0",
        "observedGeneration": observed,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available"},
            {"type": "Synced", "status": "True", "reason": "Synced", "observedGeneration": observed},
        ],
    }
    return body


async def test_a_new_spec_is_due_at_once_and_reads_its_secrets_once() -> None:
    memo = _memo()
    for body in (_ready(1, 1), _ready(1, 1), _ready(2, 1)):
        await seen(type="MODIFIED", body=kopf.Body(cast(Any, body)), memo=memo)
    first, status_only, edited = memo.scheduler.delays
    assert 0 < first <= handlers.CONFIG.resync_interval  # a Ready object: anywhere in one resync
    assert (status_only, edited) == (handlers.INTERVALS.resync, 0.0)
    assert memo.bodies.take_new_spec("uid-r0")  # the pass for generation 2 reads Secrets now
    assert not memo.bodies.take_new_spec("uid-r0")  # once
    await seen(type="MODIFIED", body=kopf.Body(cast(Any, _ready(2, 2))), memo=memo)  # its status write
    assert memo.scheduler.delays[-1] == handlers.INTERVALS.resync
    assert not memo.bodies.take_new_spec("uid-r0")


async def test_a_spec_changed_while_the_operator_was_down_is_due_at_once_at_start() -> None:
    memo = _memo()
    await seen(type="ADDED", body=kopf.Body(cast(Any, _ready(3, 2))), memo=memo)
    other = _ready(2, 2)
    other["metadata"]["uid"] = "uid-b"
    await seen(type="ADDED", body=kopf.Body(cast(Any, other)), memo=memo)
    changed, steady = memo.scheduler.delays
    assert changed == 0.0
    assert steady > 0
    assert memo.bodies.take_new_spec("uid-r0")
    assert not memo.bodies.take_new_spec("uid-b")


def test_unsharded_owns_everything() -> None:
    assert Shard() == handlers.SHARD
    assert all(handlers.owned(_body(n)) for n in NAMES)


@pytest.mark.parametrize("changed", [True, False])
def test_kopfs_bookkeeping_from_earlier_releases_goes_with_the_next_status_write(changed: bool) -> None:
    body = _ready(1, 1)
    body["status"]["kopf"] = {"lastHandled": '{"spec": {}}', "progress": {}}
    status = StatusPatch(observed_generation=2 if changed else 1)
    patch = kopf.Patch()
    handlers._apply(kopf.Body(cast(Any, body)), patch, Outcome(status=status))
    if changed:
        assert patch.status == {"observedGeneration": 2, "kopf": None}
    else:
        assert not patch  # no write of its own: thousands of objects would each cost one at an upgrade


async def test_the_pass_for_a_new_spec_reads_its_secrets_now_against_a_recent_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memo, asked = _memo(), list[tuple[float, bool]]()

    async def fake_pass(
        body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, max_age: float, **kw: Any
    ) -> Outcome:
        asked.append((max_age, kw["fresh"]))
        return Outcome(StatusPatch())

    monkeypatch.setattr(handlers, "_pass", fake_pass)
    for generation in (1, 2):
        await seen(type="MODIFIED", body=kopf.Body(cast(Any, _ready(generation, 1))), memo=memo)
        await handlers._scheduled_pass(memo, "uid-r0")
    await handlers._scheduled_pass(memo, "uid-r0")
    steady = handlers.INTERVALS.freshness(Cadence.SLOW)
    assert asked == [(steady, False), (handlers.CONFIG.fast_interval, True), (steady, False)]


async def test_a_deletion_moves_the_generation_but_is_no_new_spec() -> None:
    """The API server moves the generation when it sets deletionTimestamp on an object with finalizers:
    the deletion pass is due at once, but reads Secrets shared (a mass deletion: one read, not N)."""
    memo = _memo()
    deleting = _ready(2, 1)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    for body in (_ready(1, 1), deleting):
        await seen(type="MODIFIED", body=kopf.Body(cast(Any, body)), memo=memo)
    assert memo.scheduler.delays[-1] == 0.0
    assert not memo.bodies.take_new_spec("uid-r0")


@pytest.mark.parametrize("newer_meanwhile", [False, True])
async def test_a_pass_unpacks_its_body_once_unless_a_newer_one_came_while_it_waited(
    newer_meanwhile: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo, unpacked, acted_on = _memo(), list[str](), list[dict[str, Any] | None]()
    bodies: Bodies = memo.bodies
    real_get = bodies.get

    def counting_get(uid: str) -> dict[str, Any] | None:
        unpacked.append(uid)
        return real_get(uid)

    def versioned(generation: int, version: str) -> kopf.Body:
        body = _ready(generation, 1)
        body["metadata"]["resourceVersion"] = version
        return kopf.Body(cast(Any, body))

    async def fake_pass(
        body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, max_age: float, **kw: Any
    ) -> Outcome:
        if newer_meanwhile:  # as if the pass had waited on the object's lock
            await seen(type="MODIFIED", body=versioned(2, "6"), memo=memo)
        acted_on.append(kw["latest"]())
        return Outcome(StatusPatch())

    monkeypatch.setattr(bodies, "get", counting_get)
    monkeypatch.setattr(handlers, "_pass", fake_pass)
    await seen(type="MODIFIED", body=versioned(1, "5"), memo=memo)
    await handlers._scheduled_pass(memo, "uid-r0")
    assert len(unpacked) == (2 if newer_meanwhile else 1)
    assert acted_on[0] is not None
    assert acted_on[0]["metadata"]["generation"] == (2 if newer_meanwhile else 1)


@pytest.mark.parametrize(
    ("event", "finalizers", "forgotten"),
    [
        ("DELETED", [handlers.FINALIZER], True),
        ("MODIFIED", [], True),  # deleting, our finalizer released: nothing more will be done
        ("MODIFIED", [handlers.FINALIZER], False),  # still ours: a stale pass must see nothing went out
    ],
)
async def test_the_unsent_record_goes_only_with_the_resource(
    event: str, finalizers: list[str], forgotten: bool
) -> None:
    memo = _memo()
    memo.unsent.reserved("uid-r0", "k1")
    body = _body("r0")
    body["metadata"].update(finalizers=finalizers, deletionTimestamp="2026-12-07T12:00:00Z")
    await seen(type=event, body=kopf.Body(cast(Any, body)), memo=memo)
    assert memo.unsent.holds("uid-r0", "k1") is not forgotten
