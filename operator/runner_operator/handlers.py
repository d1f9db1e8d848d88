"""The kopf layer: the watch feeds the scheduler of passes (a new spec is due at once), and
`reconciling.Outcome`s become status writes, Events and the finalizer's removal.

Only this module (and the CLI) imports kopf. kopf watches and posts Events; it runs no handler of
its own kind (no create, update or delete handler), so it keeps no diff-base and writes nothing;
the runner-claims and Secret-users indexes are the operator's (`indexing`: kopf's indexes cost
O(N²) at a start); the operator's own scheduler runs every pass and owns FINALIZER. Nothing here
touches the object's metadata or spec except the finalizer (Argo CD refreshes on metadata changes).
Events are posted explicitly with stable reasons; kopf's own log lines are not turned into Events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import logging
import random
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, cast

import aiohttp
import kopf

from runner_operator import allocator, cadence, claiming, kubeerrors, metrics, reconciling, resource, settings
from runner_operator import credentials as creds
from runner_operator.cloud.errors import CloudError
from runner_operator.cloud.runners import Runners
from runner_operator.credentials import (
    TokenRegistry,
    kubernetes_namespace_labels,
    kubernetes_secret_getter,
    kubernetes_secret_guard,
)
from runner_operator.indexing import Indexes, Startup
from runner_operator.quiet import QuietPasses
from runner_operator.reasons import Reason
from runner_operator.reconciling import CredentialsProblem, Outcome
from runner_operator.scheduling import CREATE, STEADY, Bodies, Scheduler
from runner_operator.status import StatusPatch
from runner_operator.tenancy import DefaultCredentialScope
from runner_operator.unsent import UnsentKeys
from runner_operator.workqueue import Slot, WorkQueue

GROUP, VERSION, PLURAL = resource.GROUP, resource.VERSION, resource.PLURAL
FINALIZER = resource.FINALIZER
KOPF_FINALIZER = f"{GROUP}/kopf-unused"
"""kopf's own finalizer name. kopf adds its finalizer only for deletion handlers, and removes it from
objects when no handler needs it: given FINALIZER, it would take ours off. The operator owns
FINALIZER itself (see `_scheduled_pass`); kopf, having no deletion handler, never adds this one."""

# kopf reads decorator arguments at import time, so the cadence comes from the environment now.
CONFIG = settings.load()
INTERVALS = cadence.Intervals(fast=CONFIG.fast_interval, resync=CONFIG.resync_interval)
SHARD = CONFIG.sharded()

log = logging.getLogger(__name__)

STEADY_PASSES = 32
"""Passes per credential running at once outside creation. They mostly read the shared list, so a few
dozen keep up with thousands of objects; each one in flight holds its object parsed and its desired
runner built, so during a mass creation (hundreds of installs polled at once) this bounds memory
(bench/RESULTS.md, "Fewer passes in flight")."""

EVENT_SOURCE = "managed-runner-operator"

KUBE_RETRY_BACKOFFS = (1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 60, 60, 60, 60, 60)
"""Seconds between kopf's retries of a failed Kubernetes request (about 7 minutes in all).

kopf posts Events with these retries (the operator's own status and finalizer writes have
`STATUS_WRITE_BACKOFFS`). Its default retries for under a minute, shorter than an ordinary
control-plane upgrade; these cover one."""


def owned(body: Mapping[str, Any], **_: Any) -> bool:
    """Whether this process's shard handles the object (always, unsharded): `sharding` rule 1."""
    meta = body.get("metadata") or {}
    return SHARD.owns(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff-base, kept nowhere: no handler here asks kopf what changed.

    kopf builds an object's "essence" (a deep copy of its spec and metadata) on every watch event
    and stores the last handled one for its change handlers; the operator has none (a new spec is
    noticed by its generation, `cadence.spec_is_new`), so both the copy and the status write that
    stored it at each creation are skipped.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


class SharedMemo(kopf.Memo):
    """The operator's memo, handed to every object's handlers as it is, not as kopf's shallow copy.

    kopf keeps a copy per object for the life of the process (about 0.5 KB each with this memo's
    keys) so that handlers could keep per-object values in it; these handlers keep none (per-object
    state is in `Bodies`, the scheduler and the indexes), and everything in it is shared by design.
    """

    def __copy__(self) -> SharedMemo:
        return self


WORKER_IDLE_SECONDS = 0.5
"""How long kopf's worker for an object waits for its next event before it exits (kopf: 5 s). While it
waits it keeps the last event, the whole parsed object: at a restart every object arrives within a
few seconds, so this wait is how many bodies are alive at once (bench/RESULTS.md, "kopf's idle
workers"). A worker that exited is started again by the object's next event."""


def tune(kopf_settings: kopf.OperatorSettings, config: settings.Settings) -> None:
    """kopf's settings: our storage fields, Event source, retries, watch timeouts and list pages."""
    kopf_settings.persistence.finalizer = KOPF_FINALIZER
    kopf_settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
    kopf_settings.persistence.diffbase_storage = NoDiffBase()
    kopf_settings.posting.loggers = False
    # `kubectl describe` shows Events "From: managed-runner-operator", not "kopf".
    kopf_settings.posting.reporting_component = EVENT_SOURCE
    kopf_settings.posting.reporting_instance = socket.gethostname()
    kopf_settings.posting.event_name_prefix = "managed-runner-"
    kopf_settings.networking.error_backoffs = KUBE_RETRY_BACKOFFS
    kopf_settings.watching.server_timeout = 300
    kopf_settings.watching.client_timeout = 330
    kopf_settings.watching.chunk_size = config.list_chunk_size or None
    kopf_settings.queueing.idle_timeout = WORKER_IDLE_SECONDS


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    tune(settings, CONFIG)
    registry: metrics.Registry = memo.metrics  # made and served by the CLI, before leader election
    scope = DefaultCredentialScope.configure(
        CONFIG.default_credentials_namespaces,
        CONFIG.default_credentials_namespace_selector,
        memo.get("namespaces") or (),
    )
    if CONFIG.default_token is not None or CONFIG.default_secret:
        log.info("the default credentials serve %s", scope.describe())
    credentials = TokenRegistry(
        CONFIG,
        kubernetes_secret_getter(),
        observer=registry.observe_request,
        guard=kubernetes_secret_guard(),
        scope=scope,
        namespace_labels=kubernetes_namespace_labels() if scope.selector else None,
    )
    registry.budget_stats = credentials.budget_stats
    memo.credentials = credentials
    memo.locks = {}
    memo.bound = {}  # uid -> runner ID this process bound (bridges the gap until the status write shows)
    memo.quiet = QuietPasses()
    memo.unsent = UnsentKeys()  # create keys reserved here and not sent yet
    bodies = memo.bodies = Bodies(clock=asyncio.get_running_loop().time)
    # Every object's handlers get this memo itself (SharedMemo): nothing per object is kept in it.
    memo.indexes = Indexes()
    memo.startup = Startup()
    memo.started = asyncio.Event()

    def slot(uid: str) -> Slot:
        return Slot(STEADY) if uid in memo.bound else bodies.slot(uid)

    async def run(uid: str) -> float | None:
        await memo.started.wait()  # every object that existed at start is indexed
        return await _scheduled_pass(memo, uid)

    memo.scheduler = scheduler = Scheduler(
        WorkQueue(limits={CREATE: CONFIG.passes_per_credential, STEADY: STEADY_PASSES}),
        run=run,
        slot=slot,
        clock=asyncio.get_running_loop().time,
    )

    def changed_in_list(runner_ids: frozenset[str]) -> None:
        # Drift (or any change) seen by the shared list is looked at now, not at the next resync.
        woken = bodies.holding(runner_ids)
        for uid in woken:
            scheduler.add(uid, 0.0)
        registry.list_wakes.inc(len(woken))

    credentials.on_change = changed_in_list
    if CONFIG.malloc_trim_seconds:
        memo.trimming = asyncio.create_task(_trim_memory(CONFIG.malloc_trim_seconds))
    registry.work_queue_depth.set_function(lambda: len(scheduler.queue))
    registry.passes_running.set_function(lambda: scheduler.running)
    await wait_until_served(_served_by_discovery, within=CONFIG.startup_timeout)
    await index_existing(memo.indexes, memo.startup, _list_scope(memo), within=CONFIG.startup_timeout)
    memo.settling = asyncio.create_task(settle(memo.startup, memo.indexes, memo.started, _list_scope(memo)))


ListScope = Callable[[], list[dict[str, Any]]]
"""Every ManagedRunner in the watched scope, slimmed to what the indexes read (blocking: a thread's)."""


async def index_existing(indexes: Indexes, startup: Startup, listed: ListScope, *, within: float) -> None:
    """Fill the indexes from one paged list before the watch starts, retried for `within` seconds
    (failing then exits the process: a visible restart rather than passes that cannot start)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            bodies = await asyncio.to_thread(listed)
            break
        except Exception as exc:  # any failure to list means: not yet
            if loop.time() >= deadline:
                raise kopf.PermanentError(
                    f"listing {PLURAL} failed for {within:.0f}s: {kubeerrors.describe(exc)}"
                ) from None
            log.warning("listing %s to index them failed (%s); retrying", PLURAL, kubeerrors.describe(exc))
            await asyncio.sleep(2.0)
    for body in bodies:
        indexes.put(body)
        startup.expect(str(body["metadata"].get("uid")))
    startup.listed = True
    log.info("indexed %d %s; passes start once the watch has delivered them", len(bodies), PLURAL)


async def settle(
    startup: Startup,
    indexes: Indexes,
    started: asyncio.Event,
    listed: ListScope,
    *,
    every: float = 2.0,
    relist_after: float = 10.0,
) -> None:
    """Open `started` once the watch has delivered every object the first list named. One it never
    delivers was deleted in between: after `relist_after` seconds without progress, a new list
    tells which, and their entries leave the indexes (a deleted object claims nothing)."""
    loop = asyncio.get_running_loop()
    last, since = startup.pending, loop.time()
    while not startup.done:
        await asyncio.sleep(every)
        if startup.pending != last:
            last, since = startup.pending, loop.time()
        elif loop.time() - since >= relist_after:
            since = loop.time()
            try:
                now = frozenset(str(b["metadata"].get("uid")) for b in await asyncio.to_thread(listed))
            except Exception as exc:
                log.warning("listing %s again failed (%s); retrying", PLURAL, kubeerrors.describe(exc))
                continue
            for uid in startup.relisted(now):
                indexes.forget(uid)
    started.set()


def _list_scope(memo: kopf.Memo) -> ListScope:
    namespaces: tuple[str, ...] = tuple(memo.get("namespaces") or ())
    return functools.partial(list_managed_runners, namespaces, CONFIG.list_chunk_size)


def list_managed_runners(namespaces: tuple[str, ...], chunk: int) -> list[dict[str, Any]]:
    """Every ManagedRunner in `namespaces` (all if empty), in pages of `chunk` (0: one list), each
    slimmed to the fields the indexes read, so a list of thousands is never held whole."""
    from kubernetes import client

    api = _objects()
    found: list[dict[str, Any]] = []
    for namespace in namespaces or (None,):
        start, token = len(found), None
        while True:
            page_args: dict[str, Any] = {"limit": chunk} if chunk else {}
            if token:
                page_args["_continue"] = token
            try:
                if namespace is None:
                    page = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **page_args)
                else:
                    page = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **page_args)
            except client.ApiException as exc:
                if exc.status == 410 and token:  # the continue token expired: list again from the start
                    del found[start:]
                    token = None
                    continue
                raise
            found.extend(_slim(item) for item in page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return found


def _slim(body: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    return {
        "metadata": {
            k: meta.get(k) for k in ("uid", "namespace", "name", "creationTimestamp", "deletionTimestamp")
        },
        "spec": {"runnerId": spec.get("runnerId"), "credentials": spec.get("credentials")},
        "status": {"runnerId": status.get("runnerId"), "credentialsSecret": status.get("credentialsSecret")},
    }


async def wait_until_served(served: Callable[[], bool], *, within: float, interval: float = 2.0) -> None:
    """Hold the start until the API server's discovery lists ManagedRunners.

    kopf scans discovery once when it starts and later re-scans only on a change to a CRD, so an
    operator started while the API server is still filling discovery (a control-plane upgrade or
    restart) would watch nothing until its next restart. Failing after `within` seconds exits the process:
    the restart that follows is visible, a silent operator is not.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    waited = False
    while True:
        try:
            if await asyncio.to_thread(served):
                if waited:
                    log.info("%s.%s/%s is served; starting", PLURAL, GROUP, VERSION)
                return
            problem = "not listed by discovery yet"
        except Exception as exc:  # any failure to read discovery means: not yet
            problem = f"discovery failed: {type(exc).__name__}"
        if loop.time() >= deadline:
            raise kopf.PermanentError(
                f"{PLURAL}.{GROUP}/{VERSION} not served after {within:.0f}s ({problem}): "
                "is the CRD installed?"
            )
        if not waited:
            log.warning("waiting for the API server to serve %s.%s/%s (%s)", PLURAL, GROUP, VERSION, problem)
            waited = True
        await asyncio.sleep(interval)


def _served_by_discovery() -> bool:
    from kubernetes import client

    try:
        found = client.CustomObjectsApi().get_api_resources(GROUP, VERSION)
    except client.ApiException as exc:
        if exc.status == 404:  # the group/version is not in discovery (yet)
            return False
        raise
    return any(r.name == PLURAL for r in (found.resources or ()))


@kopf.on.login()
async def login(memo: kopf.Memo, **kwargs: Any) -> kopf.AiohttpSession | None:
    """kopf's own login (kubeconfig or in-cluster), on a connection pool of bounded size.

    kopf's default pool has no limit: while 1,000 objects were being created, bursts of status
    patches and Events held 436 TLS connections to the API server, ~128 KiB of buffers each.
    Watch streams hold a connection each (a few per watched namespace), so they come on top.
    """
    info = await asyncio.to_thread(kopf.login_via_client, memo=memo, **kwargs)
    if info is None:
        return None
    watches = 2 * int(memo.get("watched_namespaces") or 1) + 2
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=CONFIG.kube_connections + watches, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )


async def _trim_memory(every: float) -> None:
    """Hand the allocator's free pages back now and then, so RSS follows what is in use, not its peak."""
    while True:
        await asyncio.sleep(every)
        allocator.trim()


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    for task in (memo.get("trimming"), memo.get("settling")):
        if task is not None:
            task.cancel()
    scheduler: Scheduler | None = memo.get("scheduler")
    if scheduler is not None:
        await scheduler.stop()
    credentials: TokenRegistry | None = memo.get("credentials")
    if credentials is not None:
        await credentials.aclose()


def drop_managed_fields(body: kopf.Body) -> bool:
    """Forget `metadata.managedFields` in the bodies kopf hands to the handlers.

    Called first for every event. They are over half of the parsed JSON objects of a ManagedRunner,
    and nothing here reads them:
    kopf patches with merge patches, not server-side apply. kopf's Body is a read-only view, so
    this reaches the dict beneath it; should kopf change that, nothing is dropped (and the unit
    test of this function fails). Returns whether the dict beneath was reached.
    """
    raw = getattr(body, "_src", None)
    if not isinstance(raw, dict):
        return False
    metadata = raw.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return True


def _freshness(body: kopf.Body) -> float:
    """How old a batched observation may be: about one poll interval at this object's cadence."""
    return INTERVALS.freshness(cadence.of_status(body.get("status") or {}).cadence)


def _first_look(status: Mapping[str, Any]) -> float:
    """Seconds from first sight (a start, a new object) to the first pass: at once while in flight,
    after one fast interval when retrying, anywhere in one resync when steady (so a restart with
    thousands of Ready runners spreads their passes instead of running them all at once)."""
    verdict = cadence.of_status(status).cadence
    if verdict == cadence.Cadence.FAST:
        return 0.0
    if verdict == cadence.Cadence.MEDIUM:
        return INTERVALS.fast
    return random.uniform(0, CONFIG.resync_interval)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def seen(
    type: str | None,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: kopf.Logger = log,
    **_: Any,
) -> None:
    """Feed the scheduler: keep the latest body and make sure a pass is due at this object's cadence.

    A new object needs no create handler: it is due at once. A new spec needs no update handler:
    another generation (or, at a start, one the status has not observed) is due at once, and that
    pass reads its Secrets now. A status that calls for a faster cadence (a rollout) brings its
    next pass forward; nothing ever delays one.
    A deletion is due at once when first seen, then at the fast cadence; an object deleting without
    FINALIZER holds nothing of ours. The scheduler starts here, not at start-up, so its tasks run in
    kopf's per-object context, where Events can be posted.
    """
    drop_managed_fields(body)
    meta = body.get("metadata", {})
    uid = str(meta.get("uid"))
    indexes: Indexes = memo.indexes
    if type == "DELETED":
        indexes.forget(uid)
    else:
        indexes.put(body)
    startup: Startup = memo.startup
    startup.delivered(uid)
    if startup.done:
        memo.started.set()
    if not owned(body):
        return  # another shard's (the indexes above still see every object: clusters are shared)
    scheduler: Scheduler = memo.scheduler
    scheduler.start()
    deleting = bool(meta.get("deletionTimestamp"))
    if type == "DELETED" or (deleting and FINALIZER not in (meta.get("finalizers") or ())):
        memo.bodies.forget(uid)
        scheduler.forget(uid)
        memo.unsent.forget(uid)
        return
    status = body.get("status") or {}
    was_deleting = memo.bodies.deleting(uid)
    bodies: Bodies = memo.bodies
    if bodies.put(uid, body):
        if SHARD.count > 1:
            logger.info("Shard %s handles %s/%s.", SHARD, meta.get("namespace"), meta.get("name"))
        scheduler.add(uid, 0.0 if deleting or bodies.spec_pending(uid) else _first_look(status))
        return
    if deleting:
        scheduler.add(uid, INTERVALS.fast if was_deleting else 0.0)
        return
    if bodies.spec_pending(uid):
        scheduler.add(uid, 0.0)  # a spec change is looked at now, whatever the cadence
        return
    delay = INTERVALS.of(cadence.of_status(status).cadence)
    if delay is not None:
        scheduler.add(uid, delay)


async def _scheduled_pass(memo: kopf.Memo, uid: str) -> float | None:
    """The level-triggered pass (it creates, updates and deletes like any other); returns when to look
    again: fast while in flight, slower when degraded, slow when steady, or as the API asked.

    The operator owns FINALIZER (kopf is given another name and no deletion handler): it is added
    before the first pass that could send anything and removed only by a pass that released the
    runner (the API confirmed it gone, or Orphan, or nothing was ever sent). Past the deletion
    deadline the pass keeps retrying, slower, with Stalled=True; a decommission that is only waiting
    writes nothing (no per-retry progress in status, unlike kopf's handler retries).
    """
    skipped = await _still_quiet(memo, uid)
    if skipped is not None:
        return skipped
    raw = memo.bodies.get(uid)
    if raw is None:
        return None  # gone
    meta = raw.get("metadata", {})
    deleting = bool(meta.get("deletionTimestamp"))
    if not deleting and FINALIZER not in (meta.get("finalizers") or ()):
        await _add_finalizer(memo, raw)
        raw = memo.bodies.get(uid) or raw
    body, patch = kopf.Body(cast(Any, raw)), kopf.Patch()
    version, read = memo.bodies.version(uid), raw
    # A new spec is planned against a recent observation, with its Secrets read now.
    new_spec = memo.bodies.take_new_spec(uid)
    outcome = await _pass(
        body,
        patch,
        memo,
        CONFIG.fast_interval if new_spec else _freshness(body),
        commit=lambda p, o: _commit(memo, uid, body, p, o),
        latest=lambda: memo.bodies.unless_newer(uid, read, version),
        fresh=new_spec,
    )
    if outcome is None:
        return INTERVALS.resync
    # The cadence of the status as it now stands: a quiet pass writes nothing, and an empty patch
    # alone would read as "never looked at" (a fast poll of every steady runner).
    after = cadence.after_pass(
        {**(body.get("status") or {}), **outcome.status.to_patch()},
        INTERVALS,
        released=outcome.release,
        retry_after=outcome.retry_after,
        deleting=deleting,
    )
    return after.delay


async def _still_quiet(memo: kopf.Memo, uid: str) -> float | None:
    """When to look again if this pass would repeat the object's last quiet pass, judged without
    unpacking or parsing the object (`reconciling.unchanged_since`); None: run the pass in full.

    Its Secrets are resolved as a full pass resolves them (a rotation changes the fingerprint), and
    any doubt (a Secret unreadable, the list failing) leaves the decision to the full pass.
    """
    quiet: QuietPasses | None = memo.get("quiet")
    recipe = quiet.recipe(uid) if quiet is not None else None
    version = memo.bodies.version(uid)
    if quiet is None or not isinstance(recipe, reconciling.Recipe) or version != recipe.version:
        return None
    credentials: TokenRegistry = memo.credentials
    try:
        resolved = await credentials.resolve(recipe.secrets)
        async with credentials.turn(resolved.token):
            now = datetime.datetime.now(datetime.UTC)
            ctx = _resolved_context(
                reconciling.Context(
                    now=now,
                    deletion_timeout=CONFIG.deletion_timeout,
                    claimed_by=_claimed_by(
                        recipe.runner_id, recipe.secrets.namespace, uid, memo.indexes.claims
                    ),
                    bound_here=memo.bound.get(uid),
                ),
                resolved,
                uid,
            )
            cloud = Runners(
                credentials.client(resolved.token),
                credentials.cache(resolved.token),
                INTERVALS.freshness(recipe.cadence),
            )
            if not await reconciling.unchanged_since(quiet, uid, version, cloud, ctx):
                return None
    except (CredentialsProblem, CloudError):
        return None
    _record(memo.metrics, uid, Outcome(StatusPatch(), unchanged=True))
    return INTERVALS.of(recipe.cadence)


def _resolved_context(ctx: reconciling.Context, resolved: creds.Resolved, uid: str) -> reconciling.Context:
    """A pass's context with what its credentials resolved to (the fingerprint, never the token)."""
    return dataclasses.replace(
        ctx,
        secrets=resolved.env,
        credential=creds.fingerprint(resolved.token, uid),
        credentials_secret=resolved.secret,
        track_secret=True,
    )


async def _commit(
    memo: kopf.Memo, uid: str, body: kopf.Body, patch: kopf.Patch, outcome: Outcome | None
) -> None:
    """Store a pass's outcome: its status, or, once the runner is released, the finalizer's removal
    (the object is about to go: a last status write would only be one more write)."""
    if outcome is not None and outcome.release:
        await _remove_finalizer(memo, memo.bodies.get(uid) or body)
    elif patch:
        await _write_status(memo, body, patch)


STATUS_WRITE_BACKOFFS = (1, 2, 4, 8, 15, 30)
"""Seconds between attempts at one write (about a minute): a pass's outcome (a runner just created,
a recreation counted) outlives an API server restart; after that the pass fails and the scheduler's
backoff takes over, and the next pass recomputes from the cloud."""


async def _kube_write(memo: kopf.Memo, body: Mapping[str, Any], what: str, call: Callable[[], Any]) -> None:
    """Send one write to the Kubernetes API, retried through transient failures; keep the response.

    A conflict (409) or a failed JSON-patch test (422) is not retried: the body it was based on is
    stale, and the scheduler's next pass starts from the newer one. A 404 means the object is gone.
    """
    import urllib3
    from kubernetes import client

    meta = body.get("metadata", {})
    for pause in (*STATUS_WRITE_BACKOFFS, None):
        try:
            written = await asyncio.to_thread(call)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            if exc.status == 403:  # one line naming the missing grant, not only a traceback
                where = f"{meta.get('namespace')}/{meta.get('name')}"
                log.error("%s of %s refused: %s", what, where, kubeerrors.describe(exc))
            if pause is None or exc.status in (400, 403, 409, 422):
                raise
            problem = f"HTTP {exc.status}"
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            if pause is None:
                raise
            problem = type(exc).__name__
        else:
            memo.bodies.wrote(str(meta.get("uid")), written)
            return
        log.warning(
            "%s of %s/%s failed (%s); retrying in %ss",
            what,
            meta.get("namespace"),
            meta.get("name"),
            problem,
            pause,
        )
        await asyncio.sleep(pause)


@functools.cache
def _objects() -> Any:
    """One client for every status and finalizer write, so writes reuse its connection pool: a client
    per write opened a new TLS connection to the API server each time (a handshake on both sides per
    write; bench/RESULTS.md, "Kubernetes writes on one connection pool")."""
    from kubernetes import client

    return client.CustomObjectsApi()


async def _write_status(memo: kopf.Memo, body: Mapping[str, Any], patch: kopf.Patch) -> None:
    """Merge-patch the status subresource, as kopf does after a handler."""
    meta = body.get("metadata", {})
    api = _objects()
    await _kube_write(
        memo,
        body,
        "status write",
        lambda: api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            meta.get("namespace"),
            PLURAL,
            meta.get("name"),
            {"status": dict(patch.status)},
            field_manager=EVENT_SOURCE,
            _content_type="application/merge-patch+json",
        ),
    )


async def _add_finalizer(memo: kopf.Memo, body: Mapping[str, Any]) -> None:
    """Put FINALIZER on the object before anything is sent for it (the planner waits until it is there).

    A merge patch of the whole list, conditional on the resourceVersion it was read at: a list changed
    meanwhile by someone else is never overwritten (409, and the next pass reads it again).
    """
    meta = body.get("metadata", {})
    api = _objects()
    change = {
        "metadata": {
            "finalizers": [*(meta.get("finalizers") or ()), FINALIZER],
            "resourceVersion": meta.get("resourceVersion"),
        }
    }
    await _kube_write(
        memo,
        body,
        "adding the finalizer",
        lambda: api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            meta.get("namespace"),
            PLURAL,
            meta.get("name"),
            change,
            field_manager=EVENT_SOURCE,
            _content_type="application/merge-patch+json",
        ),
    )


async def _remove_finalizer(memo: kopf.Memo, body: Mapping[str, Any]) -> None:
    """Take FINALIZER off once the runner is released: a JSON patch that tests the entry it removes,
    so another controller's finalizer added or removed meanwhile is never touched (422, retried)."""
    meta = body.get("metadata", {})
    finalizers = list(meta.get("finalizers") or ())
    if FINALIZER not in finalizers:
        return
    at = f"/metadata/finalizers/{finalizers.index(FINALIZER)}"
    api = _objects()
    ops = [{"op": "test", "path": at, "value": FINALIZER}, {"op": "remove", "path": at}]
    await _kube_write(
        memo,
        body,
        "removing the finalizer",
        lambda: api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            meta.get("namespace"),
            PLURAL,
            meta.get("name"),
            ops,
            field_manager=EVENT_SOURCE,
            _content_type="application/json-patch+json",
        ),
    )


async def _pass(
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    max_age: float = 0.0,
    *,
    fresh: bool = False,
    commit: Callable[[kopf.Patch, Outcome | None], Awaitable[None]] | None = None,
    latest: Callable[[], dict[str, Any] | None] | None = None,
) -> Outcome | None:
    """One serialised reconcile pass for this object; the outcome is applied to `patch` and Events.

    `commit` writes the patch before the lock is released, so the next pass for this object never
    starts before the last one's status is stored. `latest` re-reads the body once the lock is held:
    a pass that waited for another must not act on the spec and status from before it.
    """
    uid = str(body.get("metadata", {}).get("uid"))
    locks: dict[str, asyncio.Lock] = memo.locks
    lock = locks.setdefault(uid, asyncio.Lock())
    async with lock:
        if latest is not None:
            raw = latest()
            if raw is None:
                return None  # gone
            body = kopf.Body(cast(Any, raw))
        try:
            res = resource.ManagedRunnerResource.from_body(body)
        except ValueError as exc:
            # The CRD should have rejected it (or a newer operator version wrote a field this one does
            # not know). Reported once per distinct problem; deletion still works from the identity alone.
            found = resource.ManagedRunnerResource.identity_only(body)
            if found is None or not found.deleting:
                _apply(body, patch, reconciling.unreadable(body, datetime.datetime.now(datetime.UTC), exc))
                if commit is not None:
                    await commit(patch, None)
                return None
            res = found
        ctx = reconciling.Context(
            now=datetime.datetime.now(datetime.UTC),
            deletion_timeout=CONFIG.deletion_timeout,
            claimed_by=_claimed_by(res.spec.runner_id, res.namespace, res.uid, memo.indexes.claims),
            bound_here=memo.bound.get(uid),
            unsent=memo.unsent,
        )
        credentials: TokenRegistry = memo.credentials
        orphan = res.spec.deletion_policy == "Orphan"
        if res.deleting and (orphan or reconciling.never_sent(res, memo.bound.get(uid))):
            # Orphan, or nothing was ever sent to the API: no credentials, no call needed.
            outcome = reconciling.released(res, ctx, orphaned=orphan)
        else:
            outcome = await _with_credentials(
                res,
                ctx,
                credentials,
                creating=uid not in memo.bound,
                max_age=max_age,
                quiet=memo.quiet,
                fresh=fresh,
            )
        await _release_secrets(credentials, res, outcome, memo.indexes.users)
        _apply(body, patch, outcome)
        if commit is not None:
            await commit(patch, outcome)
    _record(memo.metrics, uid, outcome)
    if outcome.status.is_set("runner_id"):
        if outcome.status.runner_id:
            memo.bound[uid] = outcome.status.runner_id
            memo.unsent.forget(uid)
        else:
            memo.bound.pop(uid, None)
    if outcome.release:
        locks.pop(uid, None)
        memo.bound.pop(uid, None)
        memo.quiet.forget(uid)
    return outcome


async def _with_credentials(
    res: resource.ManagedRunnerResource,
    ctx: reconciling.Context,
    credentials: TokenRegistry,
    *,
    creating: bool,
    max_age: float,
    quiet: QuietPasses,
    fresh: bool = False,
) -> Outcome:
    """Resolve and protect the credentials, then reconcile with the client and cache for that token.

    Secret reads are shared between passes for a few seconds (`fresh` reads now). A token from such
    a read that the API rejects may predate a rotation: the Secret is read again and, if it now holds
    another token, the pass runs once more with it, so a rotation that revokes the old token at once
    is not reported as rejected credentials.
    """

    async def reconcile_as(resolved: creds.Resolved) -> Outcome:
        # Only the creation backlog takes turns: a pass for a bound runner mostly reads the shared
        # list, and queueing it behind hundreds of creates would hide installs finishing meanwhile.
        async with credentials.turn(resolved.token, creating=creating and not res.status.get("runnerId")):
            # The turn may have taken a while: `now` is taken after it.
            used = _resolved_context(
                dataclasses.replace(ctx, now=datetime.datetime.now(datetime.UTC)), resolved, res.uid
            )
            cloud = Runners(credentials.client(resolved.token), credentials.cache(resolved.token), max_age)
            return await reconciling.reconcile(res, cloud, used, quiet)

    unbound = creating and not res.deleting and not res.status.get("runnerId")
    try:
        resolved = await _resolve(credentials, res, fresh=fresh, unbound=unbound)
        outcome = await reconcile_as(resolved)
        if not (resolved.shared and outcome.credentials_rejected):
            return outcome
        again = await _resolve(credentials, res, fresh=True, unbound=unbound)
    except CredentialsProblem as exc:
        return reconciling.failed(res, ctx, exc)
    if again.token.get_secret_value() == resolved.token.get_secret_value():
        return outcome
    return await reconcile_as(again)


async def _resolve(
    credentials: TokenRegistry, res: resource.ManagedRunnerResource, *, fresh: bool, unbound: bool
) -> creds.Resolved:
    """The pass's credentials, with their Secret protected. A resource not bound to a runner yet is
    given none from a Secret that cannot be protected (gone, or being deleted): a runner created with
    it could not be deleted once the Secret is gone. A bound or deleting one keeps its token."""
    resolved = await credentials.resolve(res, env=not res.deleting, fresh=fresh)
    if resolved.secret and not await credentials.protect(res.namespace, resolved.secret) and unbound:
        raise CredentialsProblem(
            Reason.CREDENTIALS_SECRET_NOT_FOUND,
            f"credentials Secret {res.namespace}/{resolved.secret} (spec.credentials) is gone or being "
            "deleted: no runner is created with credentials that cannot outlive it",
        )
    return resolved


async def _release_secrets(
    credentials: TokenRegistry,
    res: resource.ManagedRunnerResource,
    outcome: Outcome,
    users: Mapping[str, Any],
) -> None:
    """Drop the in-use finalizer from credentials Secrets this resource no longer needs, if no other does.

    On release every Secret it used goes. Otherwise only one it protected before and has switched
    from, and only once the new credentials have proved themselves (they saw the runner, or nothing
    was ever sent): until then the old Secret may be the only way left to reach the runner.
    """
    previous = res.status.get("credentialsSecret")
    current = res.spec.credentials.secret_ref.name if res.spec.credentials else None
    written = outcome.status.credentials_secret if outcome.status.is_set("credentials_secret") else previous
    switched = written == current and (
        outcome.status.is_set("install_status") or reconciling.never_sent(res, None)
    )
    done = set() if outcome.release else {current} if switched else {current, previous}
    for name in {previous, current} - done:
        if not name:
            continue
        others = _other_users(users, res.namespace, name, res.uid)
        if others == "none":
            await _unprotect(credentials, res.namespace, name)
        elif others == "deleting":
            # Users deleted together (a namespace teardown) may each see the other still listed; the
            # last one to go re-checks once the index has caught up, so the Secret is never stranded.
            task = asyncio.create_task(
                _unprotect_when_unused(credentials, users, res.namespace, name, res.uid)
            )
            _BACKGROUND.add(task)
            task.add_done_callback(_BACKGROUND.discard)


_BACKGROUND: set[asyncio.Task[None]] = set()
RECHECK_INTERVAL, RECHECK_TIMES = 2.0, 30


def _other_users(
    users: Mapping[str, Any], namespace: str, name: str, uid: str
) -> Literal["none", "deleting", "live"]:
    """Whether other ManagedRunners use the Secret: none, only ones being deleted, or a live one.

    Stops at the first live one: with one Secret shared by thousands of runners, building the list
    of every other user on each pass that asks was 7% of a profile of the operator at N = 3,000
    (restarted, decommissioning).
    """
    found: Literal["none", "deleting", "live"] = "none"
    for user, deleting in users.get(f"{namespace}/{name}", ()):
        if user == uid:
            continue
        if not deleting:
            return "live"
        found = "deleting"
    return found


async def _unprotect_when_unused(
    credentials: TokenRegistry, users: Mapping[str, Any], namespace: str, name: str, uid: str
) -> None:
    """Re-read the live index a few times; unprotect once no other ManagedRunner uses the Secret."""
    for _ in range(RECHECK_TIMES):
        await asyncio.sleep(RECHECK_INTERVAL)
        others = _other_users(users, namespace, name, uid)
        if others == "none":
            await _unprotect(credentials, namespace, name)
            return
        if others == "live":
            return  # a live user keeps it


async def _unprotect(credentials: TokenRegistry, namespace: str, name: str) -> None:
    try:
        await credentials.unprotect(namespace, name)
    except CredentialsProblem as exc:
        log.warning("Secret %s/%s keeps its in-use finalizer: %s", namespace, name, exc.message)


def _record(registry: metrics.Registry, uid: str, outcome: Outcome) -> None:
    """Count the pass and remember what it saw, for the scrape-time gauges."""
    status = outcome.status
    synced = status.condition("Synced")
    if outcome.release:
        label = "released"
    elif outcome.terminal:
        label = "terminal"
    elif synced is not None and synced.status == "False" and synced.reason != "Paused":
        label = "retrying"
    else:
        label = "waiting" if outcome.cadence == cadence.Cadence.FAST else "synced"
    registry.reconciles.labels(label, ",".join(outcome.calls) or "none").inc()
    for event in outcome.events:
        registry.events.labels(event.type, event.reason).inc()
    if outcome.unchanged:
        return  # what the last full pass recorded still holds
    if outcome.release:
        registry.track(uid, None)
        return
    started = status.deletion.requested_time if status.deletion else None
    stalled, ready = status.condition("Stalled"), status.condition("Ready")
    registry.track(
        uid,
        metrics.RunnerView(
            install_status=str(status.install_status or "UNKNOWN"),
            connection_status=str(status.connection_status or "UNKNOWN"),
            deletion_started=datetime.datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
            if started
            else None,
            stalled_reason=str(stalled.reason) if stalled and stalled.status == "True" else None,
            not_ready_reason=str(ready.reason) if ready and ready.status == "False" else None,
        ),
    )


def _apply(body: kopf.Body, patch: kopf.Patch, outcome: Outcome) -> None:
    """Patch the status only when something in it differs; then patch all of it.

    An unchanged status is no API call, no new resourceVersion, no watch event for every watcher.
    All-or-nothing rather than only the changed keys: a pass may run on a body older than our
    last write, and a full write heals whatever that stale comparison missed.
    """
    current = body.get("status") or {}
    written = outcome.status.to_patch()
    if any(value != current.get(key) for key, value in written.items()):
        for key, value in written.items():
            patch.status[key] = value
        if "kopf" in current:
            # kopf's bookkeeping from earlier releases (their spec handler): nothing reads it now,
            # and it goes with a write that happens anyway, never with one of its own.
            patch.status["kopf"] = None
    for event in outcome.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        log.info(
            "%s/%s %s: %s",
            body.get("metadata", {}).get("namespace"),
            body.get("metadata", {}).get("name"),
            event.reason,
            event.message,
        )


def _claimed_by(runner_id: str, namespace: str, uid: str, index: Mapping[str, Any]) -> str | None:
    """Who else holds this runner ID, from the claims index (the full pass and the quiet check alike)."""
    return claiming.claimed_by(runner_id, namespace, uid, index.get(runner_id, ()))


def _message(outcome: Outcome | None) -> str:
    if outcome is None:
        return ""
    synced = outcome.status.condition("Synced")
    if synced is not None and synced.status == "False":
        return f"{synced.reason}: {synced.message}"
    ready = outcome.status.condition("Ready")
    if ready is not None:
        return f"{ready.reason}: {ready.message}"
    return ""
