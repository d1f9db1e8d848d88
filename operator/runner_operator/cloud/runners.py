"""The cloud as one pass sees it: observe, create, update, delete, and who holds a cluster.

The reconciler talks to this boundary only. It owns the shared snapshot's bookkeeping: every
write is noted before it is sent (a list that started meanwhile may not show it) and after it is
answered (its response is then the freshest view), so no caller can forget to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from runner_operator.cloud import diff
from runner_operator.cloud.cache import RunnerCache
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import CloudRunner


@dataclass(frozen=True)
class Runners:
    client: CloudClient
    cache: RunnerCache | None = None
    """the credential's shared list snapshot; None reads each runner with its own GET."""
    max_age: float = 0.0
    """how old a batched (list) observation may be for this pass; 0 reads directly."""

    async def observe(
        self, runner_id: str, *, prove_absence: bool = True, absence_age: float = 0.0
    ) -> CloudRunner | None:
        """The runner, or None when the API itself said NOT_FOUND for it.

        A list may be older than a runner someone else just made, so absence is confirmed with a
        direct GET (the cache's rule) unless the caller says a list's absence can lead it to nothing
        the API does not arbitrate (`planning.absence_needs_proof`); presence may come from the
        snapshot. `absence_age`: how old that list may be for an absence (`planning.absence_age`).
        """
        if self.cache is None:
            return await self.client.find(runner_id)
        return await self.cache.find(
            runner_id, self.max_age, trust_absence=not prove_absence, absence_age=absence_age
        )

    async def entry(self, runner_id: str, *, refresh: bool = True) -> bytes | None:
        """The runner's entry in the shared snapshot, unparsed (None without one, or when it cannot answer).

        A fingerprint of a pass's inputs: the same bytes object until a list refresh replaces it.
        """
        if self.cache is None:
            return None
        return await self.cache.entry(runner_id, self.max_age, refresh=refresh)

    async def create(
        self, body: CloudRunner, request_id: str, *, on_send: Callable[[], None] | None = None
    ) -> CloudRunner:
        with self._writing(body.runner_id):
            created = await self.client.create(body, request_id, on_send=on_send)
        self._wrote(body.runner_id, created)
        return created

    async def update(self, runner_id: str, change: diff.Update) -> CloudRunner:
        with self._writing(runner_id):
            updated = await self.client.update(runner_id, change.body, change.mask, etag=change.etag)
        self._wrote(runner_id, updated)
        return updated

    async def apply_update(self, runner_id: str) -> CloudRunner:
        """Roll the runner to its channel's available update (FailedPrecondition when there is none)."""
        with self._writing(runner_id):
            updated = await self.client.apply_available_update(runner_id)
        self._wrote(runner_id, updated)
        return updated

    async def delete(self, runner_id: str) -> None:
        """Start the decommission (the API's NOT_FOUND for it counts as done)."""
        with self._writing(runner_id):
            await self.client.delete(runner_id, allow_missing=True)
        self._wrote(runner_id)

    async def cluster_holder(self, cluster_id: str) -> str | None:
        """The runner holding `cluster_id`, from a list taken now (it may decide a delete)."""
        if self.cache is not None:
            identities = await self.cache.identities(0)
        else:
            identities = [identity async for identity, _ in self.client.iter_entries()]
        for identity in identities:
            if (identity.cluster_id or "").lower() == cluster_id.lower():
                return identity.runner_id
        return None

    @contextlib.contextmanager
    def _writing(self, runner_id: str | None) -> Iterator[None]:
        """Noted before the write waits for the budget, and again if it fails: a list page may be sent
        while the write waits (lists go first), so only a list that starts after the answer, or after
        the failure that may have hidden one, stands for the write."""
        self._wrote(runner_id)
        try:
            yield
        except BaseException:
            self._wrote(runner_id)
            raise

    def _wrote(self, runner_id: str | None, result: CloudRunner | None = None) -> None:
        if self.cache is not None and runner_id:
            self.cache.note_write(runner_id, result)
