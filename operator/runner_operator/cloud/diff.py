"""Turns a desired and an observed runner into the minimal update to send, comparing by meaning, not spelling.

Pure: no I/O, no httpx. Cosmetic differences (quantity spellings, int vs string, server defaults) send
nothing; presence of messages and of `maxGpuCount` is kept, because there it changes behaviour.
"""

from __future__ import annotations

import functools
import re
import typing
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Final

from pydantic.fields import FieldInfo

from runner_operator.cloud.models import (
    ENUM,
    OPAQUE,
    PRESENCE,
    QUANTITY,
    CloudRunner,
    ReleaseChannel,
    RunnerIdentity,
    RunnerSpec,
    WireModel,
)

DEFAULT_GROUP: Final = "default"

SPEC_PATHS: Final = {
    "release_channel": "spec.releaseChannel",
    "maintenance_policy": "spec.maintenancePolicy",
    "overrides": "spec.overrides",
    "enforce_resource_limits": "spec.enforceResourceLimits",
    "volumes": "spec.volumes",
    "tenant_metrics": "spec.tenantMetrics",
    "image_pull": "spec.imagePull",
    "data_plane": "spec.dataPlane",
}
"""Spec fields the API updates one by one, each replaced whole."""


@dataclass(frozen=True)
class Update:
    """What to PATCH: sorted camelCase mask, a body with the masked fields, the etag when `policy` is masked.

    A masked field that is absent from the body resets it on the server.
    """

    mask: tuple[str, ...]
    body: CloudRunner
    etag: str | None


def compute_update(desired: CloudRunner, observed: CloudRunner) -> Update | None:
    """The update turning `observed` into `desired`, or None when they already mean the same.

    Identity is only compared for `runnerGroupId`; see `immutable_differences` for the rest. An absent
    desired `spec` is read as an empty spec (every spec field back to its default).
    """
    desired_spec = desired.spec or RunnerSpec()
    observed_spec = observed.spec or RunnerSpec()
    mask: list[str] = []
    if (desired.display_name or "") != (observed.display_name or ""):
        mask.append("displayName")
    if _group(desired) != _group(observed):
        mask.append("identity.runnerGroupId")
    if not _same(desired.policy, observed.policy):
        mask.append("policy")
    for name, path in SPEC_PATHS.items():
        mine, theirs = getattr(desired_spec, name), getattr(observed_spec, name)
        same = _channel(mine) == _channel(theirs) if name == "release_channel" else _same(mine, theirs)
        if not same:
            mask.append(path)
    if not mask:
        return None

    spec_fields = {name: getattr(desired_spec, name) for name, path in SPEC_PATHS.items() if path in mask}
    etag = observed.etag if "policy" in mask else None
    body = CloudRunner(
        identity=RunnerIdentity(
            runner_id=observed.runner_id or desired.runner_id,
            runner_group_id=(desired.identity.runner_group_id or None)
            if desired.identity and "identity.runnerGroupId" in mask
            else None,
        ),
        display_name=(desired.display_name or None) if "displayName" in mask else None,
        policy=desired.policy if "policy" in mask else None,
        spec=RunnerSpec(**spec_fields) if spec_fields else None,
        etag=etag,
    )
    return Update(mask=tuple(sorted(mask)), body=body, etag=etag)


def immutable_differences(desired: CloudRunner, observed: CloudRunner) -> tuple[str, ...]:
    """Identity paths the desired runner sets differently from the server (fixing them needs a new runner)."""
    mine = desired.identity or RunnerIdentity()
    theirs = observed.identity or RunnerIdentity()
    found: list[str] = []
    if mine.runner_id and mine.runner_id != theirs.runner_id:
        found.append("identity.runnerId")
    if mine.zone and mine.zone.lower() != (theirs.zone or "").lower():
        found.append("identity.zone")
    if mine.cluster_id and mine.cluster_id.lower() != (theirs.cluster_id or "").lower():
        found.append("identity.clusterId")
    return tuple(found)


# --- semantic form --------------------------------------------------------------------------------


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Final = _Absent()
"""Semantic form of a field that is unset or holds its zero value."""


def semantic_form(value: object) -> object:
    """A comparable value: zero values, UNSPECIFIED enums, empty lists/maps become ABSENT; quantities numbers.

    Messages (models and opaque JSON objects) stay present even when empty, as does a PRESENCE scalar's zero.
    """
    if not isinstance(value, WireModel):
        return _form(value, frozenset())
    # Models are frozen: a pass that compares the same desired and observed runner twice (to plan, then
    # to report readiness) computes each form once. Keyed by identity; the entry keeps the model alive
    # so its id cannot be reused while it is remembered.
    remembered = _FORMS.get(id(value))
    if remembered is not None and remembered[0] is value:
        return remembered[1]
    form = _form(value, frozenset())
    _FORMS[id(value)] = (value, form)
    if len(_FORMS) > _FORMS_KEPT:
        del _FORMS[next(iter(_FORMS))]
    return form


_FORMS: dict[int, tuple[WireModel, object]] = {}
_FORMS_KEPT = 256
"""The most recent forms (a few passes' worth of spec fields); the oldest goes first."""


def _same(mine: object, theirs: object) -> bool:
    """Equal values need no forms: a field the server echoes as sent (most passes) costs a plain
    comparison, about a seventh of building both forms of the example policy. Equal values always
    have equal forms (`_form` reads only the value), so only unequal ones are compared by meaning."""
    return mine == theirs or semantic_form(mine) == semantic_form(theirs)


def _form(value: object, marks: frozenset[str]) -> object:
    if value is None:
        return ABSENT
    if isinstance(value, WireModel):
        out: dict[str, object] = {}
        for name in type(value).model_fields:
            form = _form(getattr(value, name), _marks(type(value), name))
            if form is not ABSENT:
                out[name] = form
        return out
    if OPAQUE in marks:
        return value
    if isinstance(value, str):
        if QUANTITY in marks and (amount := parse_quantity(value)) is not None:
            return amount
        if ENUM in marks and (value.endswith("_UNSPECIFIED") or value == "0"):
            return ABSENT
    if isinstance(value, tuple):
        return tuple(_form(item, frozenset()) for item in value) or ABSENT
    if isinstance(value, str | int | bool | dict) and not value and PRESENCE not in marks:
        return ABSENT
    return value


@functools.cache
def _marks(model: type[WireModel], name: str) -> frozenset[str]:
    field: FieldInfo = model.model_fields[name]
    found = {m for m in field.metadata if isinstance(m, str)}
    pending: list[Any] = [field.annotation]
    while pending:
        hint = pending.pop()
        if typing.get_origin(hint) is typing.Annotated:
            found.update(m for m in hint.__metadata__ if isinstance(m, str))
        pending.extend(typing.get_args(hint))
    return frozenset(found)


def _group(runner: CloudRunner) -> str:
    return (runner.identity.runner_group_id if runner.identity else None) or DEFAULT_GROUP


def _channel(value: str | None) -> str:
    form = _form(value, frozenset({ENUM}))
    return ReleaseChannel.STABLE if form is ABSENT else str(form)


# --- Kubernetes quantities ------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?"
)
_SUFFIXES: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


QUANTITY_KEPT_LENGTH: Final = 64
"""Longest spelling remembered: a quantity field has no length limit, the memo must have one."""


def parse_quantity(text: str) -> Fraction | None:
    """The exact value of a Kubernetes quantity (`500m`, `1Gi`, `1e3`), or None when it is not one.

    Remembered (Fractions are immutable): a fleet spells the same few quantities in every runner."""
    return _remembered(text) if len(text) <= QUANTITY_KEPT_LENGTH else _quantity(text)


def _quantity(text: str) -> Fraction | None:
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    try:
        amount = Fraction(Decimal(number))
    except InvalidOperation:
        return None
    if exponent is not None:
        return amount * Fraction(10) ** int(exponent)
    return amount * _SUFFIXES[suffix] if suffix else amount


_remembered = functools.lru_cache(maxsize=1024)(_quantity)
"""At most 1,024 spellings of at most QUANTITY_KEPT_LENGTH characters."""
