"""Bare 404s (contract A.27): a misrouted prefix answers like a proxy, not with a google.rpc.Status.

The fault strikes before authentication and the handler, so state never changes, and it is logged.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from runner_operator.simulator.config import DEV_ADMIN_TOKEN
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.faults import API_PREFIX
from runner_operator.simulator.server import RunningServer
from tests.unit.simulator.conftest import runner

RUNNERS = "/v1/sandbox/managedRunners"
ADMIN = {"Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}
GO_NOT_FOUND = "404 page not found\n"


# -- in-process ----------------------------------------------------------------------------


def test_bare404_prefixes_are_set_cleared_and_described(sim: Simulator) -> None:
    sim.set_bare404()
    sim.set_bare404("/v1/sandbox/other")
    assert sim.faults.describe()["bare404"] == [API_PREFIX, "/v1/sandbox/other"]
    assert sim.faults.misrouted(f"{RUNNERS}/x")
    assert sim.faults.misrouted("/v1/sandbox/other/y")
    assert not sim.faults.misrouted("/v1/sandbox")
    sim.set_bare404(enabled=False)
    assert not sim.faults.misrouted(RUNNERS)
    sim.clear_faults()
    assert sim.faults.describe()["bare404"] == []


@pytest.mark.parametrize("prefix", ["v1/sandbox", "", "/_sim", "/_sim/state"])
def test_bare404_refuses_relative_and_control_prefixes(sim: Simulator, prefix: str) -> None:
    with pytest.raises(ValueError, match=r"absolute path|control API"):
        sim.set_bare404(prefix)


def test_bare404_is_transport_level_only(sim: Simulator) -> None:
    sim.set_bare404()
    sim.create(runner(), "req-1")
    assert sim.get("prod-east")["identity"]["runnerId"] == "prod-east"


# -- HTTP ----------------------------------------------------------------------------------


def assert_bare(response: httpx.Response) -> None:
    assert response.status_code == 404
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert response.text == GO_NOT_FOUND


async def test_every_call_under_the_prefix_gets_a_bare_404_and_changes_nothing(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    await http.post(RUNNERS, params={"requestId": "keep"}, json=runner("keep", cluster="c0"))
    enabled = await http.post("/_sim/faults/bare404", json={"prefix": RUNNERS, "enabled": True})
    assert enabled.json()["bare404"] == [RUNNERS]
    responses = [
        await http.post(RUNNERS, params={"requestId": "r"}, json=runner("new", cluster="c1")),
        await http.get(RUNNERS),
        await http.get(f"{RUNNERS}/keep"),
        await http.patch(f"{RUNNERS}/keep", params={"updateMask": "displayName"}, json={"displayName": "x"}),
        await http.delete(f"{RUNNERS}/keep"),
        await http.post(f"{RUNNERS}/keep:applyAvailableUpdate"),
        await http.put(f"{RUNNERS}/keep"),  # not a route at all: still the proxy's 404
    ]
    for response in responses:
        assert_bare(response)
    assert server.simulator.runner_ids() == ["keep"]
    kept = server.simulator.get("keep")
    assert (kept["installStatus"], kept.get("displayName")) == ("RUNNER_INSTALL_STATUS_PENDING", None)


async def test_bare_404s_are_logged_with_status_and_fault_label(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    server.simulator.set_bare404()
    await http.get(f"{RUNNERS}/x")
    await http.get(RUNNERS)
    log = (await http.get("/_sim/requests")).json()
    assert [(e["endpoint"], e["status"], e["fault"]) for e in log["requests"]] == [
        ("get", 404, "bare404"),
        ("list", 404, "bare404"),
    ]
    assert log["counts"] == {f"GET {RUNNERS}/{{runnerId}} 404": 1, f"GET {RUNNERS} 404": 1}
    assert server.simulator.log.count("get", 404) == 1


async def test_bare_404_comes_before_authentication(server: RunningServer) -> None:
    server.simulator.set_bare404()
    async with httpx.AsyncClient(base_url=server.url) as anonymous:
        assert_bare(await anonymous.get(RUNNERS))
        assert (await anonymous.get("/_sim/state")).status_code == 401


async def test_control_routes_are_never_misrouted(server: RunningServer, http: httpx.AsyncClient) -> None:
    server.simulator.set_bare404("/")
    assert_bare(await http.get(RUNNERS))
    assert_bare(await http.get("/anything/else"))
    state = await http.get("/_sim/state")
    assert state.status_code == 200
    assert state.json()["faults"]["bare404"] == ["/"]


async def test_only_paths_under_the_prefix_are_affected(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    await http.post("/_sim/faults/bare404", json={"prefix": f"{RUNNERS}/ghost"})
    assert_bare(await http.get(f"{RUNNERS}/ghost"))
    listed = await http.get(RUNNERS)
    missing = await http.get(f"{RUNNERS}/other")
    assert (listed.status_code, listed.json()) == (200, {"managedRunners": []})
    assert (missing.status_code, missing.json()["code"]) == (404, 5)


async def test_disabling_or_clearing_restores_service(server: RunningServer, http: httpx.AsyncClient) -> None:
    await http.post("/_sim/faults/bare404", json={})
    assert_bare(await http.get(RUNNERS))
    await http.post("/_sim/faults/bare404", json={"prefix": RUNNERS, "enabled": False})
    assert (await http.get(RUNNERS)).status_code == 200
    await http.post("/_sim/faults/bare404", json={"enabled": True})
    assert_bare(await http.post(RUNNERS, params={"requestId": "r"}, json=runner()))
    assert (await http.delete("/_sim/faults")).status_code == 200
    created = await http.post(RUNNERS, params={"requestId": "r"}, json=runner())
    assert (created.status_code, created.json()["identity"]["runnerId"]) == (200, "prod-east")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"prefix": "v1/sandbox"}, id="relative-prefix"),
        pytest.param({"prefix": "/_sim/state"}, id="control-prefix"),
        pytest.param({"enabled": "yes"}, id="enabled-not-a-bool"),
    ],
)
async def test_control_api_rejects_bad_bare404_arguments(
    http: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await http.post("/_sim/faults/bare404", json=body)
    assert (response.status_code, response.json()["code"]) == (400, 3)
