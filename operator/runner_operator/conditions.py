"""Kubernetes-style status conditions as pure values, merged so lastTransitionTime only moves on a flip.

A merge patch replaces lists whole, so the operator always writes the full list computed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

READY = "Ready"
SYNCED = "Synced"
STALLED = "Stalled"
ORDER = (READY, SYNCED, STALLED)

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Condition:
    type: str
    status: Status
    reason: str
    message: str = ""


def merge(
    previous: Sequence[Mapping[str, Any]] | None,
    current: Iterable[Condition],
    *,
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """The full conditions list: `current` wins, untouched types are kept, flips stamp `now`."""
    old = {str(c.get("type")): dict(c) for c in previous or () if c.get("type")}
    merged = dict(old)
    for cond in current:
        before = old.get(cond.type)
        same = before is not None and before.get("status") == cond.status
        merged[cond.type] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message[:1024],
            "lastTransitionTime": str(before.get("lastTransitionTime", now)) if same and before else now,
            "observedGeneration": generation,
        }
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(merged.values(), key=lambda c: (rank.get(str(c["type"]), len(ORDER)), str(c["type"])))


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of that type, if any."""
    return next((c for c in conditions or () if c.get("type") == type_), None)
