"""Target of the contract suite: COREWEAVE_API_ENDPOINT + COREWEAVE_API_TOKEN, else an in-process simulator.

COREWEAVE_API_USER_TOKEN (a token without SANDBOX_ADMIN) enables the 403 test against a foreign
endpoint. Tests that need the simulator's /_sim controls skip when the endpoint has none.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, DEV_USER_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.server import serve

RUNNERS = "/v1/sandbox/managedRunners"


@dataclass
class Target:
    url: str
    token: str
    user_token: str | None
    in_process: bool


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    endpoint = os.environ.get("COREWEAVE_API_ENDPOINT")
    if endpoint:
        token = os.environ.get("COREWEAVE_API_TOKEN")
        if not token:
            pytest.fail("COREWEAVE_API_ENDPOINT is set but COREWEAVE_API_TOKEN is not")
        yield Target(endpoint.rstrip("/"), token, os.environ.get("COREWEAVE_API_USER_TOKEN"), False)
        return
    config = SimulatorConfig(timings=Timings.instant(), log_requests=False)
    async with await serve(config) as running:
        yield Target(running.url, DEV_ADMIN_TOKEN, DEV_USER_TOKEN, True)


@pytest.fixture
async def api(target: Target) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {target.token}"}
    async with httpx.AsyncClient(base_url=target.url, headers=headers, timeout=30.0) as client:
        yield client


@dataclass
class Control:
    """The simulator's /_sim API, for tests that need time travel or faults."""

    http: httpx.AsyncClient

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.http.request(method, f"/_sim{path}", json=body)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def advance(self, seconds: float) -> None:
        await self.call("POST", "/clock", {"advanceSeconds": seconds})


@pytest.fixture
async def control(api: httpx.AsyncClient) -> Control:
    probe = await api.get("/_sim/state")
    if probe.status_code != 200 or probe.json().get("simulator") is not True:
        pytest.skip("needs the simulator's /_sim control API")
    await api.post(
        "/_sim/timings",
        json={
            "installSeconds": 2,
            "provisionSeconds": 5,
            "rolloutSeconds": 3,
            "deleteSeconds": 5,
            "heartbeatSeconds": 10,
        },
    )
    return Control(api)


@dataclass
class Runners:
    """Creates runners with unique IDs and clusters; deletes them at teardown."""

    api: httpx.AsyncClient
    created: list[str] = field(default_factory=list)

    def body(self, runner_id: str | None = None, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "identity": {
                "runnerId": runner_id or f"contract-{uuid.uuid4().hex[:12]}",
                "zone": "us-east-04a",
                "clusterId": str(uuid.uuid4()),
            },
            "policy": {},
        }
        body.update(extra)
        return body

    async def post(self, body: dict[str, Any], request_id: str | None = None) -> httpx.Response:
        self.created.append(body["identity"]["runnerId"])
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self.api.post(RUNNERS, params=params, json=body)

    async def create(self, **extra: Any) -> dict[str, Any]:
        response = await self.post(self.body(**extra))
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def cleanup(self) -> None:
        for runner_id in self.created:
            await self.api.delete(f"{RUNNERS}/{runner_id}", params={"allowMissing": "true"})


@pytest.fixture
async def runners(api: httpx.AsyncClient) -> AsyncIterator[Runners]:
    made = Runners(api)
    yield made
    await made.cleanup()
