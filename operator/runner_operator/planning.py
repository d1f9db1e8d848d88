"""The pure decision: given what the resource wants and what the cloud has, choose ONE next action.

No I/O and no clock: the reconciler gathers `Facts`, calls `plan`, performs the action and
reports. Every branch is a row in tests/unit/test_planning.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from runner_operator.cloud import diff
from runner_operator.cloud.models import CloudRunner, InstallStatus, readiness
from runner_operator.reasons import Reason
from runner_operator.resource import DeletionPolicy


@dataclass(frozen=True)
class Facts:
    """What the reconciler observed, in one value."""

    desired: CloudRunner
    observed: CloudRunner | None
    deleting: bool = False
    paused: bool = False
    adopt: bool = False
    deletion_policy: DeletionPolicy = "Delete"
    bound: bool = False
    """status says this resource created or adopted the runner."""
    request_id: str | None = None
    """the create idempotency key persisted in status, if any."""
    new_request_id: str = ""
    """a fresh key to persist if a create is needed and none is stored yet."""
    claimed_by: str | None = None
    """another ManagedRunner (namespace/name) that claims the same runner ID first."""
    replace: bool = False
    """spec.replacementPolicy is Replace: an identity change replaces the runner."""
    held_id: str | None = None
    """the runner this resource holds (status.runnerId), when it differs from the spec's runner ID."""
    held: CloudRunner | None = None
    """the observation of `held_id`."""
    credential_changed: bool = False
    """the credential in use is not the one that last saw (or reserved) the runner.

    Its NOT_FOUND then proves nothing (another organization's token sees none of our runners)."""
    reserved_at: datetime | None = None
    """when the create key was reserved (before any create with it could be sent)."""
    replay_refused: bool = False
    """the create replay with our key was refused (ALREADY_EXISTS or a body mismatch)."""
    key_never_sent: bool = False
    """this process reserved `request_id` and no create with it has gone out before this pass.

    A create it sends that is refused then proves the runner is not ours, whatever the clocks say."""
    cluster_holder: str | None = None
    """the runner, other than the one being replaced, that holds the desired cluster (replacements only)."""
    seen_created: datetime | None = None
    """the creation time of the runner this resource holds, as last seen (status.createTime)."""
    protected: bool = True
    """the resource carries the operator's finalizer (its deletion will wait for a decommission)."""
    update_request: str | None = None
    """a spec.updates.request value not answered yet (status.lastUpdateRequest holds another)."""
    apply_updates: bool = False
    """spec.updates.apply is WhenAvailable."""
    update_frozen: bool = False
    """now is inside a maintenance exclusion: WhenAvailable waits (a request does not)."""


def absence_needs_proof(
    *, deleting: bool, bound: bool, credential_changed: bool, stale_key: bool, replacing: bool
) -> bool:
    """Whether "absent" must be the API's own NOT_FOUND for this runner (a direct GET), not a list's.

    A list can miss a runner (one made since it was read, or skipped by pagination under change). Acting
    on that is safe only where the API itself arbitrates what follows: reserving a create key and
    sending the create (a runner that exists refuses it with ALREADY_EXISTS; it is then read directly: a
    refusal of the key's first send, which this process records, makes it someone else's; otherwise its
    creation time against the key's decides: taken, ours, or OwnershipUnknown for a person). There, a
    list's absence will do, as old as `absence_age` allows. Where absence would release, forget or
    recreate a runner (bound, deleting), let a replacement delete the runner it holds (the new ID must
    be proven free), is read with a credential that proves nothing (changed), or would send a key
    reserved for another runner ID (`stale_key`), it must come from a GET too.
    """
    return deleting or bound or credential_changed or replacing or stale_key


RESERVATION_LIST_SECONDS = 30.0
"""How old a list's absence may be to reserve a create key (unless the pass asks for fresher): it
bounds how long before our key a runner the list missed can have been made, the window where a
refused retry or a restart leaves creation times and clocks to decide (docs/safety.md, rule 6)."""


def absence_age(*, needs_proof: bool, key_reserved: bool) -> float:
    """How many seconds old a list's absence may be for this pass, whatever fresher list it asks
    for (0: none older than it asks; a GET proves absence where `needs_proof`).

    Sending the create of a key already reserved (for this runner ID: a stale key needs proof): any
    age, the API arbitrates the send. Reserving a key: RESERVATION_LIST_SECONDS. Waiting for a
    fresher list instead held every create of the credential's turn while one was taken
    (bench/RESULTS.md, "Creates do not wait for lists").
    """
    if needs_proof:
        return 0.0
    return math.inf if key_reserved else RESERVATION_LIST_SECONDS


@dataclass(frozen=True)
class ReserveRequestId:
    """Persist a create idempotency key in status before any create call."""

    request_id: str
    recreate: bool = False


@dataclass(frozen=True)
class Create:
    body: CloudRunner
    request_id: str


@dataclass(frozen=True)
class Adopt:
    """Bind an existing runner whose identity matches; updates follow on the next pass."""


@dataclass(frozen=True)
class Bind:
    """Our create landed (its response was lost): the runner was created after our key was reserved."""


@dataclass(frozen=True)
class Update:
    change: diff.Update


@dataclass(frozen=True)
class Delete:
    runner_id: str
    replacing: bool = False
    """the first step of an opt-in replacement: the old runner goes first (one runner per cluster)."""


@dataclass(frozen=True)
class ForgetOld:
    """The replaced runner is gone: stop holding it, so the next passes create the new one."""

    runner_id: str


@dataclass(frozen=True)
class Release:
    """Deletion is finished (or the runner is orphaned): the finalizer may go."""

    orphaned: bool = False


@dataclass(frozen=True)
class ApplyUpdate:
    """Apply the channel's available update (applyAvailableUpdate), for `request` or WhenAvailable."""

    request: str | None = None


@dataclass(frozen=True)
class DeclineUpdateRequest:
    """Answer a request with nothing to apply (no call): recorded so the same value is not retried."""

    request: str


@dataclass(frozen=True)
class Wait:
    """Nothing to send now; observe again soon (install, rollout or deletion in flight)."""

    reason: Reason
    message: str


@dataclass(frozen=True)
class Idle:
    """In sync; observe again at the steady-state cadence."""

    reason: Reason = Reason.IN_SYNC
    message: str = ""


@dataclass(frozen=True)
class Conflict:
    """A problem only a spec change (or an outside action) can fix; no call is made."""

    reason: Reason
    message: str
    forget_request: bool = False
    """the reserved create key provably made nothing: drop it (later passes adopt or report, no replay)."""


CLOCK_MARGIN = timedelta(minutes=5)
"""How far the operator's clock and the API's may disagree when creation times are compared.

A runner created less than this before our create key was reserved is neither ours nor proved
someone else's: the resource stalls (OwnershipUnknown) instead of guessing.
"""


Action = (
    ReserveRequestId
    | Create
    | Adopt
    | Bind
    | Update
    | ApplyUpdate
    | DeclineUpdateRequest
    | Delete
    | ForgetOld
    | Release
    | Wait
    | Idle
    | Conflict
)


AWAITING_FINALIZER = "waiting for the finalizer to be on the resource before acting"
BINDS = (Create, Adopt, Bind)
"""Actions after which the resource holds a runner: its deletion must then wait for the decommission."""


def plan(facts: Facts) -> Action:
    """Choose the next step; see the module docstring.

    Nothing is created, adopted or bound for a resource that does not carry the finalizer yet: kopf
    adds it in the same cycle that starts the first pass, and a resource deleted before it lands
    would go at once, leaving its runner behind. Reserving the create key is only a status write.
    """
    action = _plan(facts)
    if not facts.protected and not facts.deleting and isinstance(action, BINDS):
        return Wait(Reason.AWAITING_FINALIZER, AWAITING_FINALIZER)
    return action


def _plan(facts: Facts) -> Action:
    if facts.deleting:
        return _plan_deletion(facts)
    if facts.held_id:
        if not facts.replace:
            return Conflict(
                Reason.IMMUTABLE_FIELD_CHANGED,
                f"runnerId changed from {facts.held_id!r} to {_runner_id(facts)!r}, which cannot be done in "
                "place: set spec.replacementPolicy: Replace to replace the runner, or restore the runnerId",
            )
        return _plan_replacement(facts, facts.held_id, facts.held)
    if facts.claimed_by:
        return Conflict(
            Reason.DUPLICATE_RUNNER_ID,
            f"runner ID {_runner_id(facts)!r} is already claimed by ManagedRunner {facts.claimed_by}; "
            "each runner must be managed by exactly one resource",
        )
    observed = facts.observed
    if observed is None:
        return _plan_absent(facts)
    if not facts.bound:
        return _plan_unbound(facts, observed)
    if _another_runner(facts, observed):
        return _not_visible(facts, _runner_id(facts))
    changed = identity_changes(facts.desired, observed)
    if changed and facts.replace:
        return _plan_replacement(facts, _runner_id(facts), observed)
    if observed.install_status == InstallStatus.DELETING:
        return Wait(
            Reason.DELETING_OUT_OF_BAND,
            "the runner is being deleted outside Kubernetes; it will be recreated",
        )
    if changed:
        return Conflict(
            Reason.IMMUTABLE_FIELD_CHANGED,
            f"{', '.join(changed)} differ from the existing runner and cannot be changed in place: "
            "create a new ManagedRunner for the new cluster or zone and delete this one, "
            "or set spec.replacementPolicy: Replace",
        )
    if facts.paused:
        return Idle(Reason.PAUSED, "spec.paused is true: observing only, no changes are sent")
    change = diff.compute_update(facts.desired, observed)
    if change is not None:
        return Update(change)
    return _plan_runner_update(facts, observed) or _progress(observed)


def identity_changes(desired: CloudRunner, observed: CloudRunner) -> list[str]:
    """Immutable identity fields (spec names) whose desired value differs from the runner's."""
    return [path.removeprefix("identity.") for path in diff.immutable_differences(desired, observed)]


def _runner_id(facts: Facts) -> str:
    return (facts.desired.identity.runner_id if facts.desired.identity else None) or ""


def _plan_replacement(facts: Facts, old_id: str, old: CloudRunner | None) -> Action:
    """Break before make: the old runner goes first, but only once the new one is proven able to exist.

    The runner ID is the API's key and a cluster holds one runner, so a new runner with the same ID or
    on the same cluster cannot exist beside the old one (make-before-break is impossible there). What
    can be proved beforehand is proved: not paused, the new ID claimed by no other resource and free
    in the cloud (unless adopted), and the new cluster free.
    """
    if old is None:
        if facts.credential_changed:
            return _not_visible(facts, old_id)
        return ForgetOld(old_id)
    if _another_runner(facts, old):
        return _not_visible(facts, old_id)
    if old.install_status == InstallStatus.DELETING:
        return Wait(
            Reason.REPLACING,
            f"waiting for runner {old_id} to be decommissioned before creating its replacement",
        )
    if facts.paused:
        return Idle(
            Reason.PAUSED, f"spec.paused is true: the replacement of runner {old_id} waits; nothing is sent"
        )
    new_id = _runner_id(facts)
    if facts.claimed_by:
        return Conflict(
            Reason.DUPLICATE_RUNNER_ID,
            f"runner ID {new_id!r} is already claimed by ManagedRunner {facts.claimed_by}; runner {old_id} "
            "is kept until the replacement can exist",
        )
    target = facts.observed if new_id != old_id else None
    if target is not None:
        if not facts.adopt:
            return Conflict(
                Reason.REPLACEMENT_TARGET_TAKEN,
                f"runner {new_id!r} already exists in the organization, so replacing runner {old_id} by it "
                f"would leave nothing: runner {old_id} is kept. Choose another runnerId, or set "
                "spec.adopt: true to take the existing runner over as the replacement",
            )
        mismatch = identity_changes(facts.desired, target)
        if mismatch:
            return Conflict(
                Reason.ADOPTION_MISMATCH,
                f"cannot adopt runner {new_id!r} as the replacement: its {', '.join(mismatch)} differ "
                "from the spec",
            )
    holder = facts.cluster_holder
    if holder and holder != old_id and not (target is not None and holder == new_id):
        cluster = facts.desired.identity.cluster_id if facts.desired.identity else ""
        return Conflict(
            Reason.CLUSTER_TAKEN,
            f"cluster {cluster} already has managed runner {holder!r}, so the replacement could not be "
            f"created: runner {old_id} is kept. Delete or adopt runner {holder!r} first",
        )
    return Delete(old_id, replacing=True)


def _another_runner(facts: Facts, observed: CloudRunner) -> bool:
    """With a new credential, a runner under our ID that was created at another time is not ours.

    Runner IDs are unique per organization only: another organization's token may find its own
    runner with the same ID, which must never be updated, deleted or mirrored as ours.
    """
    return (
        facts.credential_changed
        and facts.seen_created is not None
        and observed.create_time is not None
        and observed.create_time != facts.seen_created
    )


def _not_visible(facts: Facts, runner_id: str) -> Conflict:
    """NOT_FOUND read with a credential other than the one that last saw the runner proves nothing."""
    return Conflict(
        Reason.RUNNER_NOT_VISIBLE,
        f"runner {runner_id} is not found with the current credentials, which are not the ones that last saw "
        "it (a token of another organization sees none of its runners). Nothing is created, forgotten or "
        "released on that answer: restore the credentials that manage it; to let go of the runner, delete "
        "this resource with spec.deletionPolicy: Orphan",
    )


def _created_after_reservation(facts: Facts) -> bool:
    """Evidence that an unbound runner is what our lost create made: it appeared after our key was reserved.

    Used only when the replay cannot tell (the server refused a replay whose body changed since).
    """
    observed = facts.observed
    return (
        facts.reserved_at is not None
        and observed is not None
        and observed.create_time is not None
        and observed.create_time >= facts.reserved_at
        and not identity_changes(facts.desired, observed)
    )


def _plan_deletion(facts: Facts) -> Action:
    if facts.deletion_policy == "Orphan":
        return Release(orphaned=True)
    if facts.held_id:
        # Deleted mid-replacement: the old runner is the one this resource holds.
        if facts.held is None:
            return _not_visible(facts, facts.held_id) if facts.credential_changed else Release()
        if _another_runner(facts, facts.held):
            return _not_visible(facts, facts.held_id)
        if facts.held.install_status == InstallStatus.DELETING:
            return Wait(Reason.DELETING, f"runner {facts.held_id} is being decommissioned")
        return Delete(facts.held_id)
    observed = facts.observed
    if observed is None:
        if (facts.bound or facts.request_id) and facts.credential_changed:
            return _not_visible(facts, _runner_id(facts))
        return Release()
    if not facts.bound:
        if facts.request_id and not facts.key_never_sent:
            if facts.replay_refused:
                if _created_after_reservation(facts):
                    return Bind()
                if _created_before_reservation(facts):
                    return Release()  # provably not ours: it existed well before our key did
                return _ownership_unknown(facts)
            # A create may have landed before a crash: replaying it proves whether the runner is ours.
            return Create(facts.desired, facts.request_id)
        return Release()  # no create ever went out with our key: whatever exists is not ours
    if _another_runner(facts, observed):
        return _not_visible(facts, _runner_id(facts))
    if observed.install_status == InstallStatus.DELETING:
        return Wait(Reason.DELETING, "the runner is being decommissioned")
    return Delete(_runner_id(facts))


def _plan_absent(facts: Facts) -> Action:
    if (facts.bound or facts.request_id) and facts.credential_changed:
        return _not_visible(facts, _runner_id(facts))
    if facts.paused:
        return Idle(Reason.PAUSED, "spec.paused is true: the runner does not exist and will not be created")
    if facts.bound:
        # It existed and is gone: someone deleted it outside Kubernetes. Start a fresh create.
        return ReserveRequestId(facts.new_request_id, recreate=True)
    if not facts.request_id:
        return ReserveRequestId(facts.new_request_id)
    return Create(facts.desired, facts.request_id)


def _plan_unbound(facts: Facts, observed: CloudRunner) -> Action:
    if facts.paused:
        return Idle(Reason.PAUSED, "spec.paused is true: the runner is not claimed, created or adopted")
    if facts.request_id:
        if facts.replay_refused:
            # Refused on its first send, our key made nothing: the runner is someone else's.
            if not facts.key_never_sent and _created_after_reservation(facts):
                return Bind()
            if facts.adopt and not identity_changes(facts.desired, observed):
                return Adopt()  # the person decided: it is managed from here either way
            if facts.key_never_sent or _created_before_reservation(facts):
                return _taken(facts)
            return _ownership_unknown(facts)
        # Our create may have succeeded before we could record it; the same key replays it.
        return Create(facts.desired, facts.request_id)
    if not facts.adopt:
        return Conflict(
            Reason.RUNNER_ID_TAKEN,
            f"a runner with ID {_runner_id(facts)!r} already exists in the organization; "
            "set spec.adopt: true to manage it from this resource, or choose another runnerId",
        )
    changed = identity_changes(facts.desired, observed)
    if changed:
        return Conflict(
            Reason.ADOPTION_MISMATCH,
            f"cannot adopt runner {_runner_id(facts)!r}: its {', '.join(changed)} differ from the spec",
        )
    return Adopt()


def _taken(facts: Facts) -> Conflict:
    return Conflict(
        Reason.RUNNER_ID_TAKEN,
        f"a runner with ID {_runner_id(facts)!r} already exists and was not created by this resource; "
        "set spec.adopt: true to manage it, or choose another runnerId",
        forget_request=True,
    )


def _ownership_unknown(facts: Facts) -> Conflict:
    """Neither proof holds: keep the key (so nothing is forgotten) and let a person decide."""
    return Conflict(
        Reason.OWNERSHIP_UNKNOWN,
        f"cannot tell whether runner {_runner_id(facts)!r} was created by this resource: the replay of its "
        "create was refused and the runner's creation time is too close to (or missing next to) the "
        "reservation of the create key to decide. Nothing is deleted, adopted or released: set "
        "spec.adopt: true to manage it, spec.deletionPolicy: Orphan to leave it, or delete it in CoreWeave",
    )


def _created_before_reservation(facts: Facts) -> bool:
    """Proof that an unbound runner is not ours: our create could not have made it.

    Its identity differs from the one we sent, or it existed well before our key (clocks differ).
    """
    observed = facts.observed
    if observed is None:
        return False
    if identity_changes(facts.desired, observed):
        return True
    return (
        facts.reserved_at is not None
        and observed.create_time is not None
        and observed.create_time < facts.reserved_at - CLOCK_MARGIN
    )


def _plan_runner_update(facts: Facts, observed: CloudRunner) -> ApplyUpdate | DeclineUpdateRequest | None:
    """A channel update, once the spec is applied and the runner installed and not rolling out.

    A request is answered once (applied, or declined when nothing is available); WhenAvailable applies
    whatever appears, except inside a maintenance exclusion. Neither runs while paused (see `_plan`).
    """
    if observed.install_status != InstallStatus.READY or readiness(observed).reason == Reason.ROLLING_OUT:
        return None
    if facts.update_request is not None:
        if observed.update_available:
            return ApplyUpdate(facts.update_request)
        return DeclineUpdateRequest(facts.update_request)
    if facts.apply_updates and observed.update_available and not facts.update_frozen:
        return ApplyUpdate()
    return None


def _progress(observed: CloudRunner) -> Action:
    found = readiness(observed)
    return Idle() if found.ready else Wait(found.reason, found.message)
