"""Credentials and Secret-backed values for one ManagedRunner, read with `get` on named Secrets only.

A resource may reference Secrets in its own namespace only (the CRD has no namespace field for
them). Values never leave this module except as the token handed to the API client and the env
values handed to the desired-runner translation; errors name the Secret and key, never a value.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from pydantic import SecretStr

from runner_operator import resource
from runner_operator.cloud import budget as budgets
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient, Observer
from runner_operator.cloud.retrying import RetryPolicy
from runner_operator.kubeapi import KubeApi
from runner_operator.outcomes import CredentialsProblem
from runner_operator.reasons import Reason
from runner_operator.settings import Settings
from runner_operator.tenancy import DefaultCredentialScope

SecretGetter = Callable[[str, str], Mapping[str, str] | None]
"""(namespace, name) -> decoded Secret data, or None when the Secret does not exist."""
SecretGuard = Callable[[str, str, bool], bool]
"""(namespace, name, in use) -> add or remove IN_USE_FINALIZER on that Secret (idempotent); False when
the Secret is gone or, when adding, already being deleted (so nothing was protected)."""
Reader = Callable[[str, str], Awaitable[Mapping[str, str] | None]]
NamespaceLabels = Callable[[str], Mapping[str, str] | None]
"""namespace -> its labels, or None when the Namespace does not exist."""

SECRET_PATH = "/api/v1/namespaces/{namespace}/secrets/{name}"

IN_USE_FINALIZER = "sandbox.coreweave.com/credentials-in-use"
"""Kept on a credentials Secret while a ManagedRunner may need it to decommission its runner.

Deleting a namespace (or an Argo CD application) deletes the Secret and the ManagedRunner together;
without this, the token would be gone before the finalizer could reach the API, and the only way
out would be removing the finalizer by hand, leaking the runner. Crossplane protects in-use
ProviderConfigs the same way.
"""

IDLE_RESYNCS = 3
"""A token no pass has used for this many resync intervals is forgotten (client closed, cache and budget
dropped): every resource passes at least once per interval, so none uses it any more (it rotated away).
Should one come back, its state is built again: a fresh list and a fresh budget."""

log = logging.getLogger(__name__)


def fingerprint(token: SecretStr, salt: str) -> str:
    """Which credential saw a runner, recordable in status: a salted HMAC, never the token itself."""
    digest = hmac.new(salt.encode(), token.get_secret_value().encode(), hashlib.sha256)
    return digest.hexdigest()[:32]


def kubernetes_secret_getter() -> SecretGetter:
    """A getter on the official client (in-cluster config first, then the kubeconfig)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    core = KubeApi()

    def get(namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            secret = core.get(SECRET_PATH, {"namespace": namespace, "name": name})
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise CredentialsProblem(
                    Reason.SECRET_ACCESS_DENIED,
                    f"the operator may not read Secret {namespace}/{name} (403): check its RBAC",
                ) from None
            raise CredentialsProblem(
                Reason.SECRET_READ_FAILED, f"reading Secret {namespace}/{name} failed: HTTP {exc.status}"
            ) from None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    return get


def kubernetes_namespace_labels() -> NamespaceLabels:
    """Namespace labels for the default-credential selector (`get` on namespaces, cluster-scoped)."""
    from kubernetes import client

    core = KubeApi()

    def labels(namespace: str) -> Mapping[str, str] | None:
        try:
            found = core.get("/api/v1/namespaces/{name}", {"name": namespace})
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise CredentialsProblem(
                Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED,
                f"reading Namespace {namespace} for the default-credentials selector failed: "
                f"HTTP {exc.status}" + (" (grant get on namespaces)" if exc.status == 403 else ""),
            ) from None
        return dict((found.get("metadata") or {}).get("labels") or {})

    return labels


def kubernetes_secret_guard() -> SecretGuard:
    """Adds or removes IN_USE_FINALIZER with a strategic merge patch (no read-modify-write race)."""
    from kubernetes import client

    core = KubeApi()

    def guard(namespace: str, name: str, in_use: bool) -> bool:
        metadata: dict[str, object] = (
            {"finalizers": [IN_USE_FINALIZER]}
            if in_use
            else {"$deleteFromPrimitiveList/finalizers": [IN_USE_FINALIZER]}
        )
        try:
            core.patch(
                SECRET_PATH,
                {"namespace": namespace, "name": name},
                {"metadata": metadata},
                "application/strategic-merge-patch+json",
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return False  # gone already: nothing to protect or release
            if exc.status == 422 and in_use:
                # A Secret already being deleted takes no new finalizer; it stays readable meanwhile.
                log.warning("Secret %s/%s is being deleted: it cannot be protected", namespace, name)
                return False
            if exc.status == 403:
                raise CredentialsProblem(
                    Reason.SECRET_ACCESS_DENIED,
                    f"the operator may not patch Secret {namespace}/{name} (403) to protect it while in use: "
                    "grant patch on secrets",
                ) from None
            raise CredentialsProblem(
                Reason.SECRET_READ_FAILED, f"protecting Secret {namespace}/{name} failed: HTTP {exc.status}"
            ) from None
        return True

    return guard


@dataclass
class Resolved:
    token: SecretStr
    env: dict[tuple[str, str], str]
    secret: str | None = None
    """the resource's own credentials Secret (same namespace), when it names one."""
    shared: bool = False
    """some value came from an earlier pass's read of its Secret (it may predate a rotation)."""


@dataclass
class TokenRegistry:
    """Resolves tokens and env Secrets, and keeps one API client per (endpoint, token) while it is in use."""

    settings: Settings
    getter: SecretGetter
    observer: Observer | None = None
    guard: SecretGuard | None = None
    clock: Callable[[], float] = time.monotonic
    scope: DefaultCredentialScope = field(default_factory=DefaultCredentialScope)
    """the namespaces that may use the settings' default credential (none unless configured)."""
    namespace_labels: NamespaceLabels | None = None
    on_change: Callable[[frozenset[str]], None] | None = None
    """Given to every token's cache: runners whose list entry changed (see `RunnerCache.on_change`)."""
    _clients: dict[str, CloudClient] = field(default_factory=dict)
    _caches: dict[str, RunnerCache] = field(default_factory=dict)
    _slots: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    _used: dict[str, float] = field(default_factory=dict)
    """token key -> when a pass last used its state; every key of the three maps above is here."""
    _passes: dict[str, int] = field(default_factory=dict)
    """token key -> passes in flight (inside `turn`): their state is never forgotten."""
    _retired: tuple[int, float, int] = (0, 0.0, 0)
    """budget counters of forgotten clients, so the exported totals never go down."""
    _stats_lock: threading.Lock = field(default_factory=threading.Lock)
    """held while a client moves into `_retired`, and by the metrics thread reading both."""
    _protected: set[tuple[str, str]] = field(default_factory=set)
    _reads: dict[tuple[str, str], tuple[float, asyncio.Future[Mapping[str, str] | None]]] = field(
        default_factory=dict
    )
    """(namespace, Secret name or "" for the Namespace's labels) -> when it was read, and the read
    (shared while in flight and for a while after)."""

    async def protect(self, namespace: str, name: str) -> bool:
        """Keep IN_USE_FINALIZER on this credentials Secret (one patch per Secret per process).

        False: the Secret is gone or already being deleted (a token from a shared read may outlive
        it by a few seconds), so nothing keeps it until a runner made with it is deleted."""
        if self.guard is None or (namespace, name) in self._protected:
            return True
        if await asyncio.to_thread(self.guard, namespace, name, True):
            self._protected.add((namespace, name))
            return True
        return False

    async def unprotect(self, namespace: str, name: str) -> None:
        """Drop IN_USE_FINALIZER: no ManagedRunner needs this Secret any more."""
        if self.guard is None:
            return
        await asyncio.to_thread(self.guard, namespace, name, False)
        self._protected.discard((namespace, name))

    async def resolve(
        self,
        res: resource.ManagedRunnerResource | resource.SecretRefs,
        *,
        env: bool = True,
        fresh: bool = False,
    ) -> Resolved:
        """The token for this resource and, with `env`, the values of every Secret its env references.

        Deleting needs the token only: env Secrets may already be gone with the namespace. `fresh`
        reads every Secret now (and shares that read from then on) instead of taking a recent read.
        """
        shared = False

        async def read(namespace: str, name: str) -> Mapping[str, str] | None:
            nonlocal shared
            data, earlier = await self._read_secret(namespace, name, fresh=fresh)
            shared = shared or earlier
            return data

        refs = res if isinstance(res, resource.SecretRefs) else res.secret_refs()
        token = await self._token(refs, read)
        values: dict[tuple[str, str], str] = {}
        for ref in refs.env if env else ():
            data = await read(refs.namespace, ref.name)
            if data is None:
                raise CredentialsProblem(
                    Reason.SECRET_NOT_FOUND, f"Secret {refs.namespace}/{ref.name} (env) not found"
                )
            if ref.key not in data:
                raise CredentialsProblem(
                    Reason.SECRET_KEY_MISSING, f"Secret {refs.namespace}/{ref.name} has no key {ref.key!r}"
                )
            values[(ref.name, ref.key)] = data[ref.key]
        own = refs.credentials.name if refs.credentials else None
        return Resolved(token=token, env=values, secret=own, shared=shared)

    async def _read_secret(
        self, namespace: str, name: str, *, fresh: bool = False
    ) -> tuple[Mapping[str, str] | None, bool]:
        """The Secret's data (its Namespace's labels for name ""), one read shared by every pass within
        `secret_cache_seconds`.

        Each pass used to read its Secrets: at 1,000 runners resyncing every minute, that was a fifth
        of the operator's steady CPU and 33 GETs/s on the API server for a handful of Secrets.
        Only found Secrets are kept: a missing one (or a failed read) is read again by the next pass,
        so creating it is noticed at once. Also returns whether the data came from an earlier read.
        """
        key, now = (namespace, name), self.clock()
        found = self._reads.get(key)
        ttl = self.settings.secret_cache_seconds
        earlier = found is not None and not fresh and now - found[0] < ttl
        if found is None or not earlier:
            if len(self._reads) > 1024:  # bounded: drop entries no pass is sharing any more
                self._reads = {k: v for k, v in self._reads.items() if now - v[0] < ttl}
            call = functools.partial(self.getter, namespace, name) if name else self._labels(namespace)
            reading = asyncio.ensure_future(asyncio.to_thread(call))
            found = self._reads[key] = (now, reading)
            reading.add_done_callback(lambda done: self._forget_unless_found(key, done))
        return await asyncio.shield(found[1]), earlier

    def _labels(self, namespace: str) -> Callable[[], Mapping[str, str] | None]:
        read = self.namespace_labels
        if read is None:
            raise CredentialsProblem(
                Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED, "no way to read Namespace labels is configured"
            )
        return functools.partial(read, namespace)

    def _forget_unless_found(
        self, key: tuple[str, str], done: asyncio.Future[Mapping[str, str] | None]
    ) -> None:
        kept = not done.cancelled() and done.exception() is None and done.result() is not None
        if not kept and self._reads.get(key, (0.0, None))[1] is done:
            del self._reads[key]

    @contextlib.asynccontextmanager
    async def turn(self, token: SecretStr, *, creating: bool = False) -> AsyncIterator[None]:
        """One pass using this token: its client and cache stay open until the pass ends.

        A creating pass also waits for one of the token's `slots`. Entering forgets idle tokens.
        """
        key = _key(token)
        self._passes[key] = self._passes.get(key, 0) + 1
        try:
            await self.forget_idle()
            async with self.slots(token) if creating else contextlib.nullcontext():
                yield
        finally:
            self._passes[key] -= 1
            if not self._passes[key]:
                del self._passes[key]
            self._used[key] = self.clock()

    async def forget_idle(self) -> None:
        """Close and drop the client, cache, slots and budget of tokens unused for IDLE_RESYNCS intervals."""
        cutoff = self.clock() - IDLE_RESYNCS * self.settings.resync_interval
        idle = [key for key, used in self._used.items() if used < cutoff and key not in self._passes]
        closing: list[tuple[RunnerCache | None, CloudClient | None]] = []
        for key in idle:  # all dropped before the first await: a concurrent sweep never sees them
            del self._used[key]
            self._slots.pop(key, None)
            with self._stats_lock:
                cloud = self._clients.pop(key, None)
                if cloud is not None:
                    s, (waits, seconds, limited) = cloud.budget.stats, self._retired
                    self._retired = (waits + s.waits, seconds + s.wait_seconds, limited + s.rate_limited)
            if cloud is not None:
                budgets.forget(cloud.budget)
            closing.append((self._caches.pop(key, None), cloud))
        for cache, cloud in closing:
            if cache is not None:
                await cache.close()
            if cloud is not None:
                await cloud.aclose()
        if idle:
            log.info("Forgot the API client and cache of %d credential(s) unused for a while", len(idle))

    def client(self, token: SecretStr) -> CloudClient:
        """The shared client for this token (its request budget is shared by every runner using it)."""
        key = _key(token)
        self._used[key] = self.clock()
        found = self._clients.get(key)
        if found is None:
            endpoint = self.settings.api_endpoint
            # Each of N shards spends 1/N of the token's budget (sharding rule 5).
            rate, burst = self.settings.sharded().share(
                self.settings.requests_per_second, self.settings.request_burst
            )
            found = CloudClient(
                endpoint,
                token,
                timeout=self.settings.request_timeout,
                retry=RetryPolicy(budget=self.settings.retry_budget),
                budget=budgets.shared(
                    endpoint,
                    token.get_secret_value(),
                    rate=rate,
                    burst=burst,
                ),
                observer=self.observer,
            )
            self._clients[key] = found
        return found

    def cache(self, token: SecretStr) -> RunnerCache:
        """The batched-read cache shared by every runner using this token."""
        key = _key(token)
        self._used[key] = self.clock()
        found = self._caches.get(key)
        if found is None:
            found = self._caches[key] = RunnerCache(self.client(token), on_change=self.on_change)
        return found

    def slots(self, token: SecretStr) -> asyncio.Semaphore:
        """Turns for creating passes using this token: a FIFO wait here instead of a long request queue."""
        key = _key(token)
        self._used[key] = self.clock()
        found = self._slots.get(key)
        if found is None:
            found = self._slots[key] = asyncio.Semaphore(self.settings.passes_per_credential)
        return found

    def budget_stats(self) -> list[tuple[int, float, int]]:
        """(waits, wait seconds, 429s) of the request budget behind each client, for metrics."""
        with self._stats_lock:  # called from the metrics thread
            stats = [cloud.budget.stats for cloud in list(self._clients.values())]
            return [(s.waits, s.wait_seconds, s.rate_limited) for s in stats] + [self._retired]

    async def aclose(self) -> None:
        for cache in self._caches.values():
            await cache.close()
        for cloud in self._clients.values():
            await cloud.aclose()
        self._caches.clear()
        self._clients.clear()
        self._slots.clear()
        self._used.clear()

    async def _token(self, refs: resource.SecretRefs, read: Reader) -> SecretStr:
        ref = refs.credentials
        if ref is not None:
            return await self._from_secret(read, refs.namespace, ref.name, ref.key, "spec.credentials")
        if self.settings.default_secret or self.settings.default_token is not None:
            await self._may_use_default(refs.namespace, read)
        if self.settings.default_secret:
            namespace, _, rest = self.settings.default_secret.partition("/")
            name, _, key = rest.partition(":")
            return await self._from_secret(read, namespace, name, key or "token", "the operator's default")
        if self.settings.default_token is not None:
            return self.settings.default_token
        raise CredentialsProblem(
            Reason.CREDENTIALS_MISSING,
            "no API token: set spec.credentials.secretRef or configure the operator's default credentials",
        )

    async def _may_use_default(self, namespace: str, read: Reader) -> None:
        """Refuse the default credential to a namespace the configuration does not allow (tenancy)."""
        labels = await read(namespace, "") if self.scope.needs_labels(namespace) else None
        if not self.scope.allows(namespace, labels):
            raise CredentialsProblem(
                Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED,
                f"namespace {namespace} may not use the operator's default credentials: name a Secret of "
                "this namespace in spec.credentials.secretRef, or ask the operator's administrators to "
                "allow the namespace (defaultCredentials.namespaces or .namespaceSelector in the chart)",
            )

    @staticmethod
    async def _from_secret(read: Reader, namespace: str, name: str, key: str, origin: str) -> SecretStr:
        data = await read(namespace, name)
        if data is None:
            raise CredentialsProblem(
                Reason.CREDENTIALS_SECRET_NOT_FOUND,
                f"credentials Secret {namespace}/{name} ({origin}) not found",
            )
        if not data.get(key):
            raise CredentialsProblem(
                Reason.CREDENTIALS_KEY_MISSING,
                f"credentials Secret {namespace}/{name} has no (non-empty) key {key!r}",
            )
        return SecretStr(str(data[key]).strip())


def _key(token: SecretStr) -> str:
    """A token's identity for the per-credential client and cache maps (never the token itself)."""
    return hashlib.sha256(token.get_secret_value().encode()).hexdigest()
