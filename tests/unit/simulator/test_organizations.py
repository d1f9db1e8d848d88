"""Organisations (contract A.29): runners are visible only to the organisation of the caller's token.

Another organisation's runner is NOT_FOUND exactly like an unknown one; clusters stay global.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, DEV_USER_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.errors import ApiError
from runner_operator.simulator.server import RunningServer, serve
from tests.clock import FakeClock
from tests.unit.simulator.conftest import runner

RUNNERS = "/v1/sandbox/managedRunners"
B_TOKEN = "CW-SECRET-org-b"
ADMIN = {"Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}
ORG_B = {"Authorization": f"Bearer {B_TOKEN}"}


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args, **kwargs)
    return caught.value


def ids(page: dict[str, Any]) -> list[str]:
    return [r["identity"]["runnerId"] for r in page["managedRunners"]]


# -- in-process ----------------------------------------------------------------------------


def test_another_organisations_runner_is_not_found_like_an_unknown_one(sim: Simulator) -> None:
    sim.create(runner("shared"), "req-1")
    hidden = refused(sim.get, "shared", organization="b")
    assert hidden.code == 5
    assert hidden.body() == refused(sim.get, "shared", organization="c").body()
    unknown = refused(sim.get, "ghost")
    assert hidden.body() == json.loads(json.dumps(unknown.body()).replace("ghost", "shared"))


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda s: s.update("prod-east", {"displayName": "x"}, "displayName", organization="b"),
            id="update",
        ),
        pytest.param(lambda s: s.delete("prod-east", organization="b"), id="delete"),
        pytest.param(lambda s: s.apply_available_update("prod-east", organization="b"), id="apply-update"),
        pytest.param(lambda s: s.disconnect("prod-east", organization="b"), id="oob-disconnect"),
        pytest.param(
            lambda s: s.edit_out_of_band("prod-east", {"displayName": "x"}, organization="b"), id="oob-edit"
        ),
        pytest.param(lambda s: s.delete_out_of_band("prod-east", organization="b"), id="oob-delete"),
    ],
)
def test_every_call_on_another_organisations_runner_is_not_found(
    sim: Simulator, clock: FakeClock, call: Callable[[Simulator], Any]
) -> None:
    created = sim.create(runner(), "req-1")
    clock.tick(7)
    sim.publish_release()
    assert refused(call, sim).code == 5
    got = sim.get("prod-east")
    assert (got["etag"], got.get("displayName"), got["installStatus"]) == (
        created["etag"],
        None,
        "RUNNER_INSTALL_STATUS_READY",
    )


def test_delete_allow_missing_of_another_organisations_runner_leaves_it_alone(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    assert sim.delete("prod-east", allow_missing=True, organization="b") == {}
    assert sim.get("prod-east")["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"


def test_list_returns_only_the_callers_organisation_and_pages_within_it(sim: Simulator) -> None:
    for i in range(3):
        sim.create(runner(f"a-{i}", cluster=f"ca-{i}"), f"a-{i}", organization="a")
        sim.create(runner(f"b-{i}", cluster=f"cb-{i}"), f"b-{i}", organization="b")
    sim.create(runner("z", cluster="cz"), "z")
    seen: list[str] = []
    token = None
    while True:
        page = sim.list_runners(1, token, organization="a")
        seen += ids(page)
        token = page.get("nextPageToken")
        if not token:
            break
    assert seen == ["a-0", "a-1", "a-2"]
    assert ids(sim.list_runners(organization="b")) == ["b-0", "b-1", "b-2"]
    assert ids(sim.list_runners()) == ["z"]
    assert ids(sim.list_runners(organization="nobody")) == []
    assert sim.runner_ids("a") == ["a-0", "a-1", "a-2"]
    assert sim.organization_counts() == {"": 1, "a": 3, "b": 3}
    assert len(sim) == 7


def test_runner_ids_are_unique_per_organisation(sim: Simulator) -> None:
    mine = sim.create(runner("x", cluster="c-1"), "req-1")
    theirs = sim.create(runner("x", cluster="c-2"), "req-2", organization="b")
    assert refused(sim.create, runner("x", cluster="c-3"), "req-3", organization="b").code == 6
    sim.update("x", {"displayName": "only b"}, "displayName", organization="b")
    assert sim.get("x").get("displayName") is None
    assert sim.get("x")["identity"]["clusterId"] == mine["identity"]["clusterId"] == "c-1"
    assert sim.get("x", organization="b")["identity"]["clusterId"] == theirs["identity"]["clusterId"]
    sim.delete_out_of_band("x", organization="b")
    assert sim.get("x")["etag"] == mine["etag"]


def test_one_runner_per_cluster_holds_across_organisations(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner("secret-name", cluster="c-1"), "req-1")
    err = refused(sim.create, runner("other", cluster="c-1"), "req-1", organization="b")
    assert err.code == 6
    assert "secret-name" not in json.dumps(err.body())
    same_org = refused(sim.create, runner("other", cluster="c-1"), "req-2")
    assert "secret-name" in same_org.message
    sim.delete("secret-name")
    clock.tick(5)
    assert (
        sim.create(runner("other", cluster="c-1"), "req-1", organization="b")["identity"]["runnerId"]
        == "other"
    )


def test_request_ids_are_scoped_per_organisation(sim: Simulator) -> None:
    first = sim.create(runner("a", cluster="c-1"), "same")
    other = sim.create(runner("b", cluster="c-2"), "same", organization="b")
    assert other["identity"]["runnerId"] == "b"
    assert sim.create(runner("a", cluster="c-1"), "same")["etag"] == first["etag"]
    assert sim.create(runner("b", cluster="c-2"), "same", organization="b")["etag"] == other["etag"]
    assert refused(sim.create, runner("b", cluster="c-2"), "same").code == 3


def test_out_of_band_calls_act_in_the_given_organisation(sim: Simulator) -> None:
    made = sim.create_out_of_band(runner(), organization="b")
    assert made["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert sim.runner_ids() == []
    assert sim.runner_ids("b") == ["prod-east"]
    disconnected = sim.disconnect("prod-east", organization="b")
    assert disconnected["connectionStatus"] == "RUNNER_CONNECTION_STATUS_DISCONNECTED"
    assert (
        sim.reconnect("prod-east", organization="b")["connectionStatus"]
        == "RUNNER_CONNECTION_STATUS_CONNECTED"
    )
    failed = sim.fail_install("prod-east", organization="b")
    assert failed["installStatus"] == "RUNNER_INSTALL_STATUS_FAILED"
    assert "installError" not in sim.recover_install("prod-east", organization="b")
    edited = sim.edit_out_of_band("prod-east", {"displayName": "drift"}, organization="b")
    assert edited["displayName"] == "drift"
    sim.delete_out_of_band("prod-east", organization="b")
    assert sim.runner_ids("b") == []


def test_token_mapping_is_replaced_merged_validated_and_reset(clock: FakeClock) -> None:
    sim = Simulator(SimulatorConfig(clock=clock, organizations={"t-1": "one"}, log_requests=False))
    assert (sim.organization_of("t-1"), sim.organization_of("unmapped"), sim.organization_of(None)) == (
        "one",
        "",
        "",
    )
    assert sim.set_organizations({"t-2": "two"}) == {"t-2": "two"}
    assert sim.organization_of("t-1") == ""
    assert sim.set_organizations({"t-3": "three"}, merge=True) == {"t-2": "two", "t-3": "three"}
    with pytest.raises(ValueError, match="non-empty"):
        sim.set_organizations({"": "x"})
    with pytest.raises(ValueError, match="organisation names"):
        sim.set_organizations({"t-4": 4})  # type: ignore[dict-item]
    assert sim.organization_of("t-3") == "three"  # a refused call changes nothing
    sim.reset()
    assert sim.organizations == {"t-1": "one"}


def test_snapshot_keeps_each_runners_organisation(tmp_path: Path, clock: FakeClock) -> None:
    config = SimulatorConfig(clock=clock, state_file=str(tmp_path / "state.json"), log_requests=False)
    first = Simulator(config)
    mine = first.create(runner("x", cluster="c-1"), "req")
    theirs = first.create(runner("x", cluster="c-2"), "req", organization="b")
    second = Simulator(config)
    assert second.get("x")["etag"] == mine["etag"]
    assert second.get("x", organization="b")["etag"] == theirs["etag"]
    assert second.create(runner("x", cluster="c-2"), "req", organization="b")["etag"] == theirs["etag"]
    assert refused(second.create, runner("y", cluster="c-2"), "other").code == 6


def test_version_1_snapshots_load_into_the_default_organisation(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "state.json"
    config = SimulatorConfig(clock=clock, state_file=str(path), log_requests=False)
    made = Simulator(config).create(runner(), "req-1")
    data = json.loads(path.read_text())
    for item in data["runners"]:
        del item["organization"]
    data["requests"] = {request_id: rest for _, request_id, *rest in data["requests"]}
    data["version"] = 1
    path.write_text(json.dumps(data))
    loaded = Simulator(config)
    assert loaded.get("prod-east")["etag"] == made["etag"]
    assert loaded.create(runner(), "req-1")["etag"] == made["etag"]
    assert loaded.runner_ids() == ["prod-east"]


# -- HTTP ----------------------------------------------------------------------------------


@pytest.fixture
async def server(clock: FakeClock) -> AsyncIterator[RunningServer]:
    config = SimulatorConfig(
        clock=clock, timings=Timings(), organizations={B_TOKEN: "org-b"}, log_requests=False
    )
    async with await serve(config) as running:
        yield running


@pytest.fixture
async def http(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as client:
        yield client


async def create(
    http: httpx.AsyncClient, headers: dict[str, str], runner_id: str = "prod-east", cluster: str = "c1"
) -> httpx.Response:
    return await http.post(
        RUNNERS, params={"requestId": runner_id}, json=runner(runner_id, cluster=cluster), headers=headers
    )


async def test_http_calls_are_scoped_to_the_tokens_organisation(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    assert (await create(http, ADMIN, "mine")).status_code == 200
    hidden = await http.get(f"{RUNNERS}/mine", headers=ORG_B)
    unknown = await http.get(f"{RUNNERS}/ghost", headers=ADMIN)
    assert (hidden.status_code, hidden.json()["code"]) == (404, 5)
    assert hidden.json()["details"][0]["resourceName"] == "managedRunners/mine"
    assert unknown.json()["message"].replace("ghost", "mine") == hidden.json()["message"]
    assert (await http.get(RUNNERS, headers=ORG_B)).json() == {"managedRunners": []}
    for response in (
        await http.patch(
            f"{RUNNERS}/mine", params={"updateMask": "displayName"}, json={"displayName": "x"}, headers=ORG_B
        ),
        await http.delete(f"{RUNNERS}/mine", headers=ORG_B),
        await http.post(f"{RUNNERS}/mine:applyAvailableUpdate", headers=ORG_B),
    ):
        assert (response.status_code, response.json()["code"]) == (404, 5)
    allowed = await http.delete(f"{RUNNERS}/mine", params={"allowMissing": "true"}, headers=ORG_B)
    assert (allowed.status_code, allowed.json()) == (200, {})
    mine = (await http.get(f"{RUNNERS}/mine", headers=ADMIN)).json()
    assert mine["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"
    assert "displayName" not in mine


async def test_http_two_organisations_share_runner_ids_but_not_clusters(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    assert (await create(http, ADMIN, "x", "c1")).status_code == 200
    taken = await create(http, ORG_B, "x", "c1")
    assert (taken.status_code, taken.json()["code"]) == (409, 6)
    assert (await create(http, ORG_B, "x", "c2")).status_code == 200
    listed_a = (await http.get(RUNNERS, headers=ADMIN)).json()["managedRunners"]
    listed_b = (await http.get(RUNNERS, headers=ORG_B)).json()["managedRunners"]
    assert [r["identity"]["clusterId"] for r in listed_a] == ["c1"]
    assert [r["identity"]["clusterId"] for r in listed_b] == ["c2"]
    state = (await http.get("/_sim/state", headers=ADMIN)).json()
    assert (state["runners"], state["organizations"]) == (2, {"": 1, "org-b": 1})


async def test_control_api_registers_organisation_tokens_at_runtime(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    late = {"Authorization": "Bearer late-token"}
    assert (await http.get(RUNNERS, headers=late)).status_code == 401
    registered = await http.post(
        "/_sim/organizations", json={"tokens": {"late-token": "org-c"}, "merge": True}, headers=ADMIN
    )
    assert registered.status_code == 200
    assert registered.json() == {"tokens": 2, "organizations": ["org-b", "org-c"]}
    assert "late-token" not in registered.text
    assert (await create(http, late, "late")).status_code == 200
    assert (await http.get(f"{RUNNERS}/late", headers=ADMIN)).status_code == 404
    assert (await http.get(f"{RUNNERS}/late", headers=ORG_B)).status_code == 404
    assert server.simulator.runner_ids("org-c") == ["late"]
    # Replacing the map drops org-b's token; the user token stays refused.
    await http.post("/_sim/organizations", json={"tokens": {"late-token": "org-c"}}, headers=ADMIN)
    assert (await http.get(RUNNERS, headers=ORG_B)).status_code == 401
    user = await http.get(RUNNERS, headers={"Authorization": f"Bearer {DEV_USER_TOKEN}"})
    assert user.status_code == 403


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="no-tokens"),
        pytest.param({"tokens": ["t"]}, id="tokens-not-a-map"),
        pytest.param({"tokens": {"t": 1}}, id="organisation-not-a-string"),
        pytest.param({"tokens": {"": "x"}}, id="empty-token"),
    ],
)
async def test_control_api_rejects_bad_organisation_maps(
    http: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await http.post("/_sim/organizations", json=body, headers=ADMIN)
    assert (response.status_code, response.json()["code"]) == (400, 3)


async def test_mapped_tokens_are_admin_tokens_of_the_control_api_too(http: httpx.AsyncClient) -> None:
    assert (await http.get("/_sim/state", headers=ORG_B)).status_code == 200


async def test_control_api_acts_in_a_given_organisation(
    server: RunningServer, http: httpx.AsyncClient
) -> None:
    made = await http.post("/_sim/runners", json={"runner": runner(), "organization": "org-b"}, headers=ADMIN)
    assert made.status_code == 200
    assert (await http.get(f"{RUNNERS}/prod-east", headers=ADMIN)).status_code == 404
    assert (await http.get(f"{RUNNERS}/prod-east", headers=ORG_B)).status_code == 200
    scoped = {"organization": "org-b"}
    state_b = (await http.get("/_sim/state", params=scoped, headers=ADMIN)).json()
    state_default = (await http.get("/_sim/state", params={"organization": ""}, headers=ADMIN)).json()
    assert (state_b["runners"], state_default["runners"]) == (1, 0)
    assert (await http.post("/_sim/runners/prod-east/disconnect", headers=ADMIN)).status_code == 404
    disconnected = await http.post("/_sim/runners/prod-east/disconnect", params=scoped, headers=ADMIN)
    assert disconnected.json()["connectionStatus"] == "RUNNER_CONNECTION_STATUS_DISCONNECTED"
    failed = await http.post(
        "/_sim/runners/prod-east/installFailure", json={"organization": "org-b"}, headers=ADMIN
    )
    assert failed.json()["installStatus"] == "RUNNER_INSTALL_STATUS_FAILED"
    edited = await http.patch(
        "/_sim/runners/prod-east", params=scoped, json={"displayName": "d"}, headers=ADMIN
    )
    assert edited.json()["displayName"] == "d"
    assert (await http.delete("/_sim/runners/prod-east", params=scoped, headers=ADMIN)).status_code == 200
    assert server.simulator.organization_counts() == {}


async def test_state_file_keeps_organisations_over_http(tmp_path: Path, clock: FakeClock) -> None:
    config = SimulatorConfig(
        clock=clock,
        organizations={B_TOKEN: "org-b"},
        state_file=str(tmp_path / "state.json"),
        log_requests=False,
    )
    async with await serve(config) as first, httpx.AsyncClient(base_url=first.url) as client:
        await create(client, ORG_B, "x")
    async with await serve(config) as second, httpx.AsyncClient(base_url=second.url) as client:
        assert (await client.get(f"{RUNNERS}/x", headers=ORG_B)).status_code == 200
        assert (await client.get(f"{RUNNERS}/x", headers=ADMIN)).status_code == 404
