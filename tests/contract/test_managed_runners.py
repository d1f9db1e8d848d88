"""Contract suite for /v1/sandbox/managedRunners over real HTTP (plain httpx), per the API contract.

Runs against COREWEAVE_API_ENDPOINT when set, otherwise against an in-process simulator.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.contract.conftest import RUNNERS, Control, Runners, Target

STATUS = "type.googleapis.com/google.rpc."
INSTALL_STATUSES = {
    f"RUNNER_INSTALL_STATUS_{s}"
    for s in ("UNSPECIFIED", "PENDING", "PROVISIONING", "READY", "FAILED", "DELETING")
}


def detail(response: httpx.Response, kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        d for d in response.json().get("details", []) if d.get("@type") == STATUS + kind
    ]
    assert found, f"no {kind} detail in {response.text}"
    return found[0]


def assert_status(response: httpx.Response, http: int, code: int) -> None:
    assert response.status_code == http, response.text
    body = response.json()
    assert body["code"] == code
    assert isinstance(body["message"], str)


# -- create / get ---------------------------------------------------------------------------


async def test_create_returns_the_stored_runner_with_server_defaults(runners: Runners) -> None:
    body = runners.body()
    body["identity"]["zone"] = "US-EAST-04A"
    response = await runners.post(body)
    assert response.status_code == 200
    got = response.json()
    assert got["identity"]["runnerId"] == body["identity"]["runnerId"]
    assert got["identity"]["zone"] == "us-east-04a"
    assert got["identity"]["runnerGroupId"] == "default"
    assert got["identity"]["clusterName"]
    assert got["spec"]["releaseChannel"] == "RELEASE_CHANNEL_STABLE"
    assert got["policy"] == {}
    assert got["etag"]
    assert got["installStatus"] in INSTALL_STATUSES
    assert got["createTime"].endswith("Z")


async def test_get_returns_what_create_stored(api: httpx.AsyncClient, runners: Runners) -> None:
    created = await runners.create(displayName="East")
    got = (await api.get(f"{RUNNERS}/{created['identity']['runnerId']}")).json()
    assert (got["identity"], got["displayName"], got["etag"]) == (
        created["identity"],
        "East",
        created["etag"],
    )


async def test_get_unknown_runner_is_not_found(api: httpx.AsyncClient) -> None:
    response = await api.get(f"{RUNNERS}/no-such-{uuid.uuid4().hex[:8]}")
    assert_status(response, 404, 5)


async def test_int64_is_a_string_and_message_presence_is_kept(runners: Runners) -> None:
    got = await runners.create(
        policy={"constraints": {"resources": {"maxGpuCount": 0}, "image": {}}},
        spec={"dataPlane": {"disabled": {}}},
    )
    assert got["policy"] == {"constraints": {"resources": {"maxGpuCount": "0"}, "image": {}}}
    assert got["spec"]["dataPlane"] == {"disabled": {}}


async def test_snake_case_input_is_answered_in_camel_case(runners: Runners) -> None:
    body = runners.body()
    body["identity"] = {
        "runner_id": body["identity"]["runnerId"],
        "zone": "us-east-04a",
        "cluster_id": body["identity"]["clusterId"],
        "runner_group_id": "blue",
    }
    body["spec"] = {"enforce_resource_limits": True}
    runners.created.append(body["identity"]["runner_id"])
    response = await runners.api.post(RUNNERS, params={"requestId": str(uuid.uuid4())}, json=body)
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["identity"]["runnerGroupId"] == "blue"
    assert got["spec"]["enforceResourceLimits"] is True


async def test_policy_may_be_absent_on_create(runners: Runners) -> None:
    body = runners.body()
    del body["policy"]
    response = await runners.post(body)
    assert response.status_code == 200
    assert response.json().get("policy") in (None, {"displayName": "Default policy"})


# -- create validation ---------------------------------------------------------------------


def _with(path: str, value: Any) -> Any:
    def build(body: dict[str, Any]) -> dict[str, Any]:
        node = body
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        return body

    return build


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_with("identity.runnerId", "Not_A_Label"), id="runner-id-not-a-dns-label"),
        pytest.param(_with("identity.zone", ""), id="zone-required"),
        pytest.param(_with("identity.clusterId", ""), id="cluster-required"),
        pytest.param(_with("unknownField", True), id="unknown-field"),
        pytest.param(_with("spec.releaseChannel", "RELEASE_CHANNEL_NIGHTLY"), id="unknown-enum"),
        pytest.param(_with("spec.dataPlane", {}), id="data-plane-needs-one-exposure"),
        pytest.param(_with("spec.dataPlane", {"custom": {}}), id="custom-data-plane-needs-uri"),
        pytest.param(
            _with("spec.maintenancePolicy", {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 30}]}),
            id="window-duration-range",
        ),
        pytest.param(
            _with("spec.overrides", {"scaling": {"minReplicas": 5, "maxReplicas": 1}}),
            id="scaling-min-above-max",
        ),
        pytest.param(
            _with("policy", {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 2592001}}}),
            id="lifetime-above-30-days",
        ),
        pytest.param(
            _with("policy", {"constraints": {"network": {"defaultEgress": [{"httpsHostname": "pypi.org"}]}}}),
            id="hostname-in-default-egress",
        ),
        pytest.param(
            _with(
                "policy",
                {"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["10.0.0.0/8", "10.1.0.0/16"]}}},
            ),
            id="redundant-allowlist-cidr",
        ),
        pytest.param(_with("policy", {"base": {"spec": {"initContainers": []}}}), id="forbidden-base-key"),
        pytest.param(_with("profileBindings", [{"profileTemplateId": "x"}]), id="legacy-profile-bindings"),
        pytest.param(
            _with("spec.allowPrivilegedProfileAnnotations", True), id="legacy-privileged-annotations"
        ),
    ],
)
async def test_invalid_create_is_invalid_argument_with_field_violations(
    runners: Runners, change: Any
) -> None:
    response = await runners.post(change(runners.body()))
    assert_status(response, 400, 3)
    assert detail(response, "BadRequest")["fieldViolations"]


async def test_create_without_request_id_is_invalid(runners: Runners) -> None:
    body = runners.body()
    runners.created.append(body["identity"]["runnerId"])
    response = await runners.api.post(RUNNERS, json=body)
    assert_status(response, 400, 3)


# -- idempotency and uniqueness -------------------------------------------------------------


async def test_replayed_create_returns_the_first_result(runners: Runners) -> None:
    body = runners.body()
    first = await runners.post(body, "req-" + uuid.uuid4().hex)
    key = str(first.request.url.params["requestId"])
    again = await runners.post(copy.deepcopy(body), key)
    assert again.status_code == 200
    assert (again.json()["etag"], again.json()["createTime"]) == (
        first.json()["etag"],
        first.json()["createTime"],
    )


async def test_reused_request_id_with_another_body_is_invalid(runners: Runners) -> None:
    body = runners.body()
    await runners.post(body, "req-reuse-" + uuid.uuid4().hex[:8])
    key = "req-reuse-2-" + uuid.uuid4().hex[:8]
    await runners.post(runners.body(), key)
    response = await runners.post(runners.body(), key)
    assert_status(response, 400, 3)


@pytest.mark.parametrize(
    "same",
    [
        pytest.param("runnerId", id="runner-id-taken"),
        pytest.param("clusterId", id="cluster-already-has-a-runner"),
    ],
)
async def test_second_runner_conflicts(runners: Runners, same: str) -> None:
    first = await runners.create()
    body = runners.body()
    body["identity"][same] = first["identity"][same]
    response = await runners.post(body)
    assert_status(response, 409, 6)


# -- list ---------------------------------------------------------------------------------


async def test_list_pages_through_runners_in_id_order(api: httpx.AsyncClient, runners: Runners) -> None:
    mine = sorted([(await runners.create())["identity"]["runnerId"] for _ in range(3)])
    seen: list[str] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"pageSize": 2}
        if token:
            params["pageToken"] = token
        response = await api.get(RUNNERS, params=params)
        assert response.status_code == 200
        page = response.json()
        assert len(page["managedRunners"]) <= 2
        seen += [r["identity"]["runnerId"] for r in page["managedRunners"]]
        token = page.get("nextPageToken")
        if not token:
            break
    assert seen == sorted(seen)
    assert [r for r in seen if r in mine] == mine


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"pageSize": -1}, id="negative-page-size"),
        pytest.param({"pageToken": "not-a-token"}, id="garbled-page-token"),
    ],
)
async def test_bad_list_parameters_are_invalid(api: httpx.AsyncClient, params: dict[str, Any]) -> None:
    response = await api.get(RUNNERS, params=params)
    assert response.status_code == 400
    assert response.json()["code"] in (3, 11)


# -- update -------------------------------------------------------------------------------


async def _patch(
    api: httpx.AsyncClient, runner_id: str, body: dict[str, Any], mask: str | None
) -> httpx.Response:
    params = {"updateMask": mask} if mask is not None else {}
    return await api.patch(f"{RUNNERS}/{runner_id}", params=params, json=body)


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param(None, id="mask-required"),
        pytest.param("*", id="wildcard-rejected"),
        pytest.param("identity.zone", id="zone-immutable"),
        pytest.param("identity.clusterId", id="cluster-immutable"),
        pytest.param("identity.runnerId", id="runner-id-immutable"),
        pytest.param("installStatus", id="output-only"),
        pytest.param("spec.overrides.env", id="deeper-spec-path"),
        pytest.param("policy.constraints", id="policy-sub-path"),
        pytest.param("noSuchField", id="unknown-path"),
    ],
)
async def test_bad_update_masks_are_invalid(
    api: httpx.AsyncClient, runners: Runners, mask: str | None
) -> None:
    created = await runners.create()
    response = await _patch(api, created["identity"]["runnerId"], {"displayName": "x"}, mask)
    assert_status(response, 400, 3)


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param("spec.enforceResourceLimits", id="camel"),
        pytest.param("spec.enforce_resource_limits", id="snake"),
    ],
)
async def test_update_writes_masked_spec_field(api: httpx.AsyncClient, runners: Runners, mask: str) -> None:
    created = await runners.create()
    body = {"spec": {"enforceResourceLimits": True}, "displayName": "ignored"}
    response = await _patch(api, created["identity"]["runnerId"], body, mask)
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["spec"]["enforceResourceLimits"] is True
    assert "displayName" not in got
    assert got["etag"] == created["etag"]
    assert got["targetRevision"] == created["targetRevision"] + 1


async def test_masked_field_absent_from_body_is_reset(api: httpx.AsyncClient, runners: Runners) -> None:
    created = await runners.create(displayName="East", spec={"volumes": {"enabled": True}})
    runner_id = created["identity"]["runnerId"]
    got = (await _patch(api, runner_id, {}, "displayName,spec.volumes,identity.runnerGroupId")).json()
    assert "displayName" not in got
    assert "volumes" not in got["spec"]
    assert got["identity"]["runnerGroupId"] == "default"


@pytest.mark.parametrize("etag", [pytest.param("stale-etag", id="stale"), pytest.param(None, id="missing")])
async def test_policy_update_without_current_etag_fails_precondition(
    api: httpx.AsyncClient, runners: Runners, etag: str | None
) -> None:
    created = await runners.create()
    body: dict[str, Any] = {"policy": {"displayName": "new"}}
    if etag:
        body["etag"] = etag
    response = await _patch(api, created["identity"]["runnerId"], body, "policy")
    assert_status(response, 400, 9)
    assert response.json()["message"] == "managed_runner.etag is stale; reload the runner and retry"
    assert detail(response, "PreconditionFailure")["violations"]


async def test_policy_update_with_current_etag_replaces_policy_and_rotates_etag(
    api: httpx.AsyncClient, runners: Runners
) -> None:
    created = await runners.create(policy={"displayName": "old", "constraints": {"image": {}}})
    runner_id = created["identity"]["runnerId"]
    body = {"policy": {"displayName": "new"}, "etag": created["etag"]}
    response = await _patch(api, runner_id, body, "policy")
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["policy"] == {"displayName": "new"}
    assert got["etag"] != created["etag"]
    stale = await _patch(api, runner_id, {"policy": {}, "etag": created["etag"]}, "policy")
    assert_status(stale, 400, 9)


async def test_update_of_unknown_runner_is_not_found(api: httpx.AsyncClient) -> None:
    response = await _patch(api, f"no-such-{uuid.uuid4().hex[:8]}", {"displayName": "x"}, "displayName")
    assert_status(response, 404, 5)


# -- delete and applyAvailableUpdate ----------------------------------------------------------


async def test_delete_accepts_and_runner_stays_readable_until_gone(
    api: httpx.AsyncClient, runners: Runners
) -> None:
    created = await runners.create()
    runner_id = created["identity"]["runnerId"]
    response = await api.delete(f"{RUNNERS}/{runner_id}")
    assert (response.status_code, response.json()) == (200, {})
    after = await api.get(f"{RUNNERS}/{runner_id}")
    assert after.status_code in (200, 404)
    if after.status_code == 200:
        assert after.json()["installStatus"] == "RUNNER_INSTALL_STATUS_DELETING"
    again = await api.delete(f"{RUNNERS}/{runner_id}", params={"allowMissing": "true"})
    assert again.status_code == 200


@pytest.mark.parametrize(
    ("params", "status"),
    [
        pytest.param({}, 404, id="unknown-is-not-found"),
        pytest.param({"allowMissing": "true"}, 200, id="allow-missing"),
    ],
)
async def test_delete_unknown_runner(api: httpx.AsyncClient, params: dict[str, str], status: int) -> None:
    response = await api.delete(f"{RUNNERS}/no-such-{uuid.uuid4().hex[:8]}", params=params)
    assert response.status_code == status


async def test_apply_update_without_available_update_fails_precondition(
    api: httpx.AsyncClient, runners: Runners
) -> None:
    created = await runners.create()
    response = await api.post(f"{RUNNERS}/{created['identity']['runnerId']}:applyAvailableUpdate")
    assert_status(response, 400, 9)


# -- auth ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(None, id="missing-token"),
        pytest.param("Bearer CW-SECRET-not-a-real-token", id="unknown-token"),
    ],
)
async def test_requests_without_valid_token_are_unauthenticated(
    target: Target, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    async with httpx.AsyncClient(base_url=target.url, headers=headers) as client:
        response = await client.get(RUNNERS)
    assert_status(response, 401, 16)


async def test_user_token_cannot_use_runner_endpoints(target: Target) -> None:
    if not target.user_token:
        pytest.skip("set COREWEAVE_API_USER_TOKEN to a SANDBOX_USER-only token")
    async with httpx.AsyncClient(
        base_url=target.url, headers={"Authorization": f"Bearer {target.user_token}"}
    ) as c:
        response = await c.get(RUNNERS)
    assert_status(response, 403, 7)


# -- life cycle (simulator controls) --------------------------------------------------------------


async def test_install_reaches_ready_and_connected(
    api: httpx.AsyncClient, runners: Runners, control: Control
) -> None:
    created = await runners.create()
    url = f"{RUNNERS}/{created['identity']['runnerId']}"
    assert created["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"
    await control.advance(2)
    assert (await api.get(url)).json()["installStatus"] == "RUNNER_INSTALL_STATUS_PROVISIONING"
    await control.advance(5)
    got = (await api.get(url)).json()
    assert got["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert got["connectionStatus"] == "RUNNER_CONNECTION_STATUS_CONNECTED"
    assert got["activeRevision"] == got["targetRevision"] == 1
    assert got["activeConfigVersion"]
    assert got["lastHeartbeatTime"]


async def test_install_progresses_in_real_time_with_tiny_timings(
    api: httpx.AsyncClient, runners: Runners, control: Control
) -> None:
    await control.call("POST", "/timings", {"installSeconds": 0.02, "provisionSeconds": 0.02})
    created = await runners.create()
    deadline = time.monotonic() + 5
    status = created["installStatus"]
    while status != "RUNNER_INSTALL_STATUS_READY" and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        status = (await api.get(f"{RUNNERS}/{created['identity']['runnerId']}")).json()["installStatus"]
    assert status == "RUNNER_INSTALL_STATUS_READY"


async def test_spec_change_rolls_out_a_new_revision(
    api: httpx.AsyncClient, runners: Runners, control: Control
) -> None:
    created = await runners.create()
    runner_id = created["identity"]["runnerId"]
    await control.advance(7)
    patched = (await _patch(api, runner_id, {"spec": {"imagePull": {}}}, "spec.imagePull")).json()
    assert (patched["activeRevision"], patched["targetRevision"], patched["rolloutInProgress"]) == (
        1,
        2,
        True,
    )
    await control.advance(3)
    got = (await api.get(f"{RUNNERS}/{runner_id}")).json()
    assert (got["activeRevision"], got.get("rolloutInProgress", False)) == (2, False)


async def test_new_release_can_be_applied(api: httpx.AsyncClient, runners: Runners, control: Control) -> None:
    created = await runners.create()
    runner_id = created["identity"]["runnerId"]
    await control.advance(7)
    release = await control.call("POST", "/releases", {"channel": "RELEASE_CHANNEL_STABLE"})
    assert (await api.get(f"{RUNNERS}/{runner_id}")).json()["updateAvailable"] is True
    applied = await api.post(f"{RUNNERS}/{runner_id}:applyAvailableUpdate")
    assert applied.status_code == 200
    assert applied.json()["rolloutInProgress"] is True
    await control.advance(3)
    assert (await api.get(f"{RUNNERS}/{runner_id}")).json()["activeConfigVersion"] == release["version"]


async def test_deletion_finishes_and_frees_the_cluster(
    api: httpx.AsyncClient, runners: Runners, control: Control
) -> None:
    created = await runners.create()
    runner_id = created["identity"]["runnerId"]
    await api.delete(f"{RUNNERS}/{runner_id}")
    body = runners.body()
    body["identity"]["clusterId"] = created["identity"]["clusterId"]
    assert_status(await runners.post(body), 409, 6)
    await control.advance(5)
    assert_status(await api.get(f"{RUNNERS}/{runner_id}"), 404, 5)
    assert (await runners.post(body)).status_code == 200


async def test_install_failure_is_reported_and_recovers(
    api: httpx.AsyncClient, runners: Runners, control: Control
) -> None:
    runner_id = (await runners.create())["identity"]["runnerId"]
    failed = await control.call("POST", f"/runners/{runner_id}/installFailure", {"message": "quota"})
    assert failed["installStatus"] == "RUNNER_INSTALL_STATUS_FAILED"
    assert (await api.get(f"{RUNNERS}/{runner_id}")).json()["installError"]["message"] == "quota"
    await control.call("DELETE", f"/runners/{runner_id}/installFailure")
    await control.advance(5)
    got = (await api.get(f"{RUNNERS}/{runner_id}")).json()
    assert got["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert "installError" not in got


# -- transport faults (simulator controls) -------------------------------------------------------


async def test_rate_limited_response_has_retry_after(api: httpx.AsyncClient, control: Control) -> None:
    await control.call("POST", "/faults", {"endpoint": "list", "status": 429, "retryAfter": 3})
    response = await api.get(RUNNERS)
    assert_status(response, 429, 8)
    assert response.headers["Retry-After"] == "3"
    assert detail(response, "RetryInfo")["retryDelay"] == "3s"


@pytest.mark.parametrize(
    ("status", "code"), [pytest.param(503, 14, id="unavailable"), pytest.param(500, 13, id="internal")]
)
async def test_injected_server_errors_are_status_bodies(
    api: httpx.AsyncClient, control: Control, status: int, code: int
) -> None:
    await control.call("POST", "/faults", {"endpoint": "*", "status": status})
    assert_status(await api.get(RUNNERS), status, code)
    assert (await api.get(RUNNERS)).status_code == 200


async def test_dropped_connection_is_a_transport_error(api: httpx.AsyncClient, control: Control) -> None:
    await control.call("POST", "/faults", {"endpoint": "list", "kind": "drop"})
    with pytest.raises(httpx.TransportError):
        await api.get(RUNNERS)
    counts = (await control.call("GET", "/requests"))["counts"]
    assert counts[f"GET {RUNNERS} 0"] == 1
