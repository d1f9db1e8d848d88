"""The HTTP face: auth, Status bodies, fault injection, the /_sim control API, logging, state file, CLI."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, DEV_USER_TOKEN, SimulatorConfig
from runner_operator.simulator.server import RunningServer, parse_args, serve
from tests.clock import FakeClock
from tests.unit.simulator.conftest import runner

RUNNERS = "/v1/sandbox/managedRunners"
ADMIN = {"Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}


async def create(
    http: httpx.AsyncClient, runner_id: str = "prod-east", cluster: str = "c1"
) -> httpx.Response:
    return await http.post(RUNNERS, params={"requestId": runner_id}, json=runner(runner_id, cluster=cluster))


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        pytest.param({}, 401, 16, id="no-token-unauthenticated"),
        pytest.param({"Authorization": "Bearer wrong"}, 401, 16, id="unknown-token-unauthenticated"),
        pytest.param({"Authorization": DEV_ADMIN_TOKEN}, 401, 16, id="not-a-bearer-header"),
        pytest.param(
            {"Authorization": f"Bearer {DEV_USER_TOKEN}"}, 403, 7, id="user-token-permission-denied"
        ),
    ],
)
async def test_runner_endpoints_need_an_admin_token(
    server: RunningServer, headers: dict[str, str], status: int, code: int
) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
        response = await client.get(RUNNERS)
    assert response.status_code == status
    assert response.json()["code"] == code


async def test_control_api_refuses_user_tokens(server: RunningServer) -> None:
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {DEV_USER_TOKEN}"}
    ) as c:
        assert (await c.post("/_sim/reset")).status_code == 403


async def test_separate_control_token_is_the_only_key_to_the_control_api(clock: FakeClock) -> None:
    config = SimulatorConfig(clock=clock, control_token="ctl", log_requests=False)
    async with await serve(config) as running, httpx.AsyncClient(base_url=running.url) as client:
        admin = await client.get("/_sim/state", headers=ADMIN)
        control = await client.get("/_sim/state", headers={"Authorization": "Bearer ctl"})
    assert (admin.status_code, control.status_code) == (401, 200)


async def test_unknown_routes_and_methods_get_status_bodies(http: httpx.AsyncClient) -> None:
    missing = await http.get("/v1/sandbox/elsewhere")
    wrong_method = await http.put(f"{RUNNERS}/x")
    unknown_verb = await http.post(f"{RUNNERS}/x:explode")
    assert (missing.status_code, missing.json()["code"]) == (404, 5)
    assert (wrong_method.status_code, wrong_method.json()["code"]) == (405, 12)
    assert (unknown_verb.status_code, unknown_verb.json()["code"]) == (501, 12)


async def test_malformed_json_is_invalid_argument(http: httpx.AsyncClient) -> None:
    response = await http.post(RUNNERS, params={"requestId": "r"}, content=b"{nope")
    assert (response.status_code, response.json()["code"]) == (400, 3)


async def test_scripted_errors_fail_the_next_calls_then_stop(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    await create(http)
    server.simulator.fail_next("get", 503, times=2)
    statuses = [(await http.get(f"{RUNNERS}/prod-east")).status_code for _ in range(3)]
    assert statuses == [503, 503, 200]


async def test_rate_limit_fault_carries_retry_info(server: RunningServer, http: httpx.AsyncClient) -> None:
    server.simulator.fail_next("list", 429, retry_after=1.5)
    response = await http.get(RUNNERS)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "2"
    body = response.json()
    assert body["code"] == 8
    types = {d["@type"]: d for d in body["details"]}
    assert types["type.googleapis.com/google.rpc.RetryInfo"]["retryDelay"] == "1.5s"
    assert "type.googleapis.com/google.rpc.QuotaFailure" in types


async def test_error_rate_is_reproducible_with_a_seed(server: RunningServer, http: httpx.AsyncClient) -> None:
    async def run() -> list[int]:
        server.simulator.set_error_rate("list", 0.5, 500, seed=7)
        return [(await http.get(RUNNERS)).status_code for _ in range(20)]

    first, second = await run(), await run()
    assert first == second
    assert 500 in first
    assert 200 in first


async def test_dropped_connection_gives_no_response(server: RunningServer, http: httpx.AsyncClient) -> None:
    server.simulator.drop_next("list")
    with pytest.raises(httpx.TransportError):
        await http.get(RUNNERS)
    assert (await http.get(RUNNERS)).status_code == 200
    assert server.simulator.log.counts[f"GET {RUNNERS} 0"] == 1


async def test_hang_outlasts_the_client_timeout(server: RunningServer, http: httpx.AsyncClient) -> None:
    server.simulator.hang_next("get", seconds=30)
    with pytest.raises(httpx.ReadTimeout):
        await http.get(f"{RUNNERS}/x", timeout=0.2)


async def test_added_latency_delays_responses(server: RunningServer, http: httpx.AsyncClient) -> None:
    server.simulator.set_latency("list", 0.2)
    response = await http.get(RUNNERS)
    assert response.elapsed.total_seconds() >= 0.2


async def test_request_log_counts_method_route_and_status(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    await create(http)
    await http.get(f"{RUNNERS}/prod-east")
    await http.get(f"{RUNNERS}/ghost")
    await http.post(f"{RUNNERS}/prod-east:applyAvailableUpdate")
    log = (await http.get("/_sim/requests")).json()
    assert log["counts"] == {
        f"POST {RUNNERS} 200": 1,
        f"GET {RUNNERS}/{{runnerId}} 200": 1,
        f"GET {RUNNERS}/{{runnerId}} 404": 1,
        f"POST {RUNNERS}/{{runnerId}}:applyAvailableUpdate 400": 1,
    }
    assert [e["endpoint"] for e in log["requests"]] == ["create", "get", "get", "applyAvailableUpdate"]
    assert server.simulator.log.count("get", 404) == 1


async def test_every_request_is_logged_without_token_or_body(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runner_operator.simulator")
    async with (
        await serve(SimulatorConfig(clock=clock)) as running,
        httpx.AsyncClient(base_url=running.url) as c,
    ):
        await c.post(RUNNERS, params={"requestId": "r"}, json=runner(), headers=ADMIN)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith(f"POST {RUNNERS} 200 ")
    assert DEV_ADMIN_TOKEN not in lines[0]
    assert "us-east-04a" not in lines[0]


async def test_control_api_drives_faults_and_life_cycle(http: httpx.AsyncClient) -> None:
    await create(http)
    fault = await http.post("/_sim/faults", json={"endpoint": "get", "status": 500, "times": 1})
    assert fault.status_code == 200
    assert (await http.get(f"{RUNNERS}/prod-east")).status_code == 500
    await http.post("/_sim/clock", json={"advanceSeconds": 7})
    assert (await http.get(f"{RUNNERS}/prod-east")).json()["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    release = await http.post("/_sim/releases", json={"channel": "RELEASE_CHANNEL_STABLE"})
    assert release.json()["version"] == "stable-1.0.1"
    assert (await http.get(f"{RUNNERS}/prod-east")).json()["updateAvailable"] is True
    disconnected = await http.post("/_sim/runners/prod-east/disconnect")
    assert disconnected.json()["connectionStatus"] == "RUNNER_CONNECTION_STATUS_DISCONNECTED"
    failed = await http.post("/_sim/runners/prod-east/installFailure", json={"message": "boom"})
    assert failed.json()["installError"]["message"] == "boom"
    recovered = await http.delete("/_sim/runners/prod-east/installFailure")
    assert "installError" not in recovered.json()
    edited = await http.patch("/_sim/runners/prod-east", json={"displayName": "drifted"})
    assert edited.json()["displayName"] == "drifted"
    await http.delete("/_sim/runners/prod-east")
    assert (await http.get(f"{RUNNERS}/prod-east")).status_code == 404


async def test_control_api_creates_runners_out_of_band(http: httpx.AsyncClient) -> None:
    made = await http.post("/_sim/runners", json={"runner": runner()})
    assert made.json()["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert (await http.get(f"{RUNNERS}/prod-east")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/_sim/faults", {"kind": "explode"}, id="unknown-fault-kind"),
        pytest.param("POST", "/_sim/faults", {"endpoint": "nowhere"}, id="unknown-endpoint"),
        pytest.param("POST", "/_sim/timings", {"warpSeconds": 1}, id="unknown-timing"),
        pytest.param("PUT", "/_sim/faults/rates", {"rate": 2}, id="rate-above-one"),
        pytest.param("POST", "/_sim/clock", {"advanceSeconds": -1}, id="clock-backwards"),
    ],
)
async def test_control_api_rejects_bad_arguments(
    http: httpx.AsyncClient, method: str, path: str, body: dict[str, Any]
) -> None:
    response = await http.request(method, path, json=body)
    assert (response.status_code, response.json()["code"]) == (400, 3)


async def test_control_api_sets_timings_and_resets(server: RunningServer, http: httpx.AsyncClient) -> None:
    set_ = await http.post("/_sim/timings", json={"installSeconds": 0.5, "delete_seconds": 1})
    assert set_.json()["install_seconds"] == 0.5
    await create(http)
    await http.post("/_sim/reset")
    state = (await http.get("/_sim/state")).json()
    assert state["simulator"] is True
    assert state["runners"] == 0
    assert state["timings"]["install_seconds"] == 2.0


async def test_state_file_survives_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    config = SimulatorConfig(clock=clock, state_file=str(tmp_path / "state.json"), log_requests=False)
    async with await serve(config) as first, httpx.AsyncClient(base_url=first.url, headers=ADMIN) as client:
        await create(client)
        etag = (await client.get(f"{RUNNERS}/prod-east")).json()["etag"]
    clock.tick(7)
    async with await serve(config) as second, httpx.AsyncClient(base_url=second.url, headers=ADMIN) as client:
        got = (await client.get(f"{RUNNERS}/prod-east")).json()
        replay = await client.post(RUNNERS, params={"requestId": "prod-east"}, json=runner(cluster="c1"))
    assert got["etag"] == etag
    assert got["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert replay.status_code == 200


def test_cli_arguments_build_the_config() -> None:
    config = parse_args(
        [
            "--port",
            "9000",
            "--admin-token",
            "a",
            "--user-token",
            "u",
            "--install-seconds",
            "0.1",
            "--heartbeat-seconds",
            "3",
            "--reject-uppercase-zone",
            "--lenient",
            "--state-file",
            "/tmp/x.json",
        ]
    )
    assert (config.port, config.admin_tokens, config.user_tokens) == (9000, ("a",), ("u",))
    assert (config.timings.install_seconds, config.timings.heartbeat_seconds) == (0.1, 3.0)
    assert config.timings.provision_seconds == 5.0
    assert config.reject_uppercase_zone
    assert config.lenient
    assert config.state_file == "/tmp/x.json"


def test_cli_admin_token_defaults_to_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMULATOR_ADMIN_TOKEN", "from-env")
    assert parse_args([]).admin_tokens == ("from-env",)
    monkeypatch.delenv("SIMULATOR_ADMIN_TOKEN")
    assert parse_args([]).admin_tokens == (DEV_ADMIN_TOKEN,)


async def test_healthz_answers_without_a_token_and_is_not_logged(server: RunningServer) -> None:
    before = len(server.simulator.log.entries)
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.get("/healthz")
    assert (response.status_code, response.text) == (200, "ok\n")
    assert len(server.simulator.log.entries) == before


def test_the_default_port_is_not_the_operators() -> None:
    """The operator serves /healthz on 8080 and /metrics on 9090; both run side by side in the demo."""
    assert parse_args([]).port not in (8080, 9090)
