"""What the handler layer does to keep kopf's per-object memory small."""

from __future__ import annotations

from typing import Any, cast

import kopf
import pytest

from runner_operator import handlers
from runner_operator.settings import Settings


def test_kopf_bodies_lose_their_managed_fields() -> None:
    raw: dict[str, Any] = {
        "metadata": {"name": "r", "uid": "u", "managedFields": [{"manager": "kubectl", "fieldsV1": {}}]},
        "spec": {"runnerId": "x"},
    }
    body = kopf.Body(_raw_body(raw))
    assert handlers.drop_managed_fields(body), "kopf's Body no longer wraps a plain dict: revisit this"
    assert "managedFields" not in raw["metadata"]
    assert "managedFields" not in body.metadata
    assert body.metadata["name"] == "r"
    assert body.spec["runnerId"] == "x"


def test_a_body_without_managed_fields_is_left_as_it_is() -> None:
    raw: dict[str, Any] = {"metadata": {"name": "r"}}
    assert handlers.drop_managed_fields(kopf.Body(_raw_body(raw)))
    assert raw == {"metadata": {"name": "r"}}


def _raw_body(raw: dict[str, Any]) -> kopf.RawBody:
    """The API server's JSON as kopf's type for it; kopf's RawMeta does not list managedFields."""
    return cast(kopf.RawBody, raw)


@pytest.mark.parametrize(("chunk", "expected"), [(100, 100), (7, 7), (0, None)])
def test_the_list_at_start_is_read_in_pages_of_the_setting(chunk: int, expected: int | None) -> None:
    """kopf lists every object in one answer unless told a page size: at 10,000 ManagedRunners that
    one parse took a restarted operator to 871 MB (bench/RESULTS.md). 0 keeps kopf's one list."""
    kopf_settings = kopf.OperatorSettings()
    assert kopf_settings.watching.chunk_size is None  # kopf's default, which this setting overrides
    handlers.tune(kopf_settings, Settings.from_env({"RUNNER_OPERATOR_LIST_CHUNK_SIZE": str(chunk)}))
    assert kopf_settings.watching.chunk_size == expected
    assert kopf_settings.persistence.finalizer == handlers.KOPF_FINALIZER


def test_kopf_workers_exit_soon_after_their_last_event() -> None:
    """An idle worker keeps its object's last body: kopf's 5 s held every body of a restart at once."""
    kopf_settings = kopf.OperatorSettings()
    default = kopf_settings.queueing.idle_timeout
    handlers.tune(kopf_settings, Settings.from_env({}))
    assert kopf_settings.queueing.idle_timeout == handlers.WORKER_IDLE_SECONDS < default


async def test_every_object_shares_the_operators_memo() -> None:
    """kopf keeps a memo per object for the life of the process; a copy of this one was ~0.5 KB each."""
    from kopf._core.reactor.inventory import ResourceMemories

    memories: Any = ResourceMemories()
    shared, plain = handlers.SharedMemo(keys={}), kopf.Memo(keys={})
    first = await memories.recall({"metadata": {"uid": "a"}}, memobase=shared)
    second = await memories.recall({"metadata": {"uid": "b"}}, memobase=shared)
    assert first.memo is shared
    assert second.memo is shared
    copied = await memories.recall({"metadata": {"uid": "c"}}, memobase=plain)
    assert copied.memo is not plain
    assert copied.memo == plain
