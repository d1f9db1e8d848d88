"""Kubernetes-style status conditions as pure values, merged so lastTransitionTime only moves on a flip.

A merge patch replaces lists whole, so the operator always writes the full list computed here
(as `status.Condition` entries).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner_operator import status
from runner_operator.reasons import Reason

READY = "Ready"
SYNCED = "Synced"
STALLED = "Stalled"
ORDER = (READY, SYNCED, STALLED)

Status = status.ConditionStatus


@dataclass(frozen=True)
class Condition:
    type: str
    status: Status
    reason: Reason
    message: str = ""


def merge(
    previous: Sequence[Mapping[str, Any] | status.Condition] | None,
    current: Iterable[Condition],
    *,
    generation: int,
    now: str,
) -> tuple[status.Condition, ...]:
    """The full conditions list: `current` wins, untouched types are kept, flips stamp `now`."""
    old = {
        parsed.type: parsed
        for parsed in (status.Condition.model_validate(c) for c in previous or () if _typed(c))
    }
    merged = dict(old)
    for cond in current:
        before = old.get(cond.type)
        same = before is not None and before.status == cond.status
        merged[cond.type] = status.Condition(
            type=cond.type,
            status=cond.status,
            reason=cond.reason,
            message=cond.message[:1024],
            last_transition_time=before.last_transition_time if same and before else now,
            observed_generation=generation,
        )
    rank = {name: i for i, name in enumerate(ORDER)}
    return tuple(sorted(merged.values(), key=lambda c: (rank.get(c.type, len(ORDER)), c.type)))


def _typed(condition: Mapping[str, Any] | status.Condition) -> bool:
    return isinstance(condition, status.Condition) or bool(condition.get("type"))


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of that type, if any."""
    return next((c for c in conditions or () if c.get("type") == type_), None)
