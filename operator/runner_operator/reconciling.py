"""The imperative shell: observe the cloud runner, plan, perform at most ONE mutating call, report.

Kopf-free. It returns an `Outcome` (status patch, events, when to look again, whether the
finalizer may go); the handler layer applies it. API errors are caught here and turned into
conditions, so every caller reports failures the same way.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pydantic

from runner_operator import conditions, planning, reporting, resource
from runner_operator.cloud import errors
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import InstallStatus, ManagedRunner
from runner_operator.desired import MissingSecretValue, SecretValues, desired_runner

Cadence = Literal["fast", "medium", "slow", "none"]


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Outcome:
    """What one pass decided: the status to write and what happens next."""

    status: dict[str, Any]
    events: tuple[Event, ...] = ()
    retry_after: float | None = None
    """a server-imposed delay (Retry-After) that beats the cadence."""
    release: bool = False
    """deletion is complete (or orphaned): the finalizer may be removed."""
    terminal: bool = False
    """only a spec change (or an outside fix) can help: do not retry eagerly."""
    calls: tuple[str, ...] = field(default=())
    """the mutating calls made (for logs and tests)."""

    @property
    def cadence(self) -> Cadence:
        """When to look again; derived from the status so kopf timer filters agree with it."""
        if self.release:
            return "none"
        found = reporting.cadence(self.status)
        return "fast" if found == "fast" else "medium" if found == "medium" else "slow"


@dataclass(frozen=True)
class Context:
    """Inputs of one pass that are not the resource itself."""

    now: datetime
    deletion_timeout: float
    secrets: SecretValues = field(default_factory=dict)
    claimed_by: str | None = None
    max_age: float = 0.0
    """how old a batched (list) observation may be; 0 reads each runner with its own GET."""
    bound_here: str | None = None
    """the runner this process bound the resource to, if its status write may not be visible yet."""
    cache: RunnerCache | None = None
    credential: str = ""
    """fingerprint of the credential this pass uses (credentials.fingerprint); never the token."""
    credentials_secret: str | None = None
    """the resource's own credentials Secret this pass protected (None: the operator's default)."""
    track_secret: bool = False
    """whether this pass resolved credentials, so `credentials_secret` is current and is recorded."""


REQUEST_KEYS = uuid.UUID("6c1d3f0e-3a55-4d4c-9c55-7f0f1c0b2d11")


def request_key(res: resource.ManagedRunnerResource, *, recreations: int) -> str:
    """Deterministic create key: same resource, runner ID and recreation count give the same key.

    It is also persisted in status before the call; being derivable means even a pass that reads
    a stale status replays the same create instead of duplicating it or reporting a false conflict.
    """
    return str(uuid.uuid5(REQUEST_KEYS, f"{res.uid}/{res.spec.runner_id}/{recreations}"))


def _recreations(res: resource.ManagedRunnerResource) -> int:
    return int(res.status.get("recreations") or 0)


class CredentialsProblem(Exception):
    """The credentials or a referenced Secret could not be read (reported, retried slowly)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


async def reconcile(res: resource.ManagedRunnerResource, cloud: CloudClient, ctx: Context) -> Outcome:
    """One observe-plan-act pass for a live or deleting resource."""
    try:
        desired = desired_runner(res.spec, ctx.secrets, lenient=res.deleting)
    except MissingSecretValue as exc:
        return failed(res, ctx, CredentialsProblem("SecretNotFound", f"cannot resolve {exc.args[0]}"))
    try:
        held_id = res.status.get("runnerId")
        # A pass can run on a body older than our last status write; what this process bound counts.
        bound = res.spec.runner_id in (held_id, ctx.bound_here)
        request_id = res.status.get("createRequestId")
        # Absence is confirmed with a direct GET even before a create key is reserved: a list may be
        # older than a runner someone else just made, and the reservation time must postdate it.
        observed = await _find(cloud, ctx, res.spec.runner_id)
        held_elsewhere = str(held_id) if held_id and held_id != res.spec.runner_id else None
        held = await _find(cloud, ctx, held_elsewhere) if held_elsewhere else None
        recorded = res.status.get("credentialFingerprint")
        facts = planning.Facts(
            desired=desired,
            observed=observed,
            deleting=res.deleting,
            paused=res.spec.paused,
            adopt=res.spec.adopt,
            deletion_policy=res.spec.deletion_policy,
            bound=bound,
            request_id=request_id,
            new_request_id=request_key(res, recreations=_recreations(res) + (1 if bound else 0)),
            claimed_by=ctx.claimed_by,
            replace=res.spec.replacement_policy == "Replace",
            held_id=held_elsewhere,
            held=held,
            credential_changed=bool(recorded and ctx.credential and recorded != ctx.credential),
            reserved_at=_parse_time(res.status.get("createRequestedTime")),
            seen_created=_parse_time(res.status.get("createTime")),
        )
        if not res.deleting and _may_replace(facts):
            holder = await _cluster_holder(cloud, ctx, res.spec.cluster_id)
            facts = dataclasses.replace(facts, cluster_holder=holder)
        return await _perform(res, cloud, ctx, facts, planning.plan(facts))
    except errors.CloudError as exc:
        return failed(res, ctx, exc)


async def _find(
    cloud: CloudClient, ctx: Context, runner_id: str, *, trust_absence: bool = False
) -> ManagedRunner | None:
    if ctx.cache is None:
        return await cloud.find(runner_id)
    return await ctx.cache.find(runner_id, ctx.max_age, trust_absence=trust_absence)


def _may_replace(facts: planning.Facts) -> bool:
    """Whether this pass may delete the old runner, so the new cluster's holder must be known first.

    Only then: the holder is read from a fresh list, which the fast passes that wait for the old
    runner's decommission (or follow it) must not pay for.
    """
    if not facts.replace or facts.paused:
        return False
    old = facts.held if facts.held_id else facts.observed
    if old is None or old.install_status == InstallStatus.DELETING:
        return False
    return bool(facts.held_id) or (facts.bound and bool(planning.identity_changes(facts.desired, old)))


async def _cluster_holder(cloud: CloudClient, ctx: Context, cluster_id: str) -> str | None:
    """The runner that holds `cluster_id` in the cloud, from a list taken now (it may decide a delete)."""
    if ctx.cache is not None:
        identities = await ctx.cache.identities(0)
    else:
        identities = [identity async for identity, _ in cloud.iter_entries()]
    for identity in identities:
        if (identity.cluster_id or "").lower() == cluster_id.lower():
            return identity.runner_id
    return None


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _wrote(ctx: Context, runner_id: str, result: ManagedRunner | None = None) -> None:
    """Noted before and after each write: a list that started in between may not show it."""
    if ctx.cache is not None:
        ctx.cache.note_write(runner_id, result)


def unreadable(body: Mapping[str, Any], now: datetime, exc: ValueError) -> Outcome:
    """A spec this version cannot read: Ready/Synced False and Stalled True, one Event per distinct problem.

    Happens after a rollback to a version that does not know a newer field (Helm never downgrades
    CRDs). No status write and no Event while the problem stays the same, so no per-pass churn.
    """
    previous: Mapping[str, Any] = body.get("status") or {}
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    message = f"the spec could not be read by this operator version: {_summary(exc)}"
    reason = "InvalidSpec"
    status = {
        "phase": reason,
        "conditions": conditions.merge(
            previous.get("conditions"),
            [
                _not_ready(reason, message),
                conditions.Condition(conditions.SYNCED, "False", reason, message),
                conditions.Condition(conditions.STALLED, "True", reason, message),
            ],
            generation=generation,
            now=_rfc3339(now),
        ),
    }
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
        ("Orphaned", f"left runner {res.spec.runner_id} in place (deletionPolicy: Orphan)")
        if orphaned
        else ("Deleted", f"runner {res.spec.runner_id} is gone")
    )
    status = _status(res, ctx, None, ready=_not_ready(reason, message), synced=_synced())
    return Outcome(status, (Event("Normal", reason, message),), release=True)


def failed(res: resource.ManagedRunnerResource, ctx: Context, exc: Exception) -> Outcome:
    """The outcome of a pass that could not talk to the API (or was told no)."""
    reason, terminal = _classify(exc)
    message = _describe(exc)
    person = terminal or _needs_person(exc)
    retry_after = exc.retry_after if isinstance(exc, errors.RateLimited) else None
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
        extra={"phase": reason} if person else None,
    )
    if res.deleting:
        _add_deletion_progress(status, res, ctx)
    previous = conditions.find(res.status.get("conditions"), conditions.SYNCED)
    repeated = previous is not None and previous.get("reason") == reason
    events = () if repeated else (Event("Warning", reason, message),)
    return Outcome(status, events, retry_after=retry_after, terminal=terminal)


async def _perform(
    res: resource.ManagedRunnerResource,
    cloud: CloudClient,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Action,
) -> Outcome:
    observed = facts.observed
    now = ctx.now
    events: list[Event] = []
    extra: dict[str, Any] = {}
    match action:
        case planning.ReserveRequestId(request_id, recreate):
            extra["createRequestId"] = request_id
            # Full precision: a runner created in the same second but before the key is not ours.
            extra["createRequestedTime"] = (
                now.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
            )
            if ctx.credential:
                extra["credentialFingerprint"] = ctx.credential
            extra["phase"] = "Creating"
            if recreate:
                extra["runnerId"] = None
                extra["recreations"] = _recreations(res) + 1
                if res.status.get("replacement"):
                    extra["replacement"] = {**res.status["replacement"], "phase": "Creating"}
                else:
                    events.append(
                        Event(
                            "Warning",
                            "RecreatingDeletedRunner",
                            f"runner {res.spec.runner_id} was deleted outside Kubernetes; creating it again",
                        )
                    )
            status = _status(
                res,
                ctx,
                None,
                ready=_not_ready("Creating", "preparing to create the runner"),
                synced=_synced(),
                extra=extra,
            )
            return Outcome(status, tuple(events))
        case planning.Create(body, request_id):
            _wrote(ctx, res.spec.runner_id)
            try:
                created = await cloud.create(body, request_id)
                _wrote(ctx, res.spec.runner_id, created)
            except (errors.AlreadyExists, errors.InvalidArgument) as exc:
                if observed is not None:
                    # A replay the server refused (the body may have changed since): decide on other evidence.
                    refused = dataclasses.replace(facts, replay_refused=True)
                    return await _perform(res, cloud, ctx, refused, planning.plan(refused))
                if isinstance(exc, errors.InvalidArgument):
                    raise
                return await _create_conflict(res, cloud, ctx, facts, exc)
            extra.update(runnerId=res.spec.runner_id, adopted=False)
            if res.deleting:
                # The replay proved the runner is ours; the next pass deletes it.
                status = _status(res, ctx, created, ready=None, synced=_synced(), extra=extra)
                _add_deletion_progress(status, res, ctx)
                return Outcome(status, (), calls=("create",))
            if res.status.get("replacement"):
                extra["replacement"] = None
                old_id = res.status["replacement"].get("fromRunnerId")
                events.append(
                    Event("Normal", "Replaced", f"runner {old_id} was replaced by {res.spec.runner_id}")
                )
            else:
                events.append(Event("Normal", "Created", f"created runner {res.spec.runner_id}"))
            return _observed(res, facts, ctx, created, events, extra, calls=("create",))
        case planning.Bind():
            extra.update(runnerId=res.spec.runner_id, adopted=False)
            events.append(
                Event(
                    "Normal",
                    "CreateConfirmed",
                    f"runner {res.spec.runner_id} was created by this resource's request {facts.request_id} "
                    "(its response was lost); it is managed from here",
                )
            )
            status = _status(
                res,
                ctx,
                observed,
                ready=_not_ready("Creating", "the create landed; applying the spec"),
                synced=_synced(),
                extra=extra,
            )
            if res.deleting:
                _add_deletion_progress(status, res, ctx)
            return Outcome(status, tuple(events))
        case planning.Adopt():
            extra.update(runnerId=res.spec.runner_id, adopted=True)
            events.append(Event("Normal", "Adopted", f"adopted existing runner {res.spec.runner_id}"))
            status = _status(
                res,
                ctx,
                observed,
                ready=_not_ready("Adopting", "adopted; applying the spec"),
                synced=_synced(),
                extra=extra,
            )
            return Outcome(status, tuple(events))
        case planning.Update(change):
            _wrote(ctx, res.spec.runner_id)
            updated = await cloud.update(res.spec.runner_id, change.body, change.mask, etag=change.etag)
            _wrote(ctx, res.spec.runner_id, updated)
            drift = res.status.get("observedGeneration") == res.generation
            mask = ",".join(change.mask)
            if drift:
                events.append(
                    Event(
                        "Warning",
                        "DriftCorrected",
                        f"the runner was changed outside Kubernetes; restored {mask}",
                    )
                )
            else:
                events.append(Event("Normal", "Updated", f"updated {mask}"))
            return _observed(res, facts, ctx, updated, events, extra, calls=("update",))
        case planning.Delete(runner_id, replacing=True):
            _wrote(ctx, runner_id)
            await cloud.delete(runner_id, allow_missing=True)
            _wrote(ctx, runner_id)
            replacement = res.status.get("replacement") or {
                "fromRunnerId": runner_id,
                "startedTime": _rfc3339(now),
            }
            extra["replacement"] = {**replacement, "toRunnerId": res.spec.runner_id, "phase": "DeletingOld"}
            events.append(
                Event(
                    "Normal",
                    "ReplacementStarted",
                    f"replacing runner {runner_id} by {res.spec.runner_id}: decommissioning the old one",
                )
            )
            status = _status(
                res,
                ctx,
                None,
                ready=_not_ready("Replacing", f"decommissioning runner {runner_id}"),
                synced=_synced(),
                extra=extra,
                keep_observation=True,
            )
            return Outcome(status, tuple(events), calls=("delete",))
        case planning.ForgetOld(runner_id):
            replacement = res.status.get("replacement") or {"fromRunnerId": runner_id}
            extra.update(
                runnerId=None,
                createRequestId=None,
                recreations=_recreations(res) + 1,
                replacement={**replacement, "phase": "Creating"},
            )
            status = _status(
                res,
                ctx,
                None,
                ready=_not_ready("Replacing", f"runner {runner_id} is gone"),
                synced=_synced(),
                extra=extra,
                keep_observation=True,
            )
            return Outcome(status, tuple(events))
        case planning.Delete(runner_id):
            _wrote(ctx, runner_id)
            await cloud.delete(runner_id, allow_missing=True)
            _wrote(ctx, runner_id)
            events.append(Event("Normal", "DeletionRequested", f"requested deletion of runner {runner_id}"))
            status = _status(
                res,
                ctx,
                observed,
                ready=_not_ready("Deleting", "decommissioning the runner"),
                synced=_synced(),
            )
            _add_deletion_progress(status, res, ctx)
            return Outcome(status, tuple(events), calls=("delete",))
        case planning.Release(orphaned):
            return released(res, ctx, orphaned=orphaned)
        case planning.Wait(reason, message):
            if res.deleting:
                status = _status(res, ctx, observed, ready=_not_ready(reason, message), synced=_synced())
                _add_deletion_progress(status, res, ctx)
                if status["deletion"]["stalled"] and not (res.status.get("deletion") or {}).get("stalled"):
                    stalled = conditions.find(status["conditions"], conditions.STALLED) or {}
                    events.append(Event("Warning", "DeletionStalled", str(stalled.get("message"))))
                return Outcome(status, tuple(events))
            return _observed(res, facts, ctx, observed, events, extra)
        case planning.Idle():
            if facts.paused:
                extra["plan"] = _would(dataclasses.replace(facts, paused=False))
            return _observed(res, facts, ctx, observed, events, extra)
        case planning.Conflict(reason, message):
            # Never mirror a runner this resource does not own (or that a new credential found instead).
            mirrored = observed if facts.bound and reason != "RunnerNotVisible" else None
            if action.forget_request:
                extra["createRequestId"] = None  # provably not ours: later passes adopt or report, no replay
            status = _status(
                res,
                ctx,
                mirrored,
                ready=None if mirrored is not None else _not_ready(reason, message),
                synced=conditions.Condition(conditions.SYNCED, "False", reason, message),
                stalled=True,
                extra=extra if mirrored is not None else {**extra, "phase": "Conflict"},
                keep_observation=facts.bound,
            )
            if res.deleting:
                _add_deletion_progress(status, res, ctx)
            previous = conditions.find(res.status.get("conditions"), conditions.SYNCED)
            if previous is None or previous.get("reason") != reason:
                events.append(Event("Warning", reason, message))
            return Outcome(status, tuple(events), terminal=True)
    raise AssertionError(f"unhandled action {action!r}")


async def _create_conflict(
    res: resource.ManagedRunnerResource,
    cloud: CloudClient,
    ctx: Context,
    facts: planning.Facts,
    exc: errors.AlreadyExists,
) -> Outcome:
    """ALREADY_EXISTS on a first create (nothing had this ID): the cluster already has a runner."""
    holder = await _cluster_holder(cloud, ctx, res.spec.cluster_id)
    where = f" (runner {holder!r})" if holder else ""
    message = (
        f"cluster {res.spec.cluster_id} already has a managed runner{where}: a cluster holds at most one. "
        "Adopt that runner (same runnerId, spec.adopt: true) or delete it first"
    )
    return await _perform(
        res,
        cloud,
        ctx,
        facts,
        planning.Conflict("ClusterTaken", message + f" [{exc.code}]"),
    )


def _observed(
    res: resource.ManagedRunnerResource,
    facts: planning.Facts,
    ctx: Context,
    runner: ManagedRunner | None,
    events: list[Event],
    extra: dict[str, Any],
    *,
    calls: tuple[str, ...] = (),
) -> Outcome:
    """Report a live runner: Ready when installed, connected, rolled out and in sync with the spec."""
    action = planning.plan(
        planning.Facts(desired=facts.desired, observed=runner, bound=True, paused=res.spec.paused)
    )
    if isinstance(action, planning.Idle) and runner is not None and runner.ready:
        ready = conditions.Condition(
            conditions.READY,
            "True",
            "Available",
            f"runner {res.spec.runner_id} is installed, connected and at revision "
            f"{runner.target_revision or 0}",
        )
    elif isinstance(action, (planning.Idle, planning.Wait)):
        ready = _not_ready(action.reason, action.message)
    else:
        ready = _not_ready("Updating", "changes were just sent")
    events.extend(_transitions(res, runner, ready))
    status = _status(res, ctx, runner, ready=ready, synced=_synced(res.spec.paused), extra=extra)
    return Outcome(status, tuple(events), calls=calls)


def _transitions(
    res: resource.ManagedRunnerResource, runner: ManagedRunner | None, ready: conditions.Condition
) -> list[Event]:
    before = conditions.find(res.status.get("conditions"), conditions.READY) or {}
    if before.get("status") == ready.status and before.get("reason") == ready.reason:
        return []
    if ready.status == "True":
        return [Event("Normal", "Ready", ready.message)]
    if ready.reason in ("InstallFailed", "Disconnected"):
        return [Event("Warning", ready.reason, ready.message)]
    return []


def _synced(paused: bool = False) -> conditions.Condition:
    if paused:
        return conditions.Condition(
            conditions.SYNCED, "False", "Paused", "spec.paused is true: changes are not sent to the API"
        )
    return conditions.Condition(conditions.SYNCED, "True", "Synced", "the last pass applied the spec")


def _not_ready(reason: str, message: str) -> conditions.Condition:
    return conditions.Condition(conditions.READY, "False", reason, message)


def _status(
    res: resource.ManagedRunnerResource,
    ctx: Context,
    runner: ManagedRunner | None,
    *,
    ready: conditions.Condition | None,
    synced: conditions.Condition,
    stalled: bool = False,
    extra: Mapping[str, Any] | None = None,
    keep_observation: bool = False,
) -> dict[str, Any]:
    """The status patch: cloud observations, conditions for this generation, bookkeeping fields."""
    now = ctx.now
    stamp = _rfc3339(now)
    status: dict[str, Any] = {}
    if runner is not None:
        status.update(reporting.observed_status(runner))
        status["phase"] = reporting.phase(runner)
        status["lastObservedTime"] = stamp
        if ctx.credential:
            # The credential that last saw the runner: only its NOT_FOUND proves the runner is gone.
            status["credentialFingerprint"] = ctx.credential
    elif not keep_observation:
        status["phase"] = "Absent" if not res.deleting else "Deleted"
    updates = [c for c in (ready, synced) if c is not None]
    if ready is None and runner is None and not keep_observation:
        updates.insert(0, _not_ready("Absent", "the runner does not exist"))
    elif ready is None and conditions.find(res.status.get("conditions"), conditions.READY) is None:
        # Every resource carries Ready after its first pass, whatever failed (kubectl wait, dashboards).
        updates.insert(0, conditions.Condition(conditions.READY, "Unknown", synced.reason, synced.message))
    updates.append(
        conditions.Condition(conditions.STALLED, "True", synced.reason, synced.message)
        if stalled
        else conditions.Condition(conditions.STALLED, "False", "Progressing", "")
    )
    status["conditions"] = conditions.merge(
        res.status.get("conditions"), updates, generation=res.generation, now=stamp
    )
    if synced.status == "True" or synced.reason == "Paused":
        status["observedGeneration"] = res.generation
    if res.status.get("plan") and not res.spec.paused:
        status["plan"] = None
    if ctx.track_secret:
        status["credentialsSecret"] = ctx.credentials_secret
    if extra:
        status.update(extra)
    _keep_recent_stamp(status, res.status, now)
    return status


STAMP_REFRESH = timedelta(seconds=30)
"""How stale `lastObservedTime` may get while reads find nothing new (see `_keep_recent_stamp`)."""


def _keep_recent_stamp(status: dict[str, Any], previous: Mapping[str, Any], now: datetime) -> None:
    """Keep the previous observation stamp while nothing else changed and it is recent.

    A new stamp on every 2 s poll would make every in-flight object a status write, a new
    resourceVersion and a watch event each time; at thousands of objects that load lands on the
    API server and on every watcher. With this, an unchanged observation costs no write at all.
    """
    before = previous.get("lastObservedTime")
    if "lastObservedTime" not in status or not isinstance(before, str):
        return
    try:
        age = now - datetime.fromisoformat(before.replace("Z", "+00:00"))
    except ValueError:
        return
    if timedelta(0) <= age < STAMP_REFRESH and all(
        value == previous.get(key) for key, value in status.items() if key != "lastObservedTime"
    ):
        status["lastObservedTime"] = before


def _would(facts: planning.Facts) -> dict[str, Any]:
    """What an unpaused pass would send: the preview a paused resource shows in status.plan."""
    action = planning.plan(facts)
    match action:
        case planning.ReserveRequestId() | planning.Create():
            return {"action": "create", "updateMask": []}
        case planning.Update(change):
            return {"action": "update", "updateMask": list(change.mask)}
        case planning.Delete(_, replacing=True) | planning.ForgetOld():
            return {"action": "replace", "updateMask": []}
    return {"action": "none", "updateMask": []}


def _add_deletion_progress(status: dict[str, Any], res: resource.ManagedRunnerResource, ctx: Context) -> None:
    """Visible, bounded deletion: when it started, its deadline, and whether it is past it."""
    now = ctx.now
    previous = res.status.get("deletion") or {}
    started = previous.get("requestedTime") or _rfc3339(now)
    started_at = datetime.fromisoformat(started.replace("Z", "+00:00"))
    deadline = started_at + timedelta(seconds=ctx.deletion_timeout)
    stalled = now >= deadline
    status["deletion"] = {"requestedTime": started, "deadlineTime": _rfc3339(deadline), "stalled": stalled}
    if stalled:
        age = int((now - started_at).total_seconds())
        message = (
            f"runner {res.spec.runner_id} is still not deleted {age}s after the request (deadline "
            f"{_rfc3339(deadline)}); still retrying. Check the runner in the CoreWeave console; to give up "
            "on it, set spec.deletionPolicy: Orphan"
        )
        status["conditions"] = conditions.merge(
            status.get("conditions") or res.status.get("conditions"),
            [conditions.Condition(conditions.STALLED, "True", "DeletionStalled", message)],
            generation=res.generation,
            now=_rfc3339(now),
        )


def _needs_person(exc: Exception) -> bool:
    """Failures no retry can fix: wrong or missing credentials, a misrouted endpoint (Stalled=True)."""
    if isinstance(exc, CredentialsProblem):
        return True
    return isinstance(exc, (errors.Unauthenticated, errors.PermissionDenied, errors.Misrouted))


def _classify(exc: Exception) -> tuple[str, bool]:
    """(condition reason, terminal?) for a failure."""
    if isinstance(exc, CredentialsProblem):
        return exc.reason, False
    if isinstance(exc, errors.RateLimited):
        return "RateLimited", False
    if isinstance(exc, errors.Unavailable):
        return "ApiUnavailable", False
    if isinstance(exc, errors.StaleEtag):
        return "StaleEtag", False
    if isinstance(exc, errors.Unauthenticated):
        return "CredentialsRejected", False
    if isinstance(exc, errors.PermissionDenied):
        return "PermissionDenied", False
    if isinstance(exc, errors.Misrouted):
        return "EndpointMisrouted", False
    if isinstance(exc, errors.InvalidArgument):
        return "InvalidSpec", True
    if isinstance(exc, errors.IncompatibleServer):
        return "IncompatibleServer", True
    if isinstance(exc, errors.CloudError):
        return exc.__class__.__name__, not exc.retryable
    return "InternalError", False


def _describe(exc: Exception) -> str:
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
