"""Credentials and Secret-backed values for one ManagedRunner, read with `get` on named Secrets only.

A resource may reference Secrets in its own namespace only (the CRD has no namespace field for
them). Values never leave this module except as the token handed to the API client and the env
values handed to the desired-runner translation; errors name the Secret and key, never a value.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from pydantic import SecretStr

from runner_operator import resource
from runner_operator.cloud import budget as budgets
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient, Observer
from runner_operator.cloud.retrying import RetryPolicy
from runner_operator.reconciling import CredentialsProblem
from runner_operator.settings import Settings

SecretGetter = Callable[[str, str], Mapping[str, str] | None]
"""(namespace, name) -> decoded Secret data, or None when the Secret does not exist."""
SecretGuard = Callable[[str, str, bool], bool]
"""(namespace, name, in use) -> add or remove IN_USE_FINALIZER on that Secret (idempotent); False when
the Secret is gone or, when adding, already being deleted (so nothing was protected)."""
Reader = Callable[[str, str], Awaitable[Mapping[str, str] | None]]

IN_USE_FINALIZER = "sandbox.coreweave.com/credentials-in-use"
"""Kept on a credentials Secret while a ManagedRunner may need it to decommission its runner.

Deleting a namespace (or an Argo CD application) deletes the Secret and the ManagedRunner together;
without this, the token would be gone before the finalizer could reach the API, and the only way
out would be removing the finalizer by hand, leaking the runner. Crossplane protects in-use
ProviderConfigs the same way.
"""

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
    core = client.CoreV1Api()

    def get(namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            secret = core.read_namespaced_secret(name, namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise CredentialsProblem(
                    "SecretAccessDenied",
                    f"the operator may not read Secret {namespace}/{name} (403): check its RBAC",
                ) from None
            raise CredentialsProblem(
                "SecretReadFailed", f"reading Secret {namespace}/{name} failed: HTTP {exc.status}"
            ) from None
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    return get


def kubernetes_secret_guard() -> SecretGuard:
    """Adds or removes IN_USE_FINALIZER with a strategic merge patch (no read-modify-write race)."""
    from kubernetes import client

    core = client.CoreV1Api()

    def guard(namespace: str, name: str, in_use: bool) -> bool:
        metadata: dict[str, object] = (
            {"finalizers": [IN_USE_FINALIZER]}
            if in_use
            else {"$deleteFromPrimitiveList/finalizers": [IN_USE_FINALIZER]}
        )
        try:
            core.patch_namespaced_secret(
                name,
                namespace,
                {"metadata": metadata},
                _content_type="application/strategic-merge-patch+json",
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
                    "SecretAccessDenied",
                    f"the operator may not patch Secret {namespace}/{name} (403) to protect it while in use: "
                    "grant patch on secrets",
                ) from None
            raise CredentialsProblem(
                "SecretReadFailed", f"protecting Secret {namespace}/{name} failed: HTTP {exc.status}"
            ) from None
        return True

    return guard


@dataclass
class Resolved:
    token: SecretStr
    env: dict[tuple[str, str], str]
    secret: str | None = None
    """the resource's own credentials Secret (same namespace), when it names one."""


@dataclass
class Credentials:
    """Resolves tokens and env Secrets, and keeps one API client per (endpoint, token)."""

    settings: Settings
    getter: SecretGetter
    observer: Observer | None = None
    guard: SecretGuard | None = None
    _clients: dict[str, CloudClient] = field(default_factory=dict)
    _caches: dict[str, RunnerCache] = field(default_factory=dict)
    _slots: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    _protected: set[tuple[str, str]] = field(default_factory=set)

    async def protect(self, namespace: str, name: str) -> None:
        """Keep IN_USE_FINALIZER on this credentials Secret (one patch per Secret per process)."""
        if self.guard is None or (namespace, name) in self._protected:
            return
        if await asyncio.to_thread(self.guard, namespace, name, True):
            self._protected.add((namespace, name))

    async def unprotect(self, namespace: str, name: str) -> None:
        """Drop IN_USE_FINALIZER: no ManagedRunner needs this Secret any more."""
        if self.guard is None:
            return
        await asyncio.to_thread(self.guard, namespace, name, False)
        self._protected.discard((namespace, name))

    async def resolve(self, res: resource.ManagedRunnerResource, *, env: bool = True) -> Resolved:
        """The token for this resource and, with `env`, the values of every Secret its env references.

        Deleting needs the token only: env Secrets may already be gone with the namespace.
        """
        cache: dict[str, Mapping[str, str] | None] = {}

        async def read(namespace: str, name: str) -> Mapping[str, str] | None:
            key = f"{namespace}/{name}"
            if key not in cache:
                cache[key] = await asyncio.to_thread(self.getter, namespace, name)
            return cache[key]

        token = await self._token(res, read)
        values: dict[tuple[str, str], str] = {}
        for ref in res.env_secret_refs() if env else ():
            data = await read(res.namespace, ref.name)
            if data is None:
                raise CredentialsProblem(
                    "SecretNotFound", f"Secret {res.namespace}/{ref.name} (env) not found"
                )
            if ref.key not in data:
                raise CredentialsProblem(
                    "SecretKeyMissing", f"Secret {res.namespace}/{ref.name} has no key {ref.key!r}"
                )
            values[(ref.name, ref.key)] = data[ref.key]
        own = res.spec.credentials.secret_ref.name if res.spec.credentials else None
        return Resolved(token=token, env=values, secret=own)

    def client(self, token: SecretStr) -> CloudClient:
        """The shared client for this token (its request budget is shared by every runner using it)."""
        key = _key(token)
        found = self._clients.get(key)
        if found is None:
            endpoint = self.settings.api_endpoint
            found = CloudClient(
                endpoint,
                token,
                timeout=self.settings.request_timeout,
                retry=RetryPolicy(budget=self.settings.retry_budget),
                budget=budgets.shared(
                    endpoint,
                    token.get_secret_value(),
                    rate=self.settings.requests_per_second,
                    burst=self.settings.request_burst,
                ),
                observer=self.observer,
            )
            self._clients[key] = found
        return found

    def cache(self, token: SecretStr) -> RunnerCache:
        """The batched-read cache shared by every runner using this token."""
        key = _key(token)
        found = self._caches.get(key)
        if found is None:
            found = self._caches[key] = RunnerCache(self.client(token))
        return found

    def slots(self, token: SecretStr) -> asyncio.Semaphore:
        """Turns for creating passes using this token: a FIFO wait here instead of a long request queue."""
        key = _key(token)
        found = self._slots.get(key)
        if found is None:
            found = self._slots[key] = asyncio.Semaphore(self.settings.passes_per_credential)
        return found

    def budget_stats(self) -> list[tuple[int, float, int]]:
        """(waits, wait seconds, 429s) of the request budget behind each client, for metrics."""
        stats = [cloud.budget.stats for cloud in self._clients.values()]
        return [(s.waits, s.wait_seconds, s.rate_limited) for s in stats]

    async def aclose(self) -> None:
        for cloud in self._clients.values():
            await cloud.aclose()
        self._clients.clear()

    async def _token(self, res: resource.ManagedRunnerResource, read: Reader) -> SecretStr:
        ref = res.spec.credentials.secret_ref if res.spec.credentials else None
        if ref is not None:
            return await self._from_secret(read, res.namespace, ref.name, ref.key, "spec.credentials")
        if self.settings.default_secret:
            namespace, _, rest = self.settings.default_secret.partition("/")
            name, _, key = rest.partition(":")
            return await self._from_secret(read, namespace, name, key or "token", "the operator's default")
        if self.settings.default_token is not None:
            return self.settings.default_token
        raise CredentialsProblem(
            "CredentialsMissing",
            "no API token: set spec.credentials.secretRef or configure the operator's default credentials",
        )

    @staticmethod
    async def _from_secret(read: Reader, namespace: str, name: str, key: str, origin: str) -> SecretStr:
        data = await read(namespace, name)
        if data is None:
            raise CredentialsProblem(
                "CredentialsSecretNotFound", f"credentials Secret {namespace}/{name} ({origin}) not found"
            )
        if not data.get(key):
            raise CredentialsProblem(
                "CredentialsKeyMissing",
                f"credentials Secret {namespace}/{name} has no (non-empty) key {key!r}",
            )
        return SecretStr(str(data[key]).strip())


def _key(token: SecretStr) -> str:
    """A token's identity for the per-credential client and cache maps (never the token itself)."""
    return hashlib.sha256(token.get_secret_value().encode()).hexdigest()
