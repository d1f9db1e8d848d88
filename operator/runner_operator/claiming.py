"""Which ManagedRunner may manage a runner ID when several name it (pure).

The operator's handlers index every ManagedRunner's claim; `runner-operator plan` lists them from
the cluster. Both decide here, so a plan says DuplicateRunnerId exactly when the operator would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Claim = tuple[int, str, str, str]
"""(0 if its status holds the runner else 1, creationTimestamp, namespace/name, uid): smallest wins."""

PLANNED_UID = "00000000-0000-0000-0000-000000000000"
"""The uid of a manifest not applied yet, as `runner-operator plan` sees it."""
NOT_CREATED = "~"
"""The creationTimestamp of a manifest not applied yet: after every real one (ISO 8601 sorts below it)."""


def claim(body: Mapping[str, Any]) -> tuple[str, Claim]:
    """runnerId -> this ManagedRunner's claim on it, read raw (a spec this version cannot parse counts)."""
    meta: Mapping[str, Any] = body.get("metadata") or {}
    spec: Mapping[str, Any] = body.get("spec") or {}
    status: Mapping[str, Any] = body.get("status") or {}
    runner_id = str(spec.get("runnerId"))
    holds = 0 if status.get("runnerId") == runner_id else 1
    created = str(meta.get("creationTimestamp") or NOT_CREATED)
    return runner_id, (holds, created, f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("uid")))


def claimed_by(runner_id: str, namespace: str, uid: str, entries: Iterable[Claim]) -> str | None:
    """Another resource that holds, or first claimed, the same runner ID.

    One in another namespace is not named: that is another team's resource (tenancy).
    """
    found = list(entries)
    if not any(entry[3] != uid for entry in found):
        return None
    first = min(found)
    if first[3] == uid:
        return None
    where = str(first[2])
    return where if where.partition("/")[0] == namespace else "in another namespace"
