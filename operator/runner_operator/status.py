"""Typed status of a ManagedRunner: everything the operator writes under `.status`, as a merge patch.

The API server silently prunes a status key its CRD does not declare, so a misspelled string key
would be lost without a trace. These models mirror the CRD's status schema field for field
(tests/unit/test_crd_contract.py checks it); a misspelled field is a type error instead. Pure
values: no I/O, no kopf. `status.kopf` (kopf's storage, written by earlier releases) is not
modelled: the kopf layer removes it.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from runner_operator.resource import K8sModel

ConditionStatus = Literal["True", "False", "Unknown"]


class Patchable(K8sModel):
    """A status object written as a JSON merge patch: set fields only, an explicit None deletes the key."""

    def __or__(self, other: Self) -> Self:
        """`other`'s set fields over this one's, like `dict | dict`."""
        return self.model_copy(update={name: getattr(other, name) for name in other.model_fields_set})

    def to_patch(self) -> dict[str, Any]:
        """camelCase JSON of the set fields, None kept (it deletes the key), lists as lists."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def is_set(self, name: str) -> bool:
        """Whether the patch writes `name` (a Python field name), even if only to delete it."""
        if name not in type(self).model_fields:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        return name in self.model_fields_set


class Condition(Patchable):
    """One entry of `status.conditions` (conditions.merge computes the whole list)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str | None = None
    last_transition_time: str
    observed_generation: int | None = None


class InstallError(Patchable):
    """Why the cloud install failed, mirrored from the runner (absent fields stay absent)."""

    reason: str | None = None
    message: str | None = None
    diagnostic_detail: str | None = None
    remediation_hints: tuple[str, ...] | None = None
    occurred_at: str | None = None


class Replacement(Patchable):
    """Progress of an opt-in replacement: from which runner, to which, and the step."""

    from_runner_id: str | None = None
    to_runner_id: str | None = None
    phase: Literal["DeletingOld", "Creating"] | None = None
    started_time: str | None = None


class PlanPreview(Patchable):
    """What an unpaused pass would send (values never shown: they may be secret)."""

    action: Literal["create", "update", "replace", "applyUpdate", "none"]
    update_mask: tuple[str, ...]


class DeletionProgress(Patchable):
    """The cloud-side decommission once the object is being deleted."""

    requested_time: str
    deadline_time: str
    stalled: bool


class UpdateRequest(Patchable):
    """The answer to the last spec.updates.request the operator honoured."""

    request: str
    outcome: Literal["Applied", "NotAvailable"]
    time: str


class AppliedUpdate(Patchable):
    """The last runner update the operator applied, and why."""

    trigger: Literal["Request", "WhenAvailable"]
    request: str | None = None
    time: str
    from_revision: int | None = None
    to_revision: int | None = None
    release_channel: str | None = None


class StatusPatch(Patchable):
    """The operator's status write; `StatusPatch(runner_id=None)` deletes runnerId, unset fields stay.

    Timestamps stay RFC 3339 strings: they are written as computed and compared with what is stored.
    """

    observed_generation: int | None = None
    conditions: tuple[Condition, ...] | None = None
    phase: str | None = None

    # Ownership and create bookkeeping.
    runner_id: str | None = None
    adopted: bool | None = None
    create_request_id: str | None = None
    create_requested_time: str | None = None
    recreations: int | None = None
    credential_fingerprint: str | None = None
    credentials_secret: str | None = None

    # Mirrored from the cloud runner (reporting.observed_status).
    cluster_name: str | None = None
    install_status: str | None = None
    connection_status: str | None = None
    connection: str | None = None
    """connection_status in one word, for `kubectl get`."""
    active_revision: int | None = None
    target_revision: int | None = None
    rollout_in_progress: bool | None = None
    update_available: bool | None = None
    update_available_since: str | None = None
    last_update_request: UpdateRequest | None = None
    last_applied_update: AppliedUpdate | None = None
    active_config_version: str | None = None
    install_error: InstallError | None = None
    data_plane_status: dict[str, Any] | None = None
    create_time: str | None = None
    update_time: str | None = None
    last_heartbeat_time: str | None = None
    etag: str | None = None
    last_observed_time: str | None = None

    # Progress of multi-pass work.
    replacement: Replacement | None = None
    plan: PlanPreview | None = None
    deletion: DeletionProgress | None = None

    def condition(self, type_: str) -> Condition | None:
        """The written condition of that type, if any."""
        return next((c for c in self.conditions or () if c.type == type_), None)
