"""Render a planned action as the exact API calls the operator would send, secrets masked.

Pure: used by `runner-operator plan` and by the paused-resource preview in status. The paths and
query parameters here are the client's (cloud/client.py); a test compares them with the
simulator's request log after the operator really sends them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runner_operator import planning
from runner_operator.cloud.client import COLLECTION
from runner_operator.cloud.models import CloudRunner, to_wire

MASK = "<redacted>"
MASK_CHANGED = "<redacted, changed>"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    changes: tuple[tuple[str, str, str], ...] = ()
    """(mask path, current value, new value) for an update, values masked where secret."""

    def line(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query.items())
        return f"{self.method} {self.path}{'?' + query if query else ''}"


@dataclass(frozen=True)
class Preview:
    calls: tuple[Call, ...]
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "note": self.note,
            "calls": [
                {
                    "method": c.method,
                    "path": c.path,
                    "query": c.query,
                    "body": c.body,
                    "changes": [{"path": p, "from": a, "to": b} for p, a, b in c.changes],
                }
                for c in self.calls
            ],
        }

    def text(self) -> str:
        lines = [self.note] if self.note else []
        if not self.calls:
            lines.append(
                "No API calls." if self.note else "No API calls: the runner already matches the spec."
            )
        for call in self.calls:
            lines.append(call.line())
            for path, old, new in call.changes:
                lines.append(f"  ~ {path}: {old} -> {new}")
            if call.body is not None and not call.changes:
                for row in json.dumps(call.body, indent=2, sort_keys=True).splitlines():
                    lines.append(f"    {row}")
        return "\n".join(lines)


def preview(action: planning.Action, observed: CloudRunner | None) -> Preview:
    """The calls `action` makes (a create preceded by its key reservation shows as the create)."""
    match action:
        case planning.ReserveRequestId(request_id) | planning.Create(_, request_id):
            body = action.body if isinstance(action, planning.Create) else None
            return Preview((_create(request_id, body),), "The runner does not exist: it will be created.")
        case planning.Update(change):
            return Preview((_update(change, observed),))
        case planning.Delete(runner_id, replacing):
            note = (
                "Replacement: the old runner is deleted first, then the new one created." if replacing else ""
            )
            return Preview((Call("DELETE", _item(runner_id), {"allowMissing": "true"}),), note)
        case planning.ApplyUpdate(request):
            why = f"requested ({request!r})" if request is not None else "spec.updates.apply is WhenAvailable"
            return Preview(
                (Call("POST", f"{_item(_runner_id(observed))}:applyAvailableUpdate"),),
                f"The channel's available update will be applied: {why}.",
            )
        case planning.DeclineUpdateRequest(request):
            return Preview(
                (), f"Update request {request!r}: no update is available; it is answered, not retried."
            )
        case planning.Adopt():
            return Preview((), "The existing runner will be adopted (spec.adopt: true).")
        case planning.Bind():
            return Preview((), "The runner this resource's create made is recorded as its own.")
        case planning.Conflict(reason, message):
            return Preview((), f"Blocked ({reason}): {message}")
        case planning.Wait(reason, message) | planning.Idle(reason, message):
            return Preview((), f"{reason}: {message}" if message else "")
        case planning.ForgetOld(runner_id):
            return Preview((), f"Runner {runner_id} is gone; the replacement will be created next.")
        case planning.Release():
            return Preview((), "Nothing left to delete.")
    raise AssertionError(f"unhandled action {action!r}")


def masked(body: dict[str, Any]) -> dict[str, Any]:
    """A request body with env values and policy.base replaced by a marker."""
    out: dict[str, Any] = json.loads(json.dumps(body))
    overrides = (out.get("spec") or {}).get("overrides") or {}
    if isinstance(overrides.get("env"), dict):
        overrides["env"] = {key: MASK for key in overrides["env"]}
    policy = out.get("policy") or {}
    if "base" in policy:
        policy["base"] = MASK
    return out


def _create(request_id: str, body: CloudRunner | None) -> Call:
    wire = masked(to_wire(body, request=True)) if body is not None else None
    if wire is not None:
        wire.pop("etag", None)
    return Call("POST", COLLECTION, {"requestId": request_id}, wire)


def _update(change: Any, observed: CloudRunner | None) -> Call:
    body = masked(to_wire(change.body, request=True))
    if change.etag:
        body["etag"] = change.etag
    old_wire = to_wire(observed, request=True) if observed is not None else {}
    new_wire = to_wire(change.body, request=True)
    old, new = masked(old_wire), masked(new_wire)
    _mark_changed_env(_at(old_wire, "spec.overrides.env"), _at(new_wire, "spec.overrides.env"), new)
    changes = tuple((path, _short(_at(old, path)), _short(_at(new, path))) for path in change.mask)
    runner_id = (observed.runner_id if observed else None) or str(body.get("identity", {}).get("runnerId"))
    return Call("PATCH", _item(runner_id), {"updateMask": ",".join(change.mask)}, body, changes)


def _mark_changed_env(before: Any, after: Any, masked_new: dict[str, Any]) -> None:
    """Say which env values change without showing them."""
    env = _at(masked_new, "spec.overrides.env")
    if not isinstance(env, dict) or not isinstance(after, dict):
        return
    before = before if isinstance(before, dict) else {}
    for key in env:
        if before.get(key) != after.get(key):
            env[key] = MASK_CHANGED


def _runner_id(observed: CloudRunner | None) -> str:
    return observed.runner_id if observed is not None and observed.runner_id else "-"


def _item(runner_id: str) -> str:
    return f"{COLLECTION}/{runner_id}"


def _at(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _short(value: Any) -> str:
    if value is None:
        return "(unset)"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."
