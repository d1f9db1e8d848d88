"""Small builders for tests that drive the reporting step or the shell: resources, contexts, conditions.

`signature` reads what a pass reported (its Events and conditions) as comparable strings, so a table
row can state all of it at once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runner_operator import outcomes, resource

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CLUSTER = "00000000-0000-4000-8000-000000000001"
ZONE = "us-east-04a"


def metadata(**extra: Any) -> dict[str, Any]:
    """A ManagedRunner's metadata as kopf hands it over once the first cycle added the finalizer."""
    return {
        "name": "r",
        "namespace": "ns",
        "uid": "u-1",
        "generation": 1,
        "finalizers": [resource.FINALIZER],
        **extra,
    }


def body(
    runner_id: str = "r1",
    *,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    deleting: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    """A ManagedRunner body as kopf hands it over; `spec` keys are camelCase."""
    meta = metadata(generation=generation)
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T11:59:00Z"
    return {
        "metadata": meta,
        "spec": {"runnerId": runner_id, "clusterId": CLUSTER, "zone": ZONE, "policy": {}, **spec},
        "status": dict(status or {}),
    }


def managed(runner_id: str = "r1", **kw: Any) -> resource.ManagedRunnerResource:
    return resource.ManagedRunnerResource.from_body(body(runner_id, **kw))


def context(**kw: Any) -> outcomes.Context:
    kw.setdefault("now", T0)
    kw.setdefault("deletion_timeout", 600)
    return outcomes.Context(**kw)


def conds(*entries: tuple[str, str, str]) -> list[dict[str, Any]]:
    """Stored conditions from (type, status, reason) triples, as an earlier pass wrote them."""
    return [
        {"type": t, "status": s, "reason": r, "message": "", "lastTransitionTime": "2026-12-02T11:00:00Z"}
        for t, s, r in entries
    ]


def signature(outcome: outcomes.Outcome) -> set[str]:
    """Every reason the outcome reports, where: `Event:<type>:<reason>` or `<condition>:<status>:<reason>`."""
    found = {f"Event:{e.type}:{e.reason}" for e in outcome.events}
    found |= {f"{c.type}:{c.status}:{c.reason}" for c in outcome.status.conditions or ()}
    return found


def fields(outcome: outcomes.Outcome, *paths: str) -> dict[str, Any]:
    """Dotted status paths (`deletion.stalled`) and the outcome flags (`release`, `terminal`, `retry_after`).

    A path the patch does not set reads as the string "<unset>" (None would mean "written as null").
    """
    patch: dict[str, Any] = {
        **outcome.status.to_patch(),
        "release": outcome.release,
        "terminal": outcome.terminal,
        "retry_after": outcome.retry_after,
    }
    found: dict[str, Any] = {}
    for path in paths:
        value: Any = patch
        for key in path.split("."):
            value = value.get(key, UNSET) if isinstance(value, dict) else UNSET
        found[path] = value
    return found


UNSET = "<unset>"
