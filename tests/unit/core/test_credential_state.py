"""Per-token state (client, cache, turns, budget) lives while passes use the token and is then forgotten."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import SecretStr

from runner_operator.cloud import budget
from runner_operator.credentials import IDLE_RESYNCS, TokenRegistry
from runner_operator.settings import Settings
from tests.clock import FakeClock

RESYNC = 10.0
OLD = SecretStr("CW-SECRET-old")
NEW = SecretStr("CW-SECRET-new")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def credentials(clock: FakeClock) -> TokenRegistry:
    settings = Settings(resync_interval=RESYNC, passes_per_credential=1)
    return TokenRegistry(settings, lambda _ns, _name: None, clock=clock)


async def use(credentials: TokenRegistry, token: SecretStr) -> None:
    """What a pass does: take a turn, then reach for the client and the cache."""
    async with credentials.turn(token):
        credentials.cache(token)
        credentials.client(token)


async def test_a_token_unused_for_a_few_resyncs_is_forgotten_and_its_client_closed(
    credentials: TokenRegistry, clock: FakeClock
) -> None:
    await use(credentials, OLD)
    old_client, old_cache = credentials.client(OLD), credentials.cache(OLD)
    clock.now += IDLE_RESYNCS * RESYNC + 1
    await use(credentials, NEW)  # the token rotated: only the new one is used
    assert old_client._http.is_closed
    assert credentials.client(OLD) is not old_client
    assert credentials.cache(OLD) is not old_cache
    assert budget.shared(credentials.settings.api_endpoint, OLD.get_secret_value()) is not old_client.budget


async def test_a_token_used_within_the_idle_time_is_kept(
    credentials: TokenRegistry, clock: FakeClock
) -> None:
    await use(credentials, OLD)
    kept = credentials.client(OLD)
    clock.now += IDLE_RESYNCS * RESYNC - 1
    await use(credentials, NEW)
    assert credentials.client(OLD) is kept
    assert not kept._http.is_closed


async def test_a_pass_in_flight_keeps_its_token_however_long_it_takes(
    credentials: TokenRegistry, clock: FakeClock
) -> None:
    async with credentials.turn(OLD):
        held = credentials.client(OLD)
        clock.now += 100 * RESYNC
        await use(credentials, NEW)
        assert credentials.client(OLD) is held
        assert not held._http.is_closed
    clock.now += IDLE_RESYNCS * RESYNC - 1
    await use(credentials, NEW)
    assert not held._http.is_closed, "idle time counts from the end of the last pass"
    clock.now += 2
    await use(credentials, NEW)
    assert held._http.is_closed


async def test_budget_counters_of_a_forgotten_token_stay_counted(
    credentials: TokenRegistry, clock: FakeClock
) -> None:
    await use(credentials, OLD)
    credentials.client(OLD).budget.record_rate_limited(None)
    before = [sum(column) for column in zip(*credentials.budget_stats(), strict=True)]
    clock.now += IDLE_RESYNCS * RESYNC + 1
    await use(credentials, NEW)
    after = [sum(column) for column in zip(*credentials.budget_stats(), strict=True)]
    assert after == before
    assert after[2] == 1


async def test_creating_passes_wait_for_a_turn_and_others_do_not(credentials: TokenRegistry) -> None:
    order: list[str] = []

    async def creating(name: str, gate: asyncio.Event) -> None:
        async with credentials.turn(OLD, creating=True):
            order.append(name)
            await gate.wait()

    gate = asyncio.Event()
    first = asyncio.create_task(creating("first", gate))
    second = asyncio.create_task(creating("second", asyncio.Event()))
    await asyncio.sleep(0)
    async with credentials.turn(OLD):
        order.append("reading")
    assert order == ["first", "reading"]
    gate.set()
    await first
    await asyncio.sleep(0)
    assert order == ["first", "reading", "second"]
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_closing_forgets_every_token(credentials: TokenRegistry) -> None:
    await use(credentials, OLD)
    client = credentials.client(OLD)
    await credentials.aclose()
    assert client._http.is_closed
    assert credentials.client(OLD) is not client
    await credentials.aclose()
