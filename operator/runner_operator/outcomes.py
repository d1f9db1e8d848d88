"""The pure reporting step: facts, the action taken and the API's answer in; status, Events out.

No I/O: the shell (reconciling.py) observes, plans and makes at most one call, then asks this
module what the pass means for the resource: its typed status patch (cloud observations,
conditions for this generation, bookkeeping), the Events to post and whether the finalizer may go.
Failures are classified here too, in one table, so every path reports them the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pydantic

from runner_operator import conditions, planning, reporting, resource
from runner_operator.cadence import Cadence, of_status
from runner_operator.cloud import errors
from runner_operator.cloud.models import CloudRunner, readiness
from runner_operator.desired import SecretValues
from runner_operator.reasons import Reason
from runner_operator.status import (
    AppliedUpdate,
    DeletionProgress,
    PlanPreview,
    Replacement,
    StatusPatch,
    UpdateRequest,
)
from runner_operator.unsent import UnsentKeys


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: Reason
    message: str


@dataclass(frozen=True)
class Outcome:
    """What one pass decided: the status to write and what happens next."""

    status: StatusPatch
    events: tuple[Event, ...] = ()
    retry_after: float | None = None
    """a server-imposed delay (Retry-After) that beats the cadence."""
    release: bool = False
    """deletion is complete (or orphaned): the finalizer may be removed."""
    terminal: bool = False
    """only a spec change (or an outside fix) can help: do not retry eagerly."""
    calls: tuple[str, ...] = field(default=())
    """the mutating calls made (for logs and tests)."""
    unchanged: bool = False
    """a steady pass skipped: its inputs were those of the last quiet pass (see `quiet`)."""

    @property
    def cadence(self) -> Cadence:
        """When to look again; derived from the status so the scheduler's feed agrees with it."""
        if self.release:
            return Cadence.NONE
        if self.unchanged:
            return Cadence.SLOW
        return of_status(self.status.to_patch()).cadence

    @property
    def credentials_rejected(self) -> bool:
        """The API refused the token this pass used (401, or 403 on every runner)."""
        synced = self.status.condition("Synced")
        return synced is not None and synced.reason in (Reason.CREDENTIALS_REJECTED, Reason.PERMISSION_DENIED)

    def quiet(self, before: Mapping[str, Any]) -> bool:
        """Whether this pass wrote, sent and reported nothing, and looks again only at the slow cadence."""
        return (
            not self.events
            and not self.calls
            and not self.release
            and not self.terminal
            and self.retry_after is None
            and self.cadence == Cadence.SLOW
            and all(value == before.get(key) for key, value in self.status.to_patch().items())
        )


@dataclass(frozen=True)
class Context:
    """Inputs of one pass that are not the resource itself."""

    now: datetime
    deletion_timeout: float
    secrets: SecretValues = field(default_factory=dict)
    claimed_by: str | None = None
    bound_here: str | None = None
    """the runner this process bound the resource to, if its status write may not be visible yet."""
    credential: str = ""
    """fingerprint of the credential this pass uses (credentials.fingerprint); never the token."""
    credentials_secret: str | None = None
    """the resource's own credentials Secret this pass protected (None: the operator's default)."""
    track_secret: bool = False
    """whether this pass resolved credentials, so `credentials_secret` is current and is recorded."""
    unsent: UnsentKeys | None = None
    """the create keys this process reserved and has not sent (None: none known, as in `plan`)."""


class CredentialsProblem(Exception):
    """The credentials or a referenced Secret could not be read (reported, retried slowly)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def recreations(res: resource.ManagedRunnerResource) -> int:
    """How many times this resource has created its runner again (part of the create key)."""
    return int(res.status.get("recreations") or 0)


def unreadable(body: Mapping[str, Any], now: datetime, exc: ValueError) -> Outcome:
    """A spec this version cannot read: Ready/Synced False and Stalled True, one Event per distinct problem.

    Happens after a rollback to a version that does not know a newer field (Helm never downgrades
    CRDs). No status write and no Event while the problem stays the same, so no per-pass churn.
    """
    previous: Mapping[str, Any] = body.get("status") or {}
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    message = f"the spec could not be read by this operator version: {_summary(exc)}"
    reason = Reason.INVALID_SPEC
    status = StatusPatch(
        phase=reason,
        conditions=conditions.merge(
            previous.get("conditions"),
            [
                _not_ready(reason, message),
                conditions.Condition(conditions.SYNCED, "False", reason, message),
                conditions.Condition(conditions.STALLED, "True", reason, message),
            ],
            generation=generation,
            now=_rfc3339(now),
        ),
    )
    before = conditions.find(previous.get("conditions"), conditions.SYNCED) or {}
    repeated = before.get("reason") == reason and before.get("message") == message[:1024]
    events = () if repeated else (Event("Warning", reason, message),)
    return Outcome(status, events, terminal=True)


def _summary(exc: ValueError) -> str:
    """The first problems of a validation error, as `spec.path: message` (no values: they may be secret)."""
    if isinstance(exc, pydantic.ValidationError):
        parts = [
            "spec." + ".".join(str(p) for p in err["loc"]) + f": {err['msg']}" for err in exc.errors()[:3]
        ]
        return "; ".join(parts)[:500]
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def never_sent(res: resource.ManagedRunnerResource, bound_here: str | None) -> bool:
    """Nothing was ever sent that could have made a runner: no binding, no reserved create key."""
    return not (res.status.get("runnerId") or bound_here or res.status.get("createRequestId"))


def released(res: resource.ManagedRunnerResource, ctx: Context, *, orphaned: bool) -> Outcome:
    """The finalizer may go: the API confirmed the runner gone, or it is orphaned (no call needed)."""
    reason, message = (
        (Reason.ORPHANED, f"left runner {res.spec.runner_id} in place (deletionPolicy: Orphan)")
        if orphaned
        else (Reason.DELETED, f"runner {res.spec.runner_id} is gone")
    )
    status = _status(res, ctx, None, ready=_not_ready(reason, message), synced=_synced())
    return Outcome(status, (Event("Normal", reason, message),), release=True)


def failed(res: resource.ManagedRunnerResource, ctx: Context, exc: Exception) -> Outcome:
    """The outcome of a pass that could not talk to the API (or was told no)."""
    failure = classify(exc)
    reason, message, person = failure.reason, failure.message, failure.needs_person
    # What only a person can fix says so in Ready too; a transient failure leaves Ready as it was.
    ready = _not_ready(reason, message) if person else None
    status = _status(
        res,
        ctx,
        None,
        ready=ready,
        synced=conditions.Condition(conditions.SYNCED, "False", reason, message),
        stalled=person,
        keep_observation=True,
        extra=StatusPatch(phase=reason) if person else None,
    )
    if res.deleting:
        status = _add_deletion_progress(status, res, ctx)
    previous = conditions.find(res.status.get("conditions"), conditions.SYNCED)
    repeated = previous is not None and previous.get("reason") == reason
    events = () if repeated else (Event("Warning", reason, message),)
    return Outcome(status, events, retry_after=failure.retry_after, terminal=failure.terminal)


def report(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Action,
    answer: CloudRunner | None = None,
) -> Outcome:
    """What a pass that took `action` reports: status, conditions and Events (pure).

    `answer` is the API's response to the action's call (the created or updated runner). One small
    function per action below, so each reads on its own.
    """
    match action:
        case planning.ReserveRequestId():
            return _reserved(res, ctx, facts, action)
        case planning.Create():
            return _created(res, ctx, facts, action, answer)
        case planning.Bind():
            return _bound(res, ctx, facts, action)
        case planning.Adopt():
            return _adopted(res, ctx, facts, action)
        case planning.Update():
            return _updated(res, ctx, facts, action, answer)
        case planning.ApplyUpdate():
            return _update_applied(res, ctx, facts, action, answer)
        case planning.DeclineUpdateRequest():
            return _update_declined(res, ctx, facts, action)
        case planning.Delete(replacing=True):
            return _replacing(res, ctx, facts, action)
        case planning.ForgetOld():
            return _forgot(res, ctx, facts, action)
        case planning.Delete():
            return _deleting(res, ctx, facts, action)
        case planning.Release(orphaned):
            return released(res, ctx, orphaned=orphaned)
        case planning.Wait():
            return _waiting(res, ctx, facts, action)
        case planning.Idle():
            return _idle(res, ctx, facts, action)
        case planning.Conflict():
            return _conflict(res, ctx, facts, action)
    raise AssertionError(f"unhandled action {action!r}")


def _reserved(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.ReserveRequestId,
) -> Outcome:
    request_id, recreate = action.request_id, action.recreate
    now = ctx.now
    events: list[Event] = []
    extra = StatusPatch()
    # Full precision: a runner created in the same second but before the key is not ours.
    requested = now.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    extra |= StatusPatch(create_request_id=request_id, create_requested_time=requested)
    if ctx.credential:
        extra |= StatusPatch(credential_fingerprint=ctx.credential)
    extra |= StatusPatch(phase="Creating")
    if recreate:
        extra |= StatusPatch(runner_id=None, recreations=recreations(res) + 1)
        if (replacement := _replacement(res)) is not None:
            extra |= StatusPatch(replacement=replacement | Replacement(phase="Creating"))
        else:
            events.append(
                Event(
                    "Warning",
                    Reason.RECREATING_DELETED_RUNNER,
                    f"runner {res.spec.runner_id} was deleted outside Kubernetes; creating it again",
                )
            )
    status = _status(
        res,
        ctx,
        None,
        ready=_not_ready(Reason.CREATING, "preparing to create the runner"),
        synced=_synced(),
        extra=extra,
    )
    return Outcome(status, tuple(events))


def _created(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Create,
    answer: CloudRunner | None,
) -> Outcome:
    events: list[Event] = []
    extra = StatusPatch()
    created = answer
    extra |= StatusPatch(runner_id=res.spec.runner_id, adopted=False)
    if res.deleting:
        # The replay proved the runner is ours; the next pass deletes it.
        status = _status(res, ctx, created, ready=None, synced=_synced(), extra=extra)
        status = _add_deletion_progress(status, res, ctx)
        return Outcome(status, (), calls=("create",))
    if res.status.get("replacement"):
        extra |= StatusPatch(replacement=None)
        old_id = res.status["replacement"].get("fromRunnerId")
        events.append(
            Event("Normal", Reason.REPLACED, f"runner {old_id} was replaced by {res.spec.runner_id}")
        )
    else:
        events.append(Event("Normal", Reason.CREATED, f"created runner {res.spec.runner_id}"))
    return _observed(res, facts, ctx, created, events, extra, calls=("create",))


def _bound(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Bind,
) -> Outcome:
    observed = facts.observed
    events: list[Event] = []
    extra = StatusPatch()
    extra |= StatusPatch(runner_id=res.spec.runner_id, adopted=False)
    events.append(
        Event(
            "Normal",
            Reason.CREATE_CONFIRMED,
            f"runner {res.spec.runner_id} was created by this resource's request {facts.request_id} "
            "(its response was lost); it is managed from here",
        )
    )
    status = _status(
        res,
        ctx,
        observed,
        ready=_not_ready(Reason.CREATING, "the create landed; applying the spec"),
        synced=_synced(),
        extra=extra,
    )
    if res.deleting:
        status = _add_deletion_progress(status, res, ctx)
    return Outcome(status, tuple(events))


def _adopted(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Adopt,
) -> Outcome:
    observed = facts.observed
    events: list[Event] = []
    extra = StatusPatch()
    extra |= StatusPatch(runner_id=res.spec.runner_id, adopted=True)
    events.append(Event("Normal", Reason.ADOPTED, f"adopted existing runner {res.spec.runner_id}"))
    status = _status(
        res,
        ctx,
        observed,
        ready=_not_ready(Reason.ADOPTING, "adopted; applying the spec"),
        synced=_synced(),
        extra=extra,
    )
    return Outcome(status, tuple(events))


def _updated(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Update,
    answer: CloudRunner | None,
) -> Outcome:
    change = action.change
    events: list[Event] = []
    extra = StatusPatch()
    updated = answer
    drift = res.status.get("observedGeneration") == res.generation
    mask = ",".join(change.mask)
    if drift:
        events.append(
            Event(
                "Warning",
                Reason.DRIFT_CORRECTED,
                f"the runner was changed outside Kubernetes; restored {mask}",
            )
        )
    else:
        events.append(Event("Normal", Reason.UPDATED, f"updated {mask}"))
    return _observed(res, facts, ctx, updated, events, extra, calls=("update",))


def _update_applied(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.ApplyUpdate,
    answer: CloudRunner | None,
) -> Outcome:
    before = facts.observed
    from_revision = before.active_revision if before is not None else None
    to_revision = answer.target_revision if answer is not None else None
    channel = answer or before
    stamp = _rfc3339(ctx.now)
    applied = AppliedUpdate(
        trigger="WhenAvailable" if action.request is None else "Request",
        request=action.request,
        time=stamp,
        from_revision=from_revision,
        to_revision=to_revision,
        release_channel=channel.spec.release_channel if channel is not None and channel.spec else None,
    )
    extra = StatusPatch(last_applied_update=applied)
    why = "spec.updates.apply is WhenAvailable"
    if action.request is not None:
        extra |= StatusPatch(
            last_update_request=UpdateRequest(request=action.request, outcome="Applied", time=stamp)
        )
        why = f"requested by spec.updates.request {action.request!r}"
    message = f"applied the available update: revision {from_revision} -> {to_revision} ({why})"
    events = [Event("Normal", Reason.UPDATE_APPLIED, message)]
    return _observed(res, facts, ctx, answer, events, extra, calls=("applyAvailableUpdate",))


def _update_declined(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.DeclineUpdateRequest,
) -> Outcome:
    answer = UpdateRequest(request=action.request, outcome="NotAvailable", time=_rfc3339(ctx.now))
    message = (
        f"spec.updates.request {action.request!r}: the runner is already at the newest version of its "
        "release channel; nothing was applied (set a new value once status.updateAvailable is true)"
    )
    # Normal, not Warning: what the request asks for (the newest version) already holds.
    events = [Event("Normal", Reason.UPDATE_NOT_AVAILABLE, message)]
    return _observed(res, facts, ctx, facts.observed, events, StatusPatch(last_update_request=answer))


def _replacing(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Delete,
) -> Outcome:
    runner_id = action.runner_id
    now = ctx.now
    events: list[Event] = []
    extra = StatusPatch()
    replacement = _replacement(res) or Replacement(from_runner_id=runner_id, started_time=_rfc3339(now))
    extra |= StatusPatch(
        replacement=replacement | Replacement(to_runner_id=res.spec.runner_id, phase="DeletingOld")
    )
    events.append(
        Event(
            "Normal",
            Reason.REPLACEMENT_STARTED,
            f"replacing runner {runner_id} by {res.spec.runner_id}: decommissioning the old one",
        )
    )
    status = _status(
        res,
        ctx,
        None,
        ready=_not_ready(Reason.REPLACING, f"decommissioning runner {runner_id}"),
        synced=_synced(),
        extra=extra,
        keep_observation=True,
    )
    return Outcome(status, tuple(events), calls=("delete",))


def _forgot(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.ForgetOld,
) -> Outcome:
    runner_id = action.runner_id
    events: list[Event] = []
    extra = StatusPatch()
    replacement = _replacement(res) or Replacement(from_runner_id=runner_id)
    extra |= StatusPatch(
        runner_id=None,
        create_request_id=None,
        recreations=recreations(res) + 1,
        replacement=replacement | Replacement(phase="Creating"),
    )
    status = _status(
        res,
        ctx,
        None,
        ready=_not_ready(Reason.REPLACING, f"runner {runner_id} is gone"),
        synced=_synced(),
        extra=extra,
        keep_observation=True,
    )
    return Outcome(status, tuple(events))


def _deleting(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Delete,
) -> Outcome:
    runner_id = action.runner_id
    observed = facts.observed
    events: list[Event] = []
    events.append(Event("Normal", Reason.DELETION_REQUESTED, f"requested deletion of runner {runner_id}"))
    status = _status(
        res,
        ctx,
        observed,
        ready=_not_ready(Reason.DELETING, "decommissioning the runner"),
        synced=_synced(),
    )
    status = _add_deletion_progress(status, res, ctx)
    return Outcome(status, tuple(events), calls=("delete",))


def _waiting(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Wait,
) -> Outcome:
    reason, message = action.reason, action.message
    observed = facts.observed
    events: list[Event] = []
    extra = StatusPatch()
    if res.deleting:
        status = _status(res, ctx, observed, ready=_not_ready(reason, message), synced=_synced())
        status = _add_deletion_progress(status, res, ctx)
        stalled_now = bool(status.deletion and status.deletion.stalled)
        if stalled_now and not (res.status.get("deletion") or {}).get("stalled"):
            stalled = status.condition(conditions.STALLED)
            events.append(Event("Warning", Reason.DELETION_STALLED, str(stalled and stalled.message)))
        return Outcome(status, tuple(events))
    if reason in (Reason.REPLACING, Reason.AWAITING_FINALIZER):
        # The old runner's decommission: neither the new runner (absent) nor the old one (DELETING,
        # read as an out-of-band deletion) says what is going on; the wait itself does. Likewise the
        # moment before the finalizer is on the resource.
        status = _status(
            res,
            ctx,
            None,
            ready=_not_ready(reason, message),
            synced=_synced(),
            extra=extra,
            keep_observation=True,
        )
        return Outcome(status, tuple(events))
    return _observed(res, facts, ctx, observed, events, extra)


def _idle(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Idle,
) -> Outcome:
    observed = facts.observed
    events: list[Event] = []
    extra = StatusPatch()
    if facts.paused:
        extra |= StatusPatch(plan=_would(dataclasses.replace(facts, paused=False)))
    return _observed(res, facts, ctx, observed, events, extra)


def _conflict(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Conflict,
) -> Outcome:
    reason, message = action.reason, action.message
    observed = facts.observed
    events: list[Event] = []
    extra = StatusPatch()
    # Never mirror a runner this resource does not own (or that a new credential found instead).
    mirrored = observed if facts.bound and reason != "RunnerNotVisible" else None
    if action.forget_request:
        # Provably not ours: later passes adopt or report, no replay.
        extra |= StatusPatch(create_request_id=None)
    status = _status(
        res,
        ctx,
        mirrored,
        ready=None if mirrored is not None else _not_ready(reason, message),
        synced=conditions.Condition(conditions.SYNCED, "False", reason, message),
        stalled=True,
        extra=extra if mirrored is not None else extra | StatusPatch(phase="Conflict"),
        keep_observation=facts.bound,
    )
    if res.deleting:
        status = _add_deletion_progress(status, res, ctx)
    previous = conditions.find(res.status.get("conditions"), conditions.SYNCED)
    if previous is None or previous.get("reason") != reason:
        events.append(Event("Warning", reason, message))
    return Outcome(status, tuple(events), terminal=True)


def cluster_taken(res: resource.ManagedRunnerResource, holder: str | None, code: str) -> planning.Conflict:
    """ALREADY_EXISTS on a first create (nothing had this ID): the cluster already has a runner."""
    where = f" (runner {holder!r})" if holder else ""
    message = (
        f"cluster {res.spec.cluster_id} already has a managed runner{where}: a cluster holds at most one. "
        "Adopt that runner (same runnerId, spec.adopt: true) or delete it first"
    )
    return planning.Conflict(Reason.CLUSTER_TAKEN, f"{message} [{code}]")


def _observed(
    res: resource.ManagedRunnerResource,
    facts: planning.Facts,
    ctx: Context,
    runner: CloudRunner | None,
    events: list[Event],
    extra: StatusPatch,
    *,
    calls: tuple[str, ...] = (),
) -> Outcome:
    """Report a live runner: Ready when installed, connected, rolled out and in sync with the spec."""
    action = planning.plan(
        planning.Facts(desired=facts.desired, observed=runner, bound=True, paused=res.spec.paused)
    )
    if isinstance(action, planning.Idle) and runner is not None and (found := readiness(runner)).ready:
        ready = conditions.Condition(conditions.READY, "True", found.reason, found.message)
    elif isinstance(action, (planning.Idle, planning.Wait)):
        ready = _not_ready(action.reason, action.message)
    else:
        ready = _not_ready(Reason.UPDATING, "changes were just sent")
    events.extend(_transitions(res, runner, ready))
    status = _status(res, ctx, runner, ready=ready, synced=_synced(res.spec.paused), extra=extra)
    return Outcome(status, tuple(events), calls=calls)


def _transitions(
    res: resource.ManagedRunnerResource, runner: CloudRunner | None, ready: conditions.Condition
) -> list[Event]:
    before = conditions.find(res.status.get("conditions"), conditions.READY) or {}
    if before.get("status") == ready.status and before.get("reason") == ready.reason:
        return []
    if ready.status == "True":
        return [Event("Normal", Reason.READY, ready.message)]
    if ready.reason in ("InstallFailed", "Disconnected"):
        return [Event("Warning", ready.reason, ready.message)]
    return []


def _synced(paused: bool = False) -> conditions.Condition:
    if paused:
        return conditions.Condition(
            conditions.SYNCED, "False", Reason.PAUSED, "spec.paused is true: changes are not sent to the API"
        )
    return conditions.Condition(conditions.SYNCED, "True", Reason.SYNCED, "the last pass applied the spec")


def _not_ready(reason: Reason, message: str) -> conditions.Condition:
    return conditions.Condition(conditions.READY, "False", reason, message)


def _status(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    runner: CloudRunner | None,
    *,
    ready: conditions.Condition | None,
    synced: conditions.Condition,
    stalled: bool = False,
    extra: StatusPatch | None = None,
    keep_observation: bool = False,
) -> StatusPatch:
    """The status patch: cloud observations, conditions for this generation, bookkeeping fields."""
    now = ctx.now
    stamp = _rfc3339(now)
    status = StatusPatch()
    if runner is not None:
        status |= reporting.observed_status(runner)
        status |= _update_available_since(res.status, runner, stamp)
        status |= StatusPatch(phase=reporting.phase(runner), last_observed_time=stamp)
        if ctx.credential:
            # The credential that last saw the runner: only its NOT_FOUND proves the runner is gone.
            status |= StatusPatch(credential_fingerprint=ctx.credential)
    elif not keep_observation:
        status |= StatusPatch(phase="Absent" if not res.deleting else "Deleted")
    updates = [c for c in (ready, synced) if c is not None]
    if ready is None and runner is None and not keep_observation:
        updates.insert(0, _not_ready(Reason.ABSENT, "the runner does not exist"))
    elif ready is None and conditions.find(res.status.get("conditions"), conditions.READY) is None:
        # Every resource carries Ready after its first pass, whatever failed (kubectl wait, dashboards).
        updates.insert(0, conditions.Condition(conditions.READY, "Unknown", synced.reason, synced.message))
    updates.append(
        conditions.Condition(conditions.STALLED, "True", synced.reason, synced.message)
        if stalled
        else conditions.Condition(conditions.STALLED, "False", Reason.PROGRESSING, "")
    )
    status |= StatusPatch(
        conditions=conditions.merge(
            res.status.get("conditions"), updates, generation=res.generation, now=stamp
        )
    )
    if synced.status == "True" or synced.reason == "Paused":
        status |= StatusPatch(observed_generation=res.generation)
    if res.status.get("plan") and not res.spec.paused:
        status |= StatusPatch(plan=None)
    if ctx.track_secret:
        status |= StatusPatch(credentials_secret=ctx.credentials_secret)
    if extra is not None:
        status |= extra
    return _keep_recent_stamp(status, res.status, now)


def _update_available_since(previous: Mapping[str, Any], runner: CloudRunner, stamp: str) -> StatusPatch:
    """When an update was first seen available; removed once none is."""
    since = previous.get("updateAvailableSince")
    if runner.update_available:
        return StatusPatch() if since else StatusPatch(update_available_since=stamp)
    return StatusPatch(update_available_since=None) if since else StatusPatch()


STAMP_REFRESH = timedelta(minutes=15)
"""How stale the observation stamps may get while reads find nothing new (see `_keep_recent_stamp`).

Every steady-state resync used to refresh them (it was 30 s): one status write, resourceVersion and watch
event per runner per resync for a read that found nothing, which at thousands of runners is most of
the API server's and the operator's steady work. Field practice (Crossplane, Config Connector) is no
write at all for an unchanged observation; a quarter of an hour keeps a visible heartbeat."""

STAMPS = ("lastObservedTime", "lastHeartbeatTime")
"""Status fields that move on every read of a healthy runner: the time of our read, and the cloud's
last heartbeat from the runner (it advances every few seconds while the runner is connected). Alone,
neither is a change worth a write; both are refreshed with any other change or once STAMP_REFRESH old."""


def stamps_due(status: Mapping[str, Any]) -> datetime | None:
    """When a steady pass next refreshes the observation stamps in `status` (None: at once)."""
    stamp = status.get("lastObservedTime")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) + STAMP_REFRESH
    except ValueError:
        return None


def _keep_recent_stamp(status: StatusPatch, previous: Mapping[str, Any], now: datetime) -> StatusPatch:
    """Keep the previous stamps while nothing else changed and the observation stamp is recent.

    New stamps on every poll would make every object a status write, a new resourceVersion and a
    watch event each time; at thousands of objects that load lands on the API server and on every
    watcher. With this, an unchanged observation costs no write until the stamp is STAMP_REFRESH old.
    """
    before = previous.get("lastObservedTime")
    if not status.is_set("last_observed_time") or not isinstance(before, str):
        return status
    try:
        age = now - datetime.fromisoformat(before.replace("Z", "+00:00"))
    except ValueError:
        return status
    patch = status.to_patch()
    if not timedelta(0) <= age < STAMP_REFRESH or any(
        value != previous.get(key) for key, value in patch.items() if key not in STAMPS
    ):
        return status
    return status | StatusPatch(
        last_observed_time=before, last_heartbeat_time=previous.get("lastHeartbeatTime")
    )


def _would(facts: planning.Facts) -> PlanPreview:
    """What an unpaused pass would send: the preview a paused resource shows in status.plan."""
    action = planning.plan(facts)
    match action:
        case planning.ReserveRequestId() | planning.Create():
            return PlanPreview(action="create", update_mask=())
        case planning.Update(change):
            return PlanPreview(action="update", update_mask=tuple(change.mask))
        case planning.ApplyUpdate():
            return PlanPreview(action="applyUpdate", update_mask=())
        case planning.Delete(_, replacing=True) | planning.ForgetOld():
            return PlanPreview(action="replace", update_mask=())
    return PlanPreview(action="none", update_mask=())


def _replacement(res: resource.ManagedRunnerResource) -> Replacement | None:
    """The replacement under way, as stored (None when there is none)."""
    stored = res.status.get("replacement")
    return Replacement.model_validate(stored) if stored else None


def _add_deletion_progress(
    status: StatusPatch, res: resource.ManagedRunnerResource, ctx: Context
) -> StatusPatch:
    """Visible, bounded deletion: when it started, its deadline, and whether it is past it."""
    now = ctx.now
    previous = res.status.get("deletion") or {}
    started = previous.get("requestedTime") or _rfc3339(now)
    started_at = datetime.fromisoformat(started.replace("Z", "+00:00"))
    deadline = started_at + timedelta(seconds=ctx.deletion_timeout)
    stalled = now >= deadline
    status |= StatusPatch(
        deletion=DeletionProgress(requested_time=started, deadline_time=_rfc3339(deadline), stalled=stalled)
    )
    if stalled:
        age = int((now - started_at).total_seconds())
        message = (
            f"runner {res.spec.runner_id} is still not deleted {age}s after the request (deadline "
            f"{_rfc3339(deadline)}); still retrying. Check the runner in the CoreWeave console; to give up "
            "on it, set spec.deletionPolicy: Orphan"
        )
        status |= StatusPatch(
            conditions=conditions.merge(
                status.conditions or res.status.get("conditions"),
                [conditions.Condition(conditions.STALLED, "True", Reason.DELETION_STALLED, message)],
                generation=res.generation,
                now=_rfc3339(now),
            )
        )
    return status


@dataclass(frozen=True)
class Failure:
    """How a pass that could not talk to the API (or was told no) is reported."""

    reason: Reason
    message: str
    terminal: bool
    """only a spec change helps: no eager retry."""
    needs_person: bool
    """no retry can fix it (Stalled=True, Ready=False): a Secret, the token, a route or the spec."""
    retry_after: float | None = None


FAILURES: tuple[tuple[type[errors.CloudError], Reason, bool, bool], ...] = (
    # (error, condition reason, terminal?, needs a person?); first match wins, so subclasses first.
    (errors.RateLimited, Reason.RATE_LIMITED, False, False),
    (errors.Unavailable, Reason.API_UNAVAILABLE, False, False),
    (errors.StaleEtag, Reason.STALE_ETAG, False, False),
    # A race with a change outside Kubernetes (the runner went between the read and the call): the next
    # pass observes again, so retried like the catalogue says, never "needs a person".
    (errors.NotFound, Reason.NOT_FOUND, False, False),
    (errors.AlreadyExists, Reason.ALREADY_EXISTS, False, False),
    (errors.Unauthenticated, Reason.CREDENTIALS_REJECTED, False, True),
    (errors.PermissionDenied, Reason.PERMISSION_DENIED, False, True),
    (errors.Misrouted, Reason.ENDPOINT_MISROUTED, False, True),
    (errors.InvalidArgument, Reason.INVALID_SPEC, True, True),
    (errors.IncompatibleServer, Reason.INCOMPATIBLE_SERVER, True, True),
)
"""The one table from an API error to what the user sees."""


def classify(exc: Exception) -> Failure:
    if isinstance(exc, CredentialsProblem):
        return Failure(exc.reason, exc.message, terminal=False, needs_person=True)
    for kind, reason, terminal, person in FAILURES:
        if isinstance(exc, kind):
            retry_after = exc.retry_after if isinstance(exc, errors.RateLimited) else None
            return Failure(reason, _describe(exc), terminal, person, retry_after)
    if isinstance(exc, errors.CloudError):
        # Any other API answer: its class names it (an unknown code: ApiError); one no retry can fix
        # needs a person.
        known = {reason.value: reason for reason in Reason}
        reason = known.get(type(exc).__name__, Reason.API_ERROR)
        return Failure(reason, str(exc), not exc.retryable, not exc.retryable)
    return Failure(Reason.INTERNAL_ERROR, str(exc), terminal=False, needs_person=False)


def _describe(exc: errors.CloudError) -> str:
    if isinstance(exc, errors.InvalidArgument) and exc.field_violations:
        details = "; ".join(f"{f}: {d}" for f, d in exc.field_violations)
        return f"the API rejected the spec: {details}"
    if isinstance(exc, errors.Unauthenticated):
        return "the API rejected the token (401): check the credentials Secret"
    if isinstance(exc, errors.PermissionDenied):
        return "the token lacks the Sandbox Admin role (403): grant SANDBOX_ADMIN or use another token"
    return str(exc)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
