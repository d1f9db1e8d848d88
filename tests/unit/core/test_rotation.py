"""A token rotated (and the old one revoked at once) while passes share a recent read of its Secret.

`handlers._with_credentials` against the in-process simulator: the pass that got the old token from
the shared read is refused, reads the Secret again, and runs once more with the new token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from runner_operator import handlers, reconciling, resource
from runner_operator.credentials import TokenRegistry
from runner_operator.quiet import QuietPasses
from runner_operator.settings import Settings
from runner_operator.simulator.config import SimulatorConfig, Timings
from runner_operator.simulator.server import RunningServer, serve
from tests.unit.builders import metadata

OLD, NEW, WRONG = "CW-SECRET-old-token", "CW-SECRET-new-token", "CW-SECRET-wrong-token"
CLUSTER = "00000000-0000-4000-8000-000000000001"


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    config = SimulatorConfig(timings=Timings.instant(), admin_tokens=(OLD,), log_requests=False)
    async with await serve(config) as srv:
        yield srv


class Secrets:
    def __init__(self) -> None:
        self.token = OLD
        self.reads = 0

    def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self.reads += 1
        return {"token": self.token} if (namespace, name) == ("ns", "coreweave-api") else None


async def step(
    res_body: dict[str, Any], registry: TokenRegistry, *, fresh: bool = False, max_age: float = 2.0
) -> reconciling.Outcome:
    res = resource.ManagedRunnerResource.from_body(res_body)
    ctx = reconciling.Context(now=datetime.now(UTC), deletion_timeout=600)
    outcome = await handlers._with_credentials(
        res, ctx, registry, creating=True, max_age=max_age, quiet=QuietPasses(), fresh=fresh
    )
    res_body["status"] = {**res_body["status"], **outcome.status.to_patch()}
    return outcome


def body() -> dict[str, Any]:
    return {
        "metadata": metadata(),
        "spec": {
            "runnerId": "rotated",
            "clusterId": CLUSTER,
            "zone": "us-east-04a",
            "policy": {},
            "credentials": {"secretRef": {"name": "coreweave-api", "key": "token"}},
        },
        "status": {},
    }


def statuses(server: RunningServer) -> list[int]:
    return [e.status for e in server.simulator.log.entries]


async def test_a_rotation_with_the_old_token_revoked_is_not_reported_as_rejected(
    server: RunningServer,
) -> None:
    secrets = Secrets()
    registry = TokenRegistry(Settings(api_endpoint=server.url, secret_cache_seconds=600), secrets)
    obj = body()
    try:
        for _ in range(3):
            await step(obj, registry)
        assert obj["status"]["runnerId"] == "rotated"
        refused_before = statuses(server).count(401)
        secrets.token = NEW
        server.simulator.config = dataclasses.replace(server.simulator.config, admin_tokens=(NEW,))
        after = await step(obj, registry, max_age=0)  # a direct read, with the old token still shared
    finally:
        await registry.aclose()
    synced = after.status.condition("Synced")
    assert not after.credentials_rejected, synced
    assert synced is not None
    assert synced.status == "True"
    assert statuses(server).count(401) == refused_before + 1, "one refusal, then the Secret read again"
    assert secrets.reads == 2


async def test_a_wrong_token_is_reported_after_one_fresh_read(server: RunningServer) -> None:
    secrets = Secrets()
    secrets.token = WRONG
    registry = TokenRegistry(Settings(api_endpoint=server.url, secret_cache_seconds=600), secrets)
    obj = body()
    try:
        first = await step(obj, registry, fresh=True)
        assert first.credentials_rejected, "read now: nothing to read again"
        assert secrets.reads == 1
        again = await step(obj, registry)
    finally:
        await registry.aclose()
    assert again.credentials_rejected
    assert secrets.reads == 2, "the shared read was checked once, and holds the same token"
