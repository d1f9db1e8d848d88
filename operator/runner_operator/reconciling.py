"""The imperative shell: observe -> plan -> act (at most ONE mutating call) -> report.

Kopf-free and short on purpose: observing and acting go through the `Runners` boundary, deciding
is `planning`, and what a pass means for the resource is `outcomes` (both pure). It returns an
`Outcome` that the handler layer applies. API errors become conditions in `outcomes.failed`.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from runner_operator import cadence, planning, resource
from runner_operator.cloud import errors
from runner_operator.cloud.models import CloudRunner, InstallStatus
from runner_operator.cloud.runners import Runners
from runner_operator.desired import MissingSecretValue, desired_runner
from runner_operator.outcomes import (
    Context,
    CredentialsProblem,
    Event,
    Outcome,
    cluster_taken,
    failed,
    never_sent,
    recreations,
    released,
    report,
    stamps_due,
    unreadable,
)
from runner_operator.quiet import QuietPasses, fingerprint
from runner_operator.reasons import Reason
from runner_operator.status import StatusPatch
from runner_operator.unsent import UnsentKeys

__all__ = [
    "Context",
    "CredentialsProblem",
    "Event",
    "Outcome",
    "Recipe",
    "facts_for",
    "failed",
    "never_sent",
    "reconcile",
    "released",
    "request_key",
    "unchanged_since",
    "unreadable",
]


log = logging.getLogger(__name__)

REQUEST_KEYS = uuid.UUID("6c1d3f0e-3a55-4d4c-9c55-7f0f1c0b2d11")


def request_key(res: resource.ManagedRunnerResource, *, recreations: int) -> str:
    """Deterministic create key: same resource, runner ID and recreation count give the same key.

    It is also persisted in status before the call; being derivable means even a pass that reads
    a stale status replays the same create instead of duplicating it or reporting a false conflict.
    """
    return str(uuid.uuid5(REQUEST_KEYS, f"{res.uid}/{res.spec.runner_id}/{recreations}"))


async def reconcile(
    res: resource.ManagedRunnerResource, cloud: Runners, ctx: Context, quiet: QuietPasses | None = None
) -> Outcome:
    """One observe-plan-act pass for a live or deleting resource.

    With `quiet`, a steady pass whose inputs equal those of the resource's last quiet pass is
    skipped (`Outcome.unchanged`): it would write, send and report nothing again.
    """
    try:
        seen = await _inputs(res, cloud, ctx) if quiet is not None else None
    except errors.CloudError as exc:
        return failed(res, ctx, exc)  # the list the full pass would read first failed the same way
    except Exception:
        log.exception("Quiet-pass check failed for %s/%s; running the pass in full", res.namespace, res.name)
        seen = None
    if quiet is None or seen is None:
        return await _reconcile(res, cloud, ctx)
    entry, digest = seen
    if quiet.still(res.uid, digest, ctx.now):
        return Outcome(StatusPatch(), unchanged=True)
    outcome = await _reconcile(res, cloud, ctx)
    due = stamps_due(res.status)
    # Remembered only if the list entry the pass read is the one fingerprinted (no refresh between).
    if (
        due is not None
        and outcome.quiet(res.status)
        and await cloud.entry(res.spec.runner_id, refresh=False) is entry
    ):
        policy = res.spec.maintenance_policy
        change = policy.next_change(ctx.now) if policy else None
        recipe = Recipe(
            version=str(res.resource_version),
            runner_id=res.spec.runner_id,
            secrets=res.secret_refs(),
            frozen=frozen(res, ctx.now),
            cadence=cadence.of_status(res.status).cadence,
        )
        # `frozen` holds until the next exclusion boundary: the recipe is valid until then at most.
        quiet.remember(res.uid, digest, min(due, change) if change else due, recipe)
    else:
        quiet.forget(res.uid)
    return outcome


@dataclass(frozen=True, slots=True)
class Recipe:
    """What a steady pass of an unchanged object reads, apart from the object itself."""

    version: str
    """the object's resourceVersion: any edit to spec, status or metadata changes it."""
    runner_id: str
    secrets: resource.SecretRefs
    """also the object's namespace."""
    frozen: bool
    """inside a maintenance exclusion; it holds until the remembered due time."""
    cadence: cadence.Cadence
    """of the object's status, which a skipped pass leaves as it is."""


async def unchanged_since(quiet: QuietPasses, uid: str, version: str, cloud: Runners, ctx: Context) -> bool:
    """Whether a steady pass of this object, now at `version`, would repeat its last quiet pass.

    The same fingerprint as the full pass computes (`_inputs`), taken from the recipe that pass left
    instead of from the parsed object: at resync 60 s most passes end here, and parsing every object
    every minute was most of the operator's steady CPU (bench/RESULTS.md, "Steady passes without
    parsing"). `ctx` carries this pass's credentials, claims and binding, resolved from the recipe.
    """
    recipe = quiet.recipe(uid)
    if not isinstance(recipe, Recipe) or recipe.version != version:
        return False
    entry = await cloud.entry(recipe.runner_id)
    if entry is None:
        return False
    return quiet.still(uid, _digest(version, entry, ctx, recipe.frozen), ctx.now)


async def _inputs(
    res: resource.ManagedRunnerResource, cloud: Runners, ctx: Context
) -> tuple[bytes, bytes] | None:
    """The runner's list entry and a fingerprint of everything a steady pass reads; None if not steady.

    Steady: live, bound to the runner in the spec (no replacement in flight), and the shared list can
    answer for it. Anything else (creating, deleting, replacing, read directly) always runs in full.
    """
    if res.deleting or not res.resource_version or res.status.get("runnerId") != res.spec.runner_id:
        return None
    entry = await cloud.entry(res.spec.runner_id)
    if entry is None:
        return None
    return entry, _digest(res.resource_version, entry, ctx, frozen(res, ctx.now))


def _digest(version: str, entry: bytes, ctx: Context, is_frozen: bool) -> bytes:
    secrets = sorted(f"{name}/{key}={value}" for (name, key), value in ctx.secrets.items())
    return fingerprint(
        version,
        entry,
        ctx.claimed_by,
        ctx.bound_here,
        ctx.credential,
        ctx.credentials_secret,
        str(ctx.track_secret),
        str(is_frozen),  # an exclusion ending may let WhenAvailable apply an update
        *secrets,
    )


async def _reconcile(res: resource.ManagedRunnerResource, cloud: Runners, ctx: Context) -> Outcome:
    try:
        desired = desired_runner(res.spec, ctx.secrets, lenient=res.deleting)
    except MissingSecretValue as exc:
        return failed(res, ctx, CredentialsProblem(Reason.SECRET_NOT_FOUND, f"cannot resolve {exc.args[0]}"))
    try:
        bound = is_bound(res, ctx.bound_here)
        request_id = res.status.get("createRequestId")
        held_elsewhere = held_id(res)
        # A list's absence may reserve a create key for this runner ID and send the create (the API
        # refuses a duplicate); anything else that would act on a runner being gone reads it directly.
        proof = planning.absence_needs_proof(
            deleting=res.deleting,
            bound=bound,
            credential_changed=credential_changed(res, ctx.credential),
            stale_key=bool(request_id) and request_id != request_key(res, recreations=recreations(res)),
            replacing=held_elsewhere is not None,
        )
        age = planning.absence_age(needs_proof=proof, key_reserved=bool(request_id))
        observed = await cloud.observe(res.spec.runner_id, prove_absence=proof, absence_age=age)
        held = await cloud.observe(held_elsewhere) if held_elsewhere else None
        facts = facts_for(
            res,
            desired,
            observed,
            held,
            bound_here=ctx.bound_here,
            claimed_by=ctx.claimed_by,
            credential=ctx.credential,
            now=ctx.now,
            unsent=ctx.unsent,
        )
        if not res.deleting and may_replace(facts):
            facts = dataclasses.replace(facts, cluster_holder=await cloud.cluster_holder(res.spec.cluster_id))
        return await _act(res, cloud, ctx, facts, planning.plan(facts))
    except errors.CloudError as exc:
        return failed(res, ctx, exc)
    except Exception as exc:
        # A bug, not an API answer: reported (InternalError) and retried like one, with its traceback
        # logged, instead of leaving Synced as an earlier pass left it.
        log.exception("Unexpected error reconciling %s/%s", res.namespace, res.name)
        return failed(res, ctx, exc)


def facts_for(
    res: resource.ManagedRunnerResource,
    desired: CloudRunner,
    observed: CloudRunner | None,
    held: CloudRunner | None,
    *,
    bound_here: str | None,
    claimed_by: str | None,
    credential: str | None,
    now: datetime,
    unsent: UnsentKeys | None = None,
) -> planning.Facts:
    """The planner's inputs from a resource, its status and what was observed: the one place the
    operator's passes and `runner-operator plan` both take them from, so the two cannot disagree."""
    bound = is_bound(res, bound_here)
    return planning.Facts(
        desired=desired,
        observed=observed,
        deleting=res.deleting,
        paused=res.spec.paused,
        adopt=res.spec.adopt,
        deletion_policy=res.spec.deletion_policy,
        bound=bound,
        request_id=res.status.get("createRequestId"),
        new_request_id=request_key(res, recreations=recreations(res) + (1 if bound else 0)),
        claimed_by=claimed_by,
        replace=res.spec.replacement_policy == "Replace",
        held_id=held_id(res),
        held=held,
        credential_changed=credential_changed(res, credential),
        reserved_at=_parse_time(res.status.get("createRequestedTime")),
        key_never_sent=unsent is not None and unsent.holds(res.uid, res.status.get("createRequestId")),
        seen_created=_parse_time(res.status.get("createTime")),
        protected=res.protected,
        update_request=pending_update_request(res),
        apply_updates=res.spec.updates.apply == "WhenAvailable",
        update_frozen=frozen(res, now),
    )


def frozen(res: resource.ManagedRunnerResource, now: datetime) -> bool:
    """`now` falls in a maintenance exclusion of the spec (WhenAvailable waits)."""
    return bool(res.spec.maintenance_policy and res.spec.maintenance_policy.excludes(now))


def pending_update_request(res: resource.ManagedRunnerResource) -> str | None:
    """spec.updates.request when it has not been answered yet (each value is honoured once)."""
    request = res.spec.updates.request
    answered = res.status.get("lastUpdateRequest") or {}
    return request if request and answered.get("request") != request else None


def is_bound(res: resource.ManagedRunnerResource, bound_here: str | None) -> bool:
    """status says this resource holds the spec's runner; a pass can run on a body older than this
    process's last status write, so what this process bound counts too."""
    return res.spec.runner_id in (res.status.get("runnerId"), bound_here)


def held_id(res: resource.ManagedRunnerResource) -> str | None:
    """The runner this resource holds when it is not the spec's (a replacement in flight)."""
    held = res.status.get("runnerId")
    return str(held) if held and held != res.spec.runner_id else None


def credential_changed(res: resource.ManagedRunnerResource, credential: str | None) -> bool:
    recorded = res.status.get("credentialFingerprint")
    return bool(recorded and credential and recorded != credential)


def may_replace(facts: planning.Facts) -> bool:
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


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


async def _act(
    res: resource.ManagedRunnerResource,
    cloud: Runners,
    ctx: Context,
    facts: planning.Facts,
    action: planning.Action,
) -> Outcome:
    """Make the action's one call (if it has one), then report what it means."""
    match action:
        case planning.ReserveRequestId(request_id) if ctx.unsent is not None:
            ctx.unsent.reserved(res.uid, request_id)
        case planning.Create(body, request_id):
            if ctx.unsent is not None:
                ctx.unsent.sending(res.uid, request_id)  # from here on, it may have landed
            attempts = 0

            def attempt() -> None:
                nonlocal attempts
                attempts += 1

            try:
                created = await cloud.create(body, request_id, on_send=attempt)
            except (errors.AlreadyExists, errors.InvalidArgument) as exc:
                # The absence may have come from a list: read the runner itself before deciding.
                observed = facts.observed or await cloud.observe(res.spec.runner_id)
                if observed is not None:
                    # A replay the server refused (the body may have changed since): decide on other
                    # evidence. A refusal proves our key made nothing only if it answers its one send
                    # (the client retries what timed out, and an earlier attempt may have landed).
                    refused = dataclasses.replace(
                        facts,
                        observed=observed,
                        replay_refused=True,
                        key_never_sent=facts.key_never_sent and attempts == 1,
                    )
                    return await _act(res, cloud, ctx, refused, planning.plan(refused))
                if isinstance(exc, errors.InvalidArgument):
                    raise
                holder = await cloud.cluster_holder(res.spec.cluster_id)
                return report(res, ctx, facts, cluster_taken(res, holder, exc.code))
            return report(res, ctx, facts, action, created)
        case planning.Update(change):
            return report(res, ctx, facts, action, await cloud.update(res.spec.runner_id, change))
        case planning.ApplyUpdate(request):
            try:
                applied = await cloud.apply_update(res.spec.runner_id)
            except errors.FailedPrecondition:
                # Nothing to apply after all (the list was older than the API's answer).
                if request is None:
                    return report(res, ctx, facts, planning.Idle())
                return report(res, ctx, facts, planning.DeclineUpdateRequest(request))
            return report(res, ctx, facts, action, applied)
        case planning.Delete(runner_id):
            await cloud.delete(runner_id)
    return report(res, ctx, facts, action)
