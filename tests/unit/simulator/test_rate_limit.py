"""The simulator's optional server-side quota: 429 with Retry-After over the rate, per token."""

from __future__ import annotations

import httpx

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import serve


async def test_requests_over_the_quota_get_429_with_retry_after() -> None:
    config = SimulatorConfig(timings=Timings.instant(), rate_limit=2.0, rate_burst=3)
    async with await serve(config) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        headers = {"Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}
        codes = [(await http.get("/v1/sandbox/managedRunners", headers=headers)) for _ in range(6)]
        assert [r.status_code for r in codes[:3]] == [200, 200, 200]
        limited = [r for r in codes if r.status_code == 429]
        assert limited, "the fourth request within a second must be over a 2/s quota with burst 3"
        assert int(limited[0].headers["Retry-After"]) >= 1
        assert limited[0].json()["code"] == 8
        assert srv.simulator.limiter.limited == len(limited)
        # The control API is not rate limited.
        state = await http.get("/_sim/state", headers=headers)
        assert state.status_code == 200
