"""Every reason of the catalogue (reasons.REASONS, docs/observability.md), produced by a scenario.

Three tables, each row stating everything its pass reports (Events and conditions, with status):
- PURE: the reporting step (`outcomes.report`, `released`, `unreadable`) on hand-built facts, with
  the action the planner chose for them;
- SHELL: `reconciling.reconcile` against the in-process simulator, for reasons that come from a
  real API answer (faults, foreign runners, edits and deletions outside Kubernetes);
- HANDLER: credentials resolution (`credentials.Credentials`, `kubernetes_secret_getter`) with fake
  Secret reads, reported through `outcomes.failed` as the handler layer does.

`test_every_catalogued_reason_has_a_scenario` runs them all again and compares what they produced
with the catalogue, so a new reason without a scenario fails here.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import httpx
import kubernetes
import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st
from pydantic import SecretStr

from runner_operator import outcomes, planning, reasons, reconciling, resource
from runner_operator.cloud import budget
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.retrying import RetryPolicy
from runner_operator.cloud.runners import Runners
from runner_operator.credentials import TokenRegistry, kubernetes_secret_getter
from runner_operator.settings import Settings
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, DEV_USER_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve
from runner_operator.tenancy import DefaultCredentialScope
from tests.clock import FakeClock
from tests.unit.builders import CLUSTER, T0, UNSET, ZONE, body, conds, context, fields, managed, signature
from tests.unit.core.test_planning import READY, facts, runner
from tests.unit.core.test_planning_properties import facts as any_facts
from tests.unit.core.test_planning_properties import runners as any_runner
from tests.unit.simulator.conftest import START

NOT_COVERED: dict[str, str] = {
    # Catalogued, but no pass reports them (test_no_pass_reports_an_uncovered_reason checks it):
    "Absent": "outcomes._status defaults Ready to Absent only when an action reports no runner and no "
    "Ready of its own; every action that reports no runner sets Ready itself (status.phase says Absent)",
    "InSync": "the planner's Idle() default; Idle() is planned only for a ready runner, which reports "
    "Ready=True Available, so Ready=False InSync is never written",
}
"""Reasons no scenario can produce, each with why. Keep it short: a reason that becomes reachable must
leave this list (the completeness test compares both ways)."""

OK = {"Synced:True:Synced", "Stalled:False:Progressing"}
"""A pass that applied the spec."""
READY_BEFORE = conds(("Ready", "True", "Available"))
RESERVED = T0 - timedelta(minutes=10)
AVAILABLE = "Ready:True:Available"
PENDING = {"installStatus": "RUNNER_INSTALL_STATUS_PENDING"}
DELETING = {"installStatus": "RUNNER_INSTALL_STATUS_DELETING"}
OLD = runner(identity={"runnerId": "old"}, **READY)


def needs_person(reason: str) -> set[str]:
    """A failure only a person can fix: Warning, Ready and Synced False, Stalled True."""
    return {
        f"Event:Warning:{reason}",
        f"Ready:False:{reason}",
        f"Synced:False:{reason}",
        f"Stalled:True:{reason}",
    }


def retried(reason: str, ready: str = AVAILABLE) -> set[str]:
    """A transient failure: Warning, Synced False, Ready left as it was, not stalled."""
    return {f"Event:Warning:{reason}", ready, f"Synced:False:{reason}", "Stalled:False:Progressing"}


def reported(
    found: planning.Facts,
    res: resource.ManagedRunnerResource | None = None,
    *,
    action: planning.Action | None = None,
    answer: Any = None,
    **ctx: Any,
) -> outcomes.Outcome:
    """The reporting step for the action the planner chooses on `found` (or `action`)."""
    chosen = planning.plan(found) if action is None else action
    return outcomes.report(res or managed(), context(**ctx), found, chosen, answer)


def unreadable() -> outcomes.Outcome:
    raw = body(futureField="x")
    try:
        resource.ManagedRunnerResource.from_body(raw)
    except ValueError as exc:
        return outcomes.unreadable(raw, T0, exc)
    raise AssertionError("the spec was readable")


Row = tuple[Callable[[], outcomes.Outcome], set[str], dict[str, Any]]

PURE: dict[str, Row] = {
    # life cycle
    "reserve-a-create-key-first": (
        lambda: reported(facts(observed=None)),
        {"Ready:False:Creating"} | OK,
        {"createRequestId": "new-key", "phase": "Creating"},
    ),
    "nothing-created-before-the-finalizer": (
        lambda: reported(
            facts(observed=None, request_id="k1", protected=False), managed(status={"createRequestId": "k1"})
        ),
        {"Ready:False:AwaitingFinalizer"} | OK,
        {"runnerId": UNSET, "phase": UNSET},
    ),
    "created": (
        lambda: reported(
            facts(observed=None, request_id="k1"),
            managed(status={"createRequestId": "k1"}),
            answer=runner(**PENDING),
        ),
        {"Event:Normal:Created", "Ready:False:Installing"} | OK,
        {"runnerId": "r1", "adopted": False},
    ),
    "adopted": (
        lambda: reported(facts(observed=runner(**READY), adopt=True), managed(adopt=True)),
        {"Event:Normal:Adopted", "Ready:False:Adopting"} | OK,
        {"runnerId": "r1", "adopted": True},
    ),
    "create-confirmed-by-creation-time": (
        lambda: reported(
            facts(
                observed=runner(**READY, createTime="2026-12-02T11:55:00Z"),
                request_id="k1",
                replay_refused=True,
                reserved_at=RESERVED,
            ),
            managed(status={"createRequestId": "k1"}),
        ),
        {"Event:Normal:CreateConfirmed", "Ready:False:Creating"} | OK,
        {"runnerId": "r1", "adopted": False},
    ),
    "spec-change-updated": (
        lambda: reported(
            facts(desired=runner(displayName="new"), observed=runner(displayName="old", **READY), bound=True),
            managed(
                displayName="new", generation=2, status={"observedGeneration": 1, "conditions": READY_BEFORE}
            ),
            answer=runner(displayName="new", **READY),
        ),
        {"Event:Normal:Updated", AVAILABLE} | OK,
        {"observedGeneration": 2},
    ),
    "update-sent-not-yet-visible": (
        lambda: reported(
            facts(desired=runner(displayName="new"), observed=runner(displayName="old", **READY), bound=True),
            managed(
                displayName="new", generation=2, status={"observedGeneration": 1, "conditions": READY_BEFORE}
            ),
            answer=runner(displayName="old", **READY),  # the answer still differs from the spec
        ),
        {"Event:Normal:Updated", "Ready:False:Updating"} | OK,
        {"observedGeneration": 2},
    ),
    "outside-edit-drift-corrected": (
        lambda: reported(
            facts(desired=runner(displayName="new"), observed=runner(displayName="old", **READY), bound=True),
            managed(displayName="new", status={"observedGeneration": 1, "conditions": READY_BEFORE}),
            answer=runner(displayName="new", **READY),
        ),
        {"Event:Warning:DriftCorrected", AVAILABLE} | OK,
        {"observedGeneration": 1},
    ),
    "deleted-outside-recreated": (
        lambda: reported(
            facts(observed=None, bound=True),
            managed(status={"runnerId": "r1", "conditions": READY_BEFORE}),
        ),
        {"Event:Warning:RecreatingDeletedRunner", "Ready:False:Creating"} | OK,
        {"runnerId": None, "recreations": 1, "createRequestId": "new-key"},
    ),
    "became-ready": (
        lambda: reported(
            facts(observed=runner(**READY), bound=True),
            managed(status={"runnerId": "r1", "conditions": conds(("Ready", "False", "Installing"))}),
        ),
        {"Event:Normal:Ready", AVAILABLE} | OK,
        {"installStatus": "RUNNER_INSTALL_STATUS_READY"},
    ),
    # readiness while in flight or degraded
    "installing": (
        lambda: reported(facts(observed=runner(**PENDING), bound=True), managed(status={"runnerId": "r1"})),
        {"Ready:False:Installing"} | OK,
        {"installStatus": "RUNNER_INSTALL_STATUS_PENDING"},
    ),
    "rolling-out": (
        lambda: reported(
            facts(observed=runner(**{**READY, "targetRevision": 2}), bound=True),
            managed(status={"runnerId": "r1"}),
        ),
        {"Ready:False:RollingOut"} | OK,
        {"targetRevision": 2},
    ),
    "install-failed": (
        lambda: reported(
            facts(
                observed=runner(
                    installStatus="RUNNER_INSTALL_STATUS_FAILED",
                    installError={"reason": "RUNNER_INSTALL_ERROR_REASON_INSTALL_FAILED", "message": "boom"},
                ),
                bound=True,
            ),
            managed(status={"runnerId": "r1", "conditions": conds(("Ready", "False", "Installing"))}),
        ),
        {"Event:Warning:InstallFailed", "Ready:False:InstallFailed"} | OK,
        {"installStatus": "RUNNER_INSTALL_STATUS_FAILED"},
    ),
    "disconnected": (
        lambda: reported(
            facts(
                observed=runner(**{**READY, "connectionStatus": "RUNNER_CONNECTION_STATUS_DISCONNECTED"}),
                bound=True,
            ),
            managed(status={"runnerId": "r1", "conditions": READY_BEFORE}),
        ),
        {"Event:Warning:Disconnected", "Ready:False:Disconnected"} | OK,
        {"connectionStatus": "RUNNER_CONNECTION_STATUS_DISCONNECTED"},
    ),
    "unknown-install-status": (
        lambda: reported(
            facts(
                observed=runner(**{**READY, "installStatus": "RUNNER_INSTALL_STATUS_HIBERNATING"}), bound=True
            ),
            managed(status={"runnerId": "r1"}),
        ),
        {"Ready:False:UnknownStatus"} | OK,
        {"runnerId": UNSET},
    ),
    "deleting-out-of-band": (
        lambda: reported(facts(observed=runner(**DELETING), bound=True), managed(status={"runnerId": "r1"})),
        {"Ready:False:DeletingOutOfBand"} | OK,
        {"installStatus": "RUNNER_INSTALL_STATUS_DELETING"},
    ),
    "paused-before-create": (
        lambda: reported(facts(observed=None, paused=True), managed(paused=True)),
        {"Ready:False:Paused", "Synced:False:Paused", "Stalled:False:Progressing"},
        {"plan.action": "create", "observedGeneration": 1},
    ),
    # replacement (spec.replacementPolicy: Replace, runnerId changed from "old")
    "replacement-started": (
        lambda: reported(
            facts(observed=None, held_id="old", held=OLD, replace=True),
            managed(replacementPolicy="Replace", status={"runnerId": "old", "conditions": READY_BEFORE}),
        ),
        {"Event:Normal:ReplacementStarted", "Ready:False:Replacing"} | OK,
        {"replacement.fromRunnerId": "old", "replacement.phase": "DeletingOld", "runnerId": UNSET},
    ),
    "replacement-waits-for-the-old-runner": (
        lambda: reported(
            facts(
                observed=None,
                held_id="old",
                held=runner(identity={"runnerId": "old"}, **DELETING),
                replace=True,
            ),
            managed(
                replacementPolicy="Replace",
                status={"runnerId": "old", "replacement": {"fromRunnerId": "old", "phase": "DeletingOld"}},
            ),
        ),
        {"Ready:False:Replacing"} | OK,
        {"phase": UNSET, "runnerId": UNSET},
    ),
    "replacement-forgets-the-old-runner": (
        lambda: reported(
            facts(observed=None, held_id="old", held=None, replace=True),
            managed(
                replacementPolicy="Replace",
                status={"runnerId": "old", "replacement": {"fromRunnerId": "old", "phase": "DeletingOld"}},
            ),
        ),
        {"Ready:False:Replacing"} | OK,
        {"replacement.phase": "Creating", "runnerId": None, "recreations": 1},
    ),
    "replaced": (
        lambda: reported(
            facts(observed=None, request_id="k2", replace=True),
            managed(
                replacementPolicy="Replace",
                status={"createRequestId": "k2", "replacement": {"fromRunnerId": "old", "phase": "Creating"}},
            ),
            answer=runner(**PENDING),
        ),
        {"Event:Normal:Replaced", "Ready:False:Installing"} | OK,
        {"replacement": None, "runnerId": "r1"},
    ),
    # deletion
    "deletion-requested": (
        lambda: reported(
            facts(deleting=True, observed=runner(**READY), bound=True),
            managed(deleting=True, status={"runnerId": "r1"}),
        ),
        {"Event:Normal:DeletionRequested", "Ready:False:Deleting"} | OK,
        {"deletion.requestedTime": "2026-12-02T12:00:00Z", "deletion.stalled": False, "release": False},
    ),
    "deleting-waits-for-the-decommission": (
        lambda: reported(
            facts(deleting=True, observed=runner(**DELETING), bound=True),
            managed(deleting=True, status={"runnerId": "r1"}),
        ),
        {"Ready:False:Deleting"} | OK,
        {"deletion.stalled": False, "release": False},
    ),
    "deletion-stalled-past-its-deadline": (
        lambda: reported(
            facts(deleting=True, observed=runner(**DELETING), bound=True),
            managed(
                deleting=True,
                status={"runnerId": "r1", "deletion": {"requestedTime": "2026-12-02T11:00:00Z"}},
            ),
        ),
        {
            "Event:Warning:DeletionStalled",
            "Ready:False:Deleting",
            "Synced:True:Synced",
            "Stalled:True:DeletionStalled",
        },
        {"deletion.stalled": True, "deletion.deadlineTime": "2026-12-02T11:10:00Z", "release": False},
    ),
    "deleted": (
        lambda: reported(
            facts(deleting=True, observed=None, bound=True), managed(deleting=True, status={"runnerId": "r1"})
        ),
        {"Event:Normal:Deleted", "Ready:False:Deleted"} | OK,
        {"release": True, "phase": "Deleted"},
    ),
    "orphaned": (
        lambda: reported(
            facts(deleting=True, deletion_policy="Orphan", observed=runner(**READY), bound=True),
            managed(deleting=True, deletionPolicy="Orphan", status={"runnerId": "r1"}),
        ),
        {"Event:Normal:Orphaned", "Ready:False:Orphaned"} | OK,
        {"release": True},
    ),
    # conflicts: only a spec change or a person helps
    "runner-id-taken": (
        lambda: reported(facts(observed=runner(**READY))),
        needs_person("RunnerIdTaken"),
        {"phase": "Conflict", "terminal": True, "runnerId": UNSET},
    ),
    "duplicate-runner-id": (
        lambda: reported(facts(observed=None, claimed_by="ns/first")),
        needs_person("DuplicateRunnerId"),
        {"phase": "Conflict", "terminal": True},
    ),
    "immutable-field-changed-on-a-bound-runner": (
        lambda: reported(
            facts(observed=runner(identity={"zone": "us-west-01a"}, **READY), bound=True),
            managed(status={"runnerId": "r1", "conditions": READY_BEFORE}),
        ),
        {
            "Event:Warning:ImmutableFieldChanged",
            AVAILABLE,
            "Synced:False:ImmutableFieldChanged",
            "Stalled:True:ImmutableFieldChanged",
        },
        {"terminal": True, "installStatus": "RUNNER_INSTALL_STATUS_READY"},
    ),
    "runner-id-edited-without-replace": (
        lambda: reported(facts(observed=None, held_id="old", held=OLD), managed(status={"runnerId": "old"})),
        needs_person("ImmutableFieldChanged"),
        {"phase": "Conflict", "terminal": True},
    ),
    "adoption-mismatch": (
        lambda: reported(
            facts(observed=runner(identity={"zone": "us-west-01a"}, **READY), adopt=True), managed(adopt=True)
        ),
        needs_person("AdoptionMismatch"),
        {"phase": "Conflict", "runnerId": UNSET},
    ),
    "runner-not-visible-with-another-credential": (
        lambda: reported(
            facts(observed=None, bound=True, credential_changed=True),
            managed(status={"runnerId": "r1", "conditions": READY_BEFORE}),
        ),
        needs_person("RunnerNotVisible"),
        {"phase": "Conflict", "runnerId": UNSET},
    ),
    "ownership-unknown-after-a-refused-replay": (
        lambda: reported(
            facts(observed=runner(**READY), request_id="k1", replay_refused=True, reserved_at=RESERVED),
            managed(status={"createRequestId": "k1"}),
        ),
        needs_person("OwnershipUnknown"),
        {"phase": "Conflict", "createRequestId": UNSET},
    ),
    "replacement-target-taken": (
        lambda: reported(
            facts(observed=runner(**READY), held_id="old", held=OLD, replace=True),
            managed(replacementPolicy="Replace", status={"runnerId": "old"}),
        ),
        needs_person("ReplacementTargetTaken"),
        {"phase": "Conflict", "runnerId": UNSET},
    ),
    "replacement-cluster-taken": (
        lambda: reported(
            facts(observed=None, held_id="old", held=OLD, replace=True, cluster_holder="third"),
            managed(replacementPolicy="Replace", status={"runnerId": "old"}),
        ),
        needs_person("ClusterTaken"),
        {"phase": "Conflict", "replacement": UNSET},
    ),
    "unreadable-spec": (
        unreadable,
        needs_person("InvalidSpec"),
        {"phase": "InvalidSpec", "terminal": True},
    ),
}


# --- the shell against the simulator ------------------------------------------------------------

TIMINGS = Timings(
    install_seconds=1, provision_seconds=1, rollout_seconds=1, delete_seconds=60, heartbeat_seconds=3600
)


class Object:
    """A ManagedRunner body whose status takes each pass's patch, as the kopf layer does."""

    def __init__(self, env: Env, runner_id: str = "owned", **spec: Any) -> None:
        self.env = env
        self.body = body(runner_id, **spec)
        self.seconds = 0.0
        self.deletion_timeout = 600.0

    async def step(self, cloud: Runners | None = None, **ctx: Any) -> outcomes.Outcome:
        self.seconds += 1
        res = resource.ManagedRunnerResource.from_body(self.body)
        ctx.setdefault("credential", "cred-a")
        when = context(
            now=T0 + timedelta(seconds=self.seconds), deletion_timeout=self.deletion_timeout, **ctx
        )
        outcome = await reconciling.reconcile(res, cloud or Runners(self.env.admin), when)
        self.body["status"] = {**self.body["status"], **outcome.status.to_patch()}
        return outcome

    async def ready(self) -> None:
        """Create the runner and let the simulator install it: Ready=True."""
        await self.step()  # reserves the create key
        await self.step()  # creates
        self.env.clock.tick(TIMINGS.install_seconds + TIMINGS.provision_seconds)
        await self.step()
        assert self.cond("Ready") == ("True", "Available"), self.body["status"]

    def edit(self, **spec: Any) -> None:
        self.body["spec"].update(spec)
        self.body["metadata"]["generation"] += 1

    def delete(self) -> None:
        self.body["metadata"]["deletionTimestamp"] = "2026-12-02T12:05:00Z"

    def cond(self, type_: str) -> tuple[str, str]:
        found = next(c for c in self.body["status"]["conditions"] if c["type"] == type_)
        return found["status"], found["reason"]


@dataclasses.dataclass
class Env:
    server: RunningServer
    clock: FakeClock
    admin: CloudClient
    clients: contextlib.AsyncExitStack

    @property
    def sim(self) -> Any:
        return self.server.simulator

    async def client(self, token: str, **kw: Any) -> CloudClient:
        """Another client of the simulator: no retries, so one scripted fault is the pass's answer."""
        return await self.clients.enter_async_context(client(self.server.url, token, **kw))

    async def ready(self, **spec: Any) -> Object:
        obj = Object(self, **spec)
        await obj.ready()
        return obj


def client(url: str, token: str, **kw: Any) -> CloudClient:
    return CloudClient(
        url, token, retry=RetryPolicy(max_attempts=1), budget=budget.RequestBudget(1000, 1000), **kw
    )


@contextlib.asynccontextmanager
async def environment() -> AsyncIterator[Env]:
    clock = FakeClock(START)
    config = SimulatorConfig(clock=clock, timings=dataclasses.replace(TIMINGS), log_requests=False)
    async with await serve(config) as server, contextlib.AsyncExitStack() as clients:
        admin = await clients.enter_async_context(client(server.url, DEV_ADMIN_TOKEN))
        yield Env(server, clock, admin, clients)


def foreign(runner_id: str) -> dict[str, Any]:
    return {"identity": {"runnerId": runner_id, "zone": ZONE, "clusterId": CLUSTER}, "policy": {}}


async def cluster_taken(env: Env) -> outcomes.Outcome:
    env.sim.create_out_of_band(foreign("someone-elses"))
    obj = Object(env)
    await obj.step()
    return await obj.step()  # the create: ALREADY_EXISTS for the cluster


async def failing_read(env: Env, status: int, **fault: Any) -> outcomes.Outcome:
    obj = await env.ready()
    env.sim.fail_next("get", status, **fault)
    return await obj.step()


async def failing_update(env: Env, status: int, code: int) -> outcomes.Outcome:
    obj = await env.ready()
    obj.edit(displayName="renamed")
    env.sim.fail_next("update", status, code=code)
    return await obj.step()


async def invalid_spec(env: Env) -> outcomes.Outcome:
    obj = Object(env, overrides={"scaling": {"minReplicas": 5, "maxReplicas": 1}})
    await obj.step()
    return await obj.step()  # the create: INVALID_ARGUMENT


async def token_refused(env: Env, token: str) -> outcomes.Outcome:
    return await Object(env).step(Runners(await env.client(token)))


async def misrouted(env: Env) -> outcomes.Outcome:
    obj = await env.ready()
    env.sim.set_bare404()
    return await obj.step()


async def incompatible(env: Env) -> outcomes.Outcome:
    """A server whose runner has no spec (the simulator always sends one, so a transport answers)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"identity": {"runnerId": "owned", "zone": ZONE, "clusterId": CLUSTER}}
        )

    obj = await env.ready()
    return await obj.step(Runners(await env.client(DEV_ADMIN_TOKEN, transport=httpx.MockTransport(handler))))


class Broken(Runners):
    async def observe(self, runner_id: str, *, prove_absence: bool = True, absence_age: float = 0.0) -> None:
        raise KeyError(runner_id)  # a bug in the operator, not an API answer


async def internal_error(env: Env) -> outcomes.Outcome:
    obj = await env.ready()
    return await obj.step(Broken(env.admin))


async def drift(env: Env) -> outcomes.Outcome:
    obj = await env.ready()
    env.sim.edit_out_of_band("owned", {"displayName": "edited in the console"})
    return await obj.step()


async def deleted_outside(env: Env) -> outcomes.Outcome:
    obj = await env.ready()
    env.sim.delete_out_of_band("owned")
    return await obj.step()


async def replacement(env: Env, passes: int) -> outcomes.Outcome:
    """Replace runner "owned" by "owned-2"; the outcome of pass `passes` (the old one goes after pass 2).

    Passes: 1 deletes the old runner, 2 waits for its decommission, 3 forgets it, 4 reserves the new
    runner's create key, 5 creates it.
    """
    obj = await env.ready()
    obj.edit(runnerId="owned-2", replacementPolicy="Replace")
    for done in range(passes):
        if done == 2:
            env.clock.tick(TIMINGS.delete_seconds)
        outcome = await obj.step()
    return outcome


async def channel_update(env: Env, *, published: bool, **updates: str) -> outcomes.Outcome:
    """A ready runner, maybe a new release on its channel, then spec.updates as given."""
    obj = await env.ready()
    if published:
        env.sim.publish_release()
        await obj.step()  # the operator sees updateAvailable (and nothing else changes)
    obj.edit(updates=updates)
    return await obj.step()


async def deletion_stalled(env: Env) -> outcomes.Outcome:
    obj = await env.ready()
    obj.deletion_timeout = 5
    obj.delete()
    await obj.step()  # requests the deletion; the simulator takes a minute
    obj.seconds += 10
    return await obj.step()


async def env_secret_value_missing(env: Env) -> outcomes.Outcome:
    """The values handed to the pass lack an env Secret's (a stale resolution): nothing is sent."""
    ref = {"secretKeyRef": {"name": "env", "key": "k"}}
    return await Object(env, overrides={"env": [{"name": "X", "valueFrom": ref}]}).step()


ShellRow = tuple[Callable[[Env], Awaitable[outcomes.Outcome]], set[str], dict[str, Any]]

SHELL: dict[str, ShellRow] = {
    "create-refused-cluster-taken": (
        cluster_taken,
        needs_person("ClusterTaken"),
        {"phase": "Conflict", "terminal": True, "runnerId": UNSET},
    ),
    "rate-limited": (
        lambda env: failing_read(env, 429, retry_after=7),
        retried("RateLimited"),
        {"retry_after": 7.0, "terminal": False},
    ),
    "api-unavailable": (lambda env: failing_read(env, 503), retried("ApiUnavailable"), {"terminal": False}),
    "unimplemented": (
        lambda env: failing_read(env, 501),
        needs_person("Unimplemented"),
        {"terminal": True, "phase": "Unimplemented", "runnerId": UNSET},
    ),
    "unknown-error-code": (
        lambda env: failing_read(env, 418, code=42),  # a 4xx and a code this version does not know
        needs_person("ApiError"),
        {"terminal": True, "phase": "ApiError", "runnerId": UNSET},
    ),
    "stale-etag": (lambda env: failing_update(env, 409, code=10), retried("StaleEtag"), {"terminal": False}),
    "failed-precondition": (
        lambda env: failing_update(env, 400, code=9),
        retried("FailedPrecondition"),
        {"terminal": False},
    ),
    "update-not-found": (
        lambda env: failing_update(env, 404, code=5),
        retried("NotFound"),
        {"terminal": False},
    ),
    "update-already-exists": (
        lambda env: failing_update(env, 409, code=6),
        retried("AlreadyExists"),
        {"terminal": False},
    ),
    "create-invalid-spec": (
        invalid_spec,
        needs_person("InvalidSpec"),
        {"terminal": True, "phase": "InvalidSpec"},
    ),
    "token-rejected": (
        lambda env: token_refused(env, "CW-SECRET-unknown"),
        needs_person("CredentialsRejected"),
        {"terminal": False, "phase": "CredentialsRejected"},
    ),
    "token-not-admin": (
        lambda env: token_refused(env, DEV_USER_TOKEN),
        needs_person("PermissionDenied"),
        {"terminal": False, "phase": "PermissionDenied"},
    ),
    "endpoint-misrouted": (
        misrouted,
        needs_person("EndpointMisrouted"),
        {"terminal": False, "runnerId": UNSET},
    ),
    "incompatible-server": (
        incompatible,
        needs_person("IncompatibleServer"),
        {"terminal": True, "phase": "IncompatibleServer"},
    ),
    "operator-bug": (internal_error, retried("InternalError"), {"terminal": False}),
    "edited-outside-kubernetes": (
        drift,
        {"Event:Warning:DriftCorrected", AVAILABLE} | OK,
        {"displayName": UNSET},
    ),
    "deleted-outside-kubernetes": (
        deleted_outside,
        {"Event:Warning:RecreatingDeletedRunner", "Ready:False:Creating"} | OK,
        {"runnerId": None, "recreations": 1},
    ),
    "replacement-starts": (
        lambda env: replacement(env, 1),
        {"Event:Normal:ReplacementStarted", "Ready:False:Replacing"} | OK,
        {"replacement.fromRunnerId": "owned", "replacement.toRunnerId": "owned-2"},
    ),
    "replacement-waits-for-the-decommission": (
        lambda env: replacement(env, 2),
        {"Ready:False:Replacing"} | OK,
        {"phase": UNSET},
    ),
    "replacement-completes": (
        lambda env: replacement(env, 5),
        {"Event:Normal:Replaced", "Ready:False:Installing"} | OK,
        {"replacement": None, "runnerId": "owned-2"},
    ),
    "requested-update-applied": (
        lambda env: channel_update(env, published=True, request="2026-12-04T10:00:00Z"),
        {"Event:Normal:UpdateApplied", "Ready:False:RollingOut"} | OK,
        {
            "lastUpdateRequest.request": "2026-12-04T10:00:00Z",
            "lastUpdateRequest.outcome": "Applied",
            "lastAppliedUpdate.trigger": "Request",
            "lastAppliedUpdate.fromRevision": 1,
            "lastAppliedUpdate.toRevision": 2,
            "lastAppliedUpdate.releaseChannel": "RELEASE_CHANNEL_STABLE",
        },
    ),
    "update-applied-when-available": (
        lambda env: channel_update(env, published=True, apply="WhenAvailable"),
        {"Event:Normal:UpdateApplied", "Ready:False:RollingOut"} | OK,
        {"lastAppliedUpdate.trigger": "WhenAvailable", "lastUpdateRequest": UNSET},
    ),
    "update-requested-with-none-available": (
        lambda env: channel_update(env, published=False, request="first"),
        {"Event:Normal:UpdateNotAvailable", AVAILABLE} | OK,
        {"lastUpdateRequest.outcome": "NotAvailable", "lastAppliedUpdate": UNSET},
    ),
    "deletion-stalls": (
        deletion_stalled,
        {
            "Event:Warning:DeletionStalled",
            "Ready:False:Deleting",
            "Synced:True:Synced",
            "Stalled:True:DeletionStalled",
        },
        {"deletion.stalled": True, "release": False},
    ),
    "env-secret-value-missing": (
        env_secret_value_missing,
        needs_person("SecretNotFound"),
        {"phase": "SecretNotFound"},
    ),
}


# --- credentials, as the handler layer resolves them ------------------------------------------------

CREDENTIALS = {"credentials": {"secretRef": {"name": "api"}}}
ENV_REF = {"overrides": {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}]}}


def secrets(found: Mapping[str, Mapping[str, str] | None]) -> Callable[[str, str], Mapping[str, str] | None]:
    """A Secret getter over (name -> data); a missing name is a Secret that does not exist."""
    return lambda namespace, name: found.get(name)


class Refusal:
    """The official client's response when the API server answers `status` (a Status object)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.reason = "refused"
        self.data = b'{"kind": "Status", "code": %d}' % status
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers


def refused(status: int, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], Mapping[str, str] | None]:
    """kubernetes_secret_getter on a client whose API server answers `status` (config loading faked)."""
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda: None)
    monkeypatch.setattr(kubernetes.client.ApiClient, "call_api", lambda *_, **__: Refusal(status))
    return kubernetes_secret_getter()


GetterFor = Callable[[pytest.MonkeyPatch], Callable[[str, str], Mapping[str, str] | None]]

HANDLER: dict[str, tuple[dict[str, Any], Settings, GetterFor, str]] = {
    "no-credentials-anywhere": ({}, Settings(), lambda _: secrets({}), "CredentialsMissing"),
    "credentials-secret-missing": (
        CREDENTIALS,
        Settings(),
        lambda _: secrets({}),
        "CredentialsSecretNotFound",
    ),
    "default-credentials-secret-missing": (
        {},
        Settings(default_secret="operator/api"),
        lambda _: secrets({}),
        "CredentialsSecretNotFound",
    ),
    "default-credentials-not-allowed-here": (
        {},
        Settings(default_token=SecretStr("t"), default_credentials_namespaces="team-b"),
        lambda _: secrets({}),
        "DefaultCredentialsNotAllowed",
    ),
    "credentials-key-missing": (
        CREDENTIALS,
        Settings(),
        lambda _: secrets({"api": {"other": "x"}}),
        "CredentialsKeyMissing",
    ),
    "env-secret-missing": (
        ENV_REF,
        Settings(default_token=SecretStr("t")),
        lambda _: secrets({}),
        "SecretNotFound",
    ),
    "env-secret-key-missing": (
        ENV_REF,
        Settings(default_token=SecretStr("t")),
        lambda _: secrets({"env": {"other": "x"}}),
        "SecretKeyMissing",
    ),
    "secret-read-forbidden": (CREDENTIALS, Settings(), lambda mp: refused(403, mp), "SecretAccessDenied"),
    "secret-read-failed": (CREDENTIALS, Settings(), lambda mp: refused(500, mp), "SecretReadFailed"),
}


async def resolve_and_report(
    spec: dict[str, Any], settings: Settings, getter: GetterFor, monkeypatch: pytest.MonkeyPatch
) -> outcomes.Outcome:
    """What `handlers._with_credentials` does before any API call: resolve, and report a problem."""
    res = managed(**spec, status={"runnerId": "r1", "conditions": READY_BEFORE})
    try:
        scope = DefaultCredentialScope.configure(
            settings.default_credentials_namespaces,
            settings.default_credentials_namespace_selector,
            watched=[res.namespace],  # as `run -n <its namespace>`
        )
        await TokenRegistry(settings, getter(monkeypatch), scope=scope).resolve(res)
    except outcomes.CredentialsProblem as exc:
        return reconciling.failed(res, context(), exc)
    raise AssertionError("the credentials resolved")


# --- the tables ---------------------------------------------------------------------------------------


def check(outcome: outcomes.Outcome, expected: set[str], status: dict[str, Any]) -> None:
    assert signature(outcome) == expected
    assert fields(outcome, *status) == status


@pytest.mark.parametrize(("produce", "expected", "status"), list(PURE.values()), ids=list(PURE))
def test_the_reporting_step(
    produce: Callable[[], outcomes.Outcome], expected: set[str], status: dict[str, Any]
) -> None:
    check(produce(), expected, status)


@pytest.mark.parametrize(("produce", "expected", "status"), list(SHELL.values()), ids=list(SHELL))
async def test_the_shell_against_the_simulator(
    produce: Callable[[Env], Awaitable[outcomes.Outcome]], expected: set[str], status: dict[str, Any]
) -> None:
    async with environment() as env:
        check(await produce(env), expected, status)


@pytest.mark.parametrize(("spec", "settings", "getter", "reason"), list(HANDLER.values()), ids=list(HANDLER))
async def test_credentials_problems(
    spec: dict[str, Any], settings: Settings, getter: GetterFor, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = await resolve_and_report(spec, settings, getter, monkeypatch)
    assert signature(outcome) == needs_person(reason)
    assert fields(outcome, "phase", "terminal", "runnerId") == {
        "phase": reason,
        "terminal": False,
        "runnerId": UNSET,
    }
    assert "CW-SECRET" not in str(outcome)


# --- completeness ---------------------------------------------------------------------------------------


async def every_signature(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """Runs every scenario of the three tables again; what each one's outcome reported."""
    found = [signature(produce()) for produce, _, _ in PURE.values()]
    for produce_shell, _, _ in SHELL.values():
        async with environment() as env:
            found.append(signature(await produce_shell(env)))
    for spec, settings, getter, _ in HANDLER.values():
        with monkeypatch.context() as patched:
            found.append(signature(await resolve_and_report(spec, settings, getter, patched)))
    return found


def where(signatures: Iterable[set[str]]) -> dict[str, set[str]]:
    """reason -> the places (Event, Ready, Synced, Stalled) some scenario reported it."""
    places: dict[str, set[str]] = {}
    for entry in (e for s in signatures for e in s):
        place, _, reason = entry.split(":")
        places.setdefault(reason, set()).add(place)
    return places


async def test_every_catalogued_reason_has_a_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    produced = where(await every_signature(monkeypatch))
    assert set(produced) == set(reasons.REASONS) - set(NOT_COVERED)
    missing = {
        reason: set(used) - produced[reason]
        for reason, (used, _) in reasons.REASONS.items()
        if reason in produced and not set(used) <= produced[reason]
    }
    assert missing == {}, "reported, but not everywhere the catalogue says"


def test_the_allow_list_names_catalogued_reasons_only() -> None:
    assert set(NOT_COVERED) <= set(reasons.REASONS)


@examples(max_examples=300, deadline=None)
@given(found=any_facts(), answer=any_runner(), previous=st.sampled_from([[], READY_BEFORE]))
def test_no_pass_reports_an_uncovered_reason(
    found: planning.Facts, answer: Any, previous: list[dict[str, Any]]
) -> None:
    """The allow-list is true: whatever the facts and the API's answer, the reporting step never says them."""
    status: dict[str, Any] = {"conditions": previous}
    if found.held_id or found.bound:
        status["runnerId"] = found.held_id or "r1"
    res = managed(
        deleting=found.deleting,
        paused=found.paused,
        adopt=found.adopt,
        deletionPolicy=found.deletion_policy,
        replacementPolicy="Replace" if found.replace else "Reject",
        status=status,
    )
    outcome = reported(found, res, answer=answer)
    assert not {entry.split(":")[2] for entry in signature(outcome)} & set(NOT_COVERED)
