"""The shared request budget: rate, burst, a 429 pausing everyone, one bucket per credential."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest

from runner_operator.cloud import budget
from runner_operator.cloud.budget import BudgetExhausted, RequestBudget
from runner_operator.cloud.client import CloudClient
from tests.unit.cloud.fakes import BASE_URL, TOKEN, FakeApi, FakeClock, runner_json


async def _grant_times(bucket: RequestBudget, clock: FakeClock, callers: int) -> list[float]:
    times: list[float] = []

    async def caller() -> None:
        await bucket.acquire(clock.sleep)
        times.append(clock.now - 1000.0)

    await asyncio.gather(*(caller() for _ in range(callers)))
    return sorted(times)


async def test_burst_is_free_then_rate_applies(clock: FakeClock) -> None:
    bucket = RequestBudget(rate=10, burst=5, clock=clock)
    times = await _grant_times(bucket, clock, 8)
    assert times[:5] == [0.0] * 5
    assert times[5:] == pytest.approx([0.1, 0.2, 0.3])
    assert bucket.stats.granted == 8
    assert bucket.stats.waits == 3


async def test_concurrent_callers_respect_the_rate(clock: FakeClock) -> None:
    bucket = RequestBudget(rate=4, burst=2, clock=clock)
    times = await _grant_times(bucket, clock, 40)
    # In any window of one second at most rate + burst grants.
    for start in times:
        assert sum(start <= t < start + 1.0 for t in times) <= 4 + 2
    assert times[-1] == pytest.approx((40 - 2) / 4)


async def test_idle_time_refills_the_bucket(clock: FakeClock) -> None:
    bucket = RequestBudget(rate=1, burst=3, clock=clock)
    await _grant_times(bucket, clock, 3)
    clock.now += 10
    before = clock.now
    await _grant_times(bucket, clock, 3)
    assert clock.now == before


async def test_a_429_pauses_every_caller(clock: FakeClock) -> None:
    bucket = RequestBudget(rate=100, burst=50, clock=clock)
    bucket.record_rate_limited(retry_after=5.0)
    times = await _grant_times(bucket, clock, 3)
    assert times[0] == pytest.approx(5.0)
    assert times[1:] == pytest.approx([5.01, 5.02])  # resumes at the steady rate, without a burst
    assert bucket.stats.rate_limited == 1


async def test_a_pause_during_a_wait_holds_the_sleeper(clock: FakeClock) -> None:
    bucket = RequestBudget(rate=1, burst=1, clock=clock)
    await bucket.acquire(clock.sleep)
    waiter = asyncio.create_task(bucket.acquire(clock.sleep))
    await asyncio.sleep(0)  # the waiter reserved the slot at +1 s and sleeps
    bucket.pause(3.0)
    await waiter
    assert clock.now - 1000.0 >= 3.0


async def test_429_without_retry_after_only_counts(clock: FakeClock) -> None:
    bucket = RequestBudget(clock=clock)
    bucket.record_rate_limited(retry_after=None)
    await bucket.acquire(clock.sleep)
    assert clock.sleeps == []
    assert bucket.stats.rate_limited == 1


async def test_acquire_refuses_to_wait_past_max_wait(clock: FakeClock) -> None:
    bucket = RequestBudget(clock=clock)
    bucket.pause(30.0)
    with pytest.raises(BudgetExhausted) as caught:
        await bucket.acquire(clock.sleep, max_wait=10.0)
    assert caught.value.wait == pytest.approx(30.0)
    assert clock.sleeps == []


async def test_a_caller_without_a_horizon_waits_behind_a_horizon_not_a_backlog(clock: FakeClock) -> None:
    """Twenty requests for one runner are waiting (a creation backlog, 2 s at 10 req/s); a list page
    that comes after them is sent within the horizon, and the rate holds for everyone."""
    bucket = RequestBudget(rate=10, burst=1, clock=clock)
    grants: dict[str, float] = {}

    async def caller(name: str, horizon: float | None) -> None:
        await bucket.acquire(clock.sleep, horizon=horizon)
        grants[name] = clock.now - 1000.0

    backlog = [asyncio.create_task(caller(f"create-{i}", 0.2)) for i in range(20)]
    for _ in range(10):
        await asyncio.sleep(0)
    arrived = clock.now - 1000.0
    await caller("list", None)
    await asyncio.gather(*backlog)
    assert grants["list"] - arrived <= 0.2 + 0.1 + 1e-9, "behind the horizon and the slot in hand"
    assert max(grants.values()) >= 2.0, "the backlog itself is not any faster"
    times = sorted(grants.values())
    assert times == pytest.approx([i / 10 for i in range(21)])


async def test_a_horizon_still_refuses_to_wait_past_max_wait(clock: FakeClock) -> None:
    bucket = RequestBudget(rate=1, burst=1, clock=clock)
    bucket.pause(30.0)
    with pytest.raises(BudgetExhausted) as caught:
        await bucket.acquire(clock.sleep, max_wait=10.0, horizon=2.0)
    assert caught.value.wait == pytest.approx(30.0)
    assert clock.sleeps == []
    await bucket.acquire(clock.sleep, horizon=2.0)
    assert clock.now - 1000.0 == pytest.approx(30.0)
    assert bucket.stats.waits == 1


def test_invalid_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        RequestBudget(rate=0)


def test_registry_shares_one_bucket_per_credential() -> None:
    first = budget.shared("https://api.coreweave.com/", TOKEN)
    assert budget.shared("https://api.coreweave.com", TOKEN) is first
    assert budget.shared("https://api.coreweave.com", "other-token") is not first
    assert budget.shared("https://elsewhere.test", TOKEN) is not first


def test_a_forgotten_budget_is_replaced_by_a_fresh_one() -> None:
    first = budget.shared(BASE_URL, TOKEN)
    other = budget.shared(BASE_URL, "other-token")
    budget.forget(first)
    assert budget.shared(BASE_URL, TOKEN) is not first
    assert budget.shared(BASE_URL, "other-token") is other


def test_registry_keys_do_not_hold_the_token() -> None:
    budget.shared(BASE_URL, TOKEN)
    assert TOKEN not in repr(budget._registry)


async def test_clients_with_one_token_share_a_429_pause(clock: FakeClock) -> None:
    api = FakeApi()
    api.runners["prod-1"] = runner_json()

    def client() -> CloudClient:
        return CloudClient(
            BASE_URL, TOKEN, transport=httpx.MockTransport(api.handle), sleep=clock.sleep, clock=clock
        )

    async with client() as first, client() as second:
        assert first.budget is second.budget
        api.fail_next(429, code=8, headers={"Retry-After": "4"})
        await first.get("prod-1")
        paused_at = clock.now
        await second.get("prod-1")
    assert paused_at - 1000.0 == pytest.approx(4.0)
    assert first.budget.stats.rate_limited == 1
    assert first.budget.stats.waits >= 1


async def test_many_clients_sharing_a_token_keep_the_rate(clock: FakeClock) -> None:
    api = FakeApi()
    api.runners["prod-1"] = runner_json()
    sent: list[float] = []

    def recording(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now)
        return api.handle(request)

    budget.shared(BASE_URL, TOKEN, rate=5, burst=1, clock=clock)
    clients = [
        CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(recording), sleep=clock.sleep, clock=clock)
        for _ in range(10)
    ]
    await asyncio.gather(*(c.get("prod-1") for c in clients))
    await asyncio.gather(*(c.aclose() for c in clients))
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert len(sent) == 10
    assert min(gaps) == pytest.approx(0.2)
