"""The real CloudClient against the simulator over real HTTP: every endpoint and documented behaviour.

The simulator runs in-process on 127.0.0.1:0 (aiohttp) and the client talks to it through httpx, so
requests, status bodies, headers, dropped connections and timeouts are real. Asynchronous life-cycle
steps are driven with the simulator's clock (`advance_clock`), never by waiting; requests are counted
in the simulator's request log. Retry back-off uses an injected clock and sleep that record every
wait, except in the one test that proves a real Retry-After pause.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runner_operator.cloud import errors, models
from runner_operator.cloud.budget import RequestBudget
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.diff import SPEC_PATHS, compute_update
from runner_operator.cloud.retrying import RetryPolicy
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, DEV_USER_TOKEN, SimulatorConfig, Timings
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.server import RunningServer, serve
from tests.clock import FakeClock

INSTALL = Timings()  # contract defaults; tests move the simulator's clock instead of sleeping
INSTALLED_AFTER = INSTALL.install_seconds + INSTALL.provision_seconds + 0.001
READY = models.InstallStatus.READY
DELETING = models.InstallStatus.DELETING


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    async with await serve(SimulatorConfig(timings=INSTALL, log_requests=False)) as running:
        yield running


@pytest.fixture
def sim(server: RunningServer) -> Simulator:
    return server.simulator


def roomy_budget() -> RequestBudget:
    """A private budget large enough never to throttle these tests (the shared one allows 10/s)."""
    return RequestBudget(rate=10_000, burst=10_000)


@pytest.fixture
async def cloud(server: RunningServer) -> AsyncIterator[CloudClient]:
    async with CloudClient(server.url, DEV_ADMIN_TOKEN, timeout=5.0, budget=roomy_budget()) as client:
        yield client


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def retrying(server: RunningServer, clock: FakeClock) -> AsyncIterator[CloudClient]:
    """A client whose back-off sleeps are recorded instead of waited (fixed jitter 0.5)."""
    client = CloudClient(
        server.url,
        DEV_ADMIN_TOKEN,
        timeout=5.0,
        budget=RequestBudget(rate=10_000, burst=10_000, clock=clock),
        sleep=clock.sleep,
        clock=clock,
        jitter=lambda: 0.5,
    )
    async with client:
        yield client


# -- helpers --------------------------------------------------------------------------------------


def new_id(prefix: str = "cc") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def runner(runner_id: str | None = None, **fields: Any) -> models.CloudRunner:
    """A minimal runner for create: identity plus the explicit empty policy, then `fields` (camelCase)."""
    body: dict[str, Any] = {
        "identity": {
            "runnerId": runner_id or new_id(),
            "zone": "us-east-04a",
            "clusterId": str(uuid.uuid4()),
        },
        "policy": {},
    }
    body.update(fields)
    return models.parse_runner(body)


def rich_body(runner_id: str) -> dict[str, Any]:
    """Every spec field and a policy using every constraint group, with deliberately unusual spellings."""
    return {
        "identity": {
            "runnerId": runner_id,
            "zone": "US-East-04A",  # the client lower-cases it
            "clusterId": str(uuid.uuid4()),
            "runnerGroupId": "batch",
        },
        "displayName": "Rich runner",
        "spec": {
            "releaseChannel": "RELEASE_CHANNEL_RAPID",
            "maintenancePolicy": {
                "windows": [{"cron": "0 2 * * SAT", "durationSeconds": "10800"}],
                "exclusions": [
                    {
                        "startTime": "2026-12-20T01:00:00+01:00",
                        "endTime": "2027-01-04T00:00:00.000Z",
                        "reason": "freeze",
                    }
                ],
            },
            "overrides": {
                "nodeSelector": {"node.coreweave.cloud/class": "cpu"},
                "tolerations": [
                    {"key": "dedicated", "operator": "Equal", "value": "runner", "effect": "NoSchedule"},
                    {"operator": "Exists"},
                ],
                "resources": {
                    "cpuRequest": "1000m",
                    "memoryRequest": "2048Mi",
                    "cpuLimit": "4",
                    "memoryLimit": "8Gi",
                },
                "annotations": {"example.com/owner": "platform"},
                "labels": {"team": "ml"},
                "env": {"LOG_LEVEL": "info", "EMPTY": ""},
                "args": ["--b", "--a"],
                "scaling": {"replicas": 2, "autoscalingEnabled": True, "minReplicas": 1, "maxReplicas": "3"},
                "cpuRuntimeClass": "kata",
                "gpuRuntimeClass": "kata-nvidia",
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": {"app": "runner"}},
                                },
                            }
                        ]
                    }
                },
            },
            "enforceResourceLimits": True,
            "volumes": {"enabled": True, "csiDriverAllowlist": ["csi.vastdata.com"]},
            "tenantMetrics": {"enabled": True, "image": "registry.example.com/metrics:1"},
            "imagePull": {"policy": "SANDBOX_IMAGE_PULL_POLICY_ALWAYS"},
            "dataPlane": {
                "loadBalancer": {
                    "scope": "RUNNER_DATA_PLANE_SERVICE_SCOPE_PRIVATE",
                    "loadBalancerClass": "service.k8s.aws/nlb",
                    "annotations": {"a": "b"},
                    "sourceRanges": ["10.0.0.0/8"],
                    "externalTrafficPolicy": "RUNNER_DATA_PLANE_EXTERNAL_TRAFFIC_POLICY_LOCAL",
                    "hostname": "runner.example.com",
                }
            },
        },
        "policy": {
            "displayName": "Rich policy",
            "base": {"metadata": {"labels": {"team": "ml"}}, "spec": {"priorityClassName": "sandbox"}},
            "constraints": {
                "resources": {
                    "minCpu": "100m",
                    "defaultCpu": "1000m",
                    "maxCpu": "8",
                    "minMemory": "128Mi",
                    "defaultMemory": "2Gi",
                    "maxMemory": "32768Mi",
                    "maxGpuCount": 0,  # presence matters: 0 forbids GPUs; sent as a number, read as "0"
                    "cpuCeiling": "16000m",
                    "memoryCeiling": "48Gi",
                    "requireLimits": True,
                },
                "image": {"allowedRegistries": ["ghcr.io/example"], "allowedImages": ["python:3.12-slim"]},
                "network": {
                    "allowedEgress": [
                        {"httpsHostname": "*.pypi.org"},
                        {"httpsHostname": "*", "httpsHostnameExcept": ["evil.example.com"]},
                        {
                            "cidr": {"cidr": "10.0.0.0/8", "except": ["10.96.0.0/12"]},
                            "ports": [{"port": 5432}, {"protocol": "TCP", "port": 8000, "endPort": 8099}],
                        },
                        {"tenant": "TENANT_SCOPE_SAME_ORG"},
                        {"selector": {"podLabels": {"app": "db"}, "namespaceLabels": {"team": "ml"}}},
                        {"any": True, "ports": [{"protocol": "UDP", "port": 53}]},
                    ],
                    "defaultEgress": [{"tenant": "TENANT_SCOPE_SAME_USER"}],
                    "denyHttpsHostnameRules": False,
                    "dnsEgress": "DNS_EGRESS_MODE_DENY",
                    "allowedIngress": [{"cidr": {"cidr": "203.0.113.0/24"}, "ports": [{"port": 8443}]}],
                    "defaultIngress": [{"tenant": "TENANT_SCOPE_SAME_ORG"}],
                },
                "security": {
                    "allowPrivileged": False,
                    "allowedCapabilities": ["NET_ADMIN"],
                    "allowedSeccompProfiles": ["RuntimeDefault"],
                    "allowedRuntimeClasses": ["kata", "kata-nvidia"],
                    "defaultCpuRuntimeClass": "kata",
                    "defaultGpuRuntimeClass": "kata-nvidia",
                },
                "instance": {"allowedInstanceTypes": ["cd-gp-i64-erapids"]},
                "lifecycle": {"defaultLifetimeSeconds": "3600"},
                "metadata": {"deniedAnnotationPrefixes": ["internal.example.com/"], "maxAnnotationCount": 32},
                "volumes": {"allowedMedia": ["STORAGE_MEDIUM_DISK"], "maxSize": "100Gi"},
            },
            "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["198.51.100.0/24", "2001:db8::/32"]}},
        },
    }


async def create(cloud: CloudClient, body: models.CloudRunner | None = None) -> models.CloudRunner:
    return await cloud.create(body or runner(), request_id=str(uuid.uuid4()))


def calls(sim: Simulator, endpoint: str) -> list[int]:
    """HTTP statuses of the logged calls of `endpoint`, in order (0 = connection dropped)."""
    return [e.status for e in sim.log.entries if e.endpoint == endpoint]


# -- create / get / find ---------------------------------------------------------------------------


async def test_create_returns_the_stored_runner_with_server_defaults(cloud: CloudClient) -> None:
    identity = {"runnerId": new_id(), "zone": "US-EAST-04A", "clusterId": str(uuid.uuid4())}
    desired = runner(identity=identity, displayName="East")
    created = await create(cloud, desired)
    assert created.runner_id == desired.runner_id
    assert created.identity is not None
    assert created.identity.zone == "us-east-04a"
    assert created.identity.runner_group_id == "default"
    assert created.identity.cluster_name
    assert created.spec is not None
    assert created.spec.release_channel == models.ReleaseChannel.STABLE
    assert created.policy == models.CloudPolicy()
    assert created.etag
    assert created.install_status == models.InstallStatus.PENDING
    assert created.create_time is not None


async def test_get_and_find_return_what_create_stored(cloud: CloudClient) -> None:
    created = await create(cloud, runner(displayName="East"))
    assert created.runner_id
    got = await cloud.get(created.runner_id)
    assert (got.identity, got.display_name, got.etag) == (created.identity, "East", created.etag)
    assert await cloud.find(created.runner_id) == got


async def test_unknown_runner_is_not_found_by_get_and_none_by_find(cloud: CloudClient) -> None:
    missing = new_id("missing")
    with pytest.raises(errors.NotFound) as caught:
        await cloud.get(missing)
    assert caught.value.http_status == 404
    assert await cloud.find(missing) is None


async def test_replayed_create_with_the_same_request_id_returns_the_same_runner(
    cloud: CloudClient, sim: Simulator
) -> None:
    body, key = runner(), str(uuid.uuid4())
    first = await cloud.create(body, key)
    again = await cloud.create(body, key)
    assert again.runner_id == first.runner_id
    assert (again.etag, again.create_time) == (first.etag, first.create_time)
    assert len(sim) == 1
    assert calls(sim, "create") == [200, 200]


async def test_reused_request_id_with_a_different_body_is_invalid_argument(cloud: CloudClient) -> None:
    key = str(uuid.uuid4())
    await cloud.create(runner(), key)
    with pytest.raises(errors.InvalidArgument) as caught:
        await cloud.create(runner(), key)
    assert [f for f, _ in caught.value.field_violations] == ["request_id"]


async def test_create_needs_a_request_id(cloud: CloudClient, sim: Simulator) -> None:
    with pytest.raises(ValueError, match="request_id"):
        await cloud.create(runner(), "")
    assert calls(sim, "create") == []


# -- list ------------------------------------------------------------------------------------------


async def test_iter_runners_follows_page_tokens_over_several_pages(
    cloud: CloudClient, sim: Simulator
) -> None:
    made = sorted([(await create(cloud, runner(f"page-{i:03d}"))).runner_id or "" for i in range(120)])
    sim.log.clear()
    seen = [r.runner_id async for r in cloud.iter_runners(page_size=50)]
    assert seen == made
    assert calls(sim, "list") == [200, 200, 200]  # 50 + 50 + 20, following nextPageToken


async def test_iter_runners_with_the_server_default_page_size(cloud: CloudClient, sim: Simulator) -> None:
    for i in range(3):
        await create(cloud, runner(f"default-page-{i}"))
    assert [r.runner_id async for r in cloud.iter_runners()] == [f"default-page-{i}" for i in range(3)]


async def test_iter_runners_of_an_empty_organisation_yields_nothing(cloud: CloudClient) -> None:
    assert [r async for r in cloud.iter_runners(page_size=5)] == []


# -- update (masks from diff.compute_update) ---------------------------------------------------------


def changed(observed: models.CloudRunner, **fields: Any) -> models.CloudRunner:
    return observed.model_copy(update=fields)


def spec_with(observed: models.CloudRunner, **fields: Any) -> models.CloudRunner:
    assert observed.spec is not None
    return changed(observed, spec=observed.spec.model_copy(update=fields))


async def apply(cloud: CloudClient, desired: models.CloudRunner, observed: models.CloudRunner) -> Any:
    """Plan with compute_update, send it, and prove the result needs no further update."""
    update = compute_update(desired, observed)
    assert update is not None
    assert observed.runner_id
    result = await cloud.update(observed.runner_id, update.body, update.mask, etag=update.etag)
    assert compute_update(desired, result) is None
    assert compute_update(desired, await cloud.get(observed.runner_id)) is None
    return update, result


async def test_display_name_change_masks_only_display_name(cloud: CloudClient) -> None:
    observed = await create(cloud, runner(displayName="Old"))
    update, result = await apply(cloud, changed(observed, display_name="New"), observed)
    assert update.mask == ("displayName",)
    assert update.etag is None
    assert result.display_name == "New"
    assert result.etag == observed.etag


async def test_display_name_removal_clears_it(cloud: CloudClient) -> None:
    observed = await create(cloud, runner(displayName="Old"))
    update, result = await apply(cloud, changed(observed, display_name=None), observed)
    assert update.mask == ("displayName",)
    assert result.display_name is None


async def test_group_removed_from_desired_resets_to_default(cloud: CloudClient) -> None:
    observed = await create(
        cloud,
        runner(identity={"runnerId": new_id(), "zone": "z1", "clusterId": "c1", "runnerGroupId": "blue"}),
    )
    assert observed.identity is not None
    assert observed.identity.runner_group_id == "blue"
    desired = changed(observed, identity=observed.identity.model_copy(update={"runner_group_id": None}))
    update, result = await apply(cloud, desired, observed)
    assert update.mask == ("identity.runnerGroupId",)
    assert result.identity.runner_group_id == "default"


NEW_SPEC_VALUES: dict[str, Any] = {
    "release_channel": models.ReleaseChannel.RAPID,
    "maintenance_policy": models.CloudMaintenancePolicy(
        windows=(models.CloudMaintenanceWindow(cron="30 3 * * SUN", duration_seconds=7200),)
    ),
    "overrides": models.CloudOverrides(
        resources=models.CloudRunnerResources(cpu_request="500m", cpu_limit="2"), args=("--verbose",)
    ),
    "enforce_resource_limits": True,
    "volumes": models.VolumesConfig(enabled=True),
    "tenant_metrics": models.CloudTenantMetrics(enabled=True, image="registry.example.com/m:2"),
    "image_pull": models.CloudImagePull(policy=models.ImagePullPolicy.ALWAYS),
    "data_plane": models.CloudDataPlane(
        custom=models.CloudCustomExposure(advertised_uri="https://runner.example.com:443")
    ),
}


@pytest.mark.parametrize("name", [pytest.param(name, id=f"sets-{path}") for name, path in SPEC_PATHS.items()])
async def test_each_spec_field_change_masks_only_that_field(
    cloud: CloudClient, sim: Simulator, name: str
) -> None:
    assert set(NEW_SPEC_VALUES) == set(SPEC_PATHS), "a spec field has no test value"
    observed = await create(cloud)
    update, result = await apply(cloud, spec_with(observed, **{name: NEW_SPEC_VALUES[name]}), observed)
    assert update.mask == (SPEC_PATHS[name],)
    assert update.etag is None
    assert result.target_revision == (observed.target_revision or 0) + 1
    assert result.etag == observed.etag  # spec writes leave the policy revision alone
    assert calls(sim, "update") == [200]


REMOVABLE: dict[str, dict[str, Any]] = {
    "maintenance_policy": {
        "maintenancePolicy": {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 3600}]}
    },
    "overrides": {"overrides": {"labels": {"team": "ml"}}},
    "enforce_resource_limits": {"enforceResourceLimits": True},
    "volumes": {"volumes": {"enabled": True}},
    "tenant_metrics": {"tenantMetrics": {"enabled": True}},
    "image_pull": {"imagePull": {"policy": "SANDBOX_IMAGE_PULL_POLICY_ALWAYS"}},
    "data_plane": {"dataPlane": {"disabled": {}}},
    "release_channel": {"releaseChannel": "RELEASE_CHANNEL_RAPID"},
}


@pytest.mark.parametrize("name", [pytest.param(name, id=f"resets-{SPEC_PATHS[name]}") for name in REMOVABLE])
async def test_removed_spec_field_is_reset_by_a_masked_absent_field(cloud: CloudClient, name: str) -> None:
    observed = await create(cloud, runner(spec=REMOVABLE[name]))
    assert observed.spec is not None
    assert getattr(observed.spec, name) is not None
    update, result = await apply(cloud, spec_with(observed, **{name: None}), observed)
    assert update.mask == (SPEC_PATHS[name],)
    assert update.body.spec is None or getattr(update.body.spec, name) is None
    if name == "release_channel":
        assert result.spec.release_channel == models.ReleaseChannel.STABLE  # the server default
    else:
        assert getattr(result.spec, name) is None


async def test_policy_change_carries_the_etag_and_rotates_it(cloud: CloudClient) -> None:
    observed = await create(cloud, runner(policy={"displayName": "old", "constraints": {"image": {}}}))
    desired = changed(observed, policy=models.CloudPolicy(display_name="new"))
    update, result = await apply(cloud, desired, observed)
    assert update.mask == ("policy",)
    assert update.etag == observed.etag
    assert result.policy == models.CloudPolicy(display_name="new")
    assert result.etag != observed.etag
    assert result.target_revision == observed.target_revision  # policy is delivered live


async def test_several_changes_go_in_one_sorted_mask(cloud: CloudClient, sim: Simulator) -> None:
    observed = await create(cloud)
    desired = spec_with(observed, enforce_resource_limits=True, volumes=models.VolumesConfig(enabled=True))
    desired = changed(desired, display_name="Both", policy=models.CloudPolicy(display_name="p"))
    update, _ = await apply(cloud, desired, observed)
    assert update.mask == ("displayName", "policy", "spec.enforceResourceLimits", "spec.volumes")
    assert calls(sim, "update") == [200]


async def test_stale_etag_is_stale_etag_and_never_retried(cloud: CloudClient, sim: Simulator) -> None:
    observed = await create(cloud, runner(policy={"displayName": "v1"}))
    assert observed.runner_id
    sim.edit_out_of_band(observed.runner_id, {"policy": {"displayName": "someone else"}})
    update = compute_update(changed(observed, policy=models.CloudPolicy(display_name="mine")), observed)
    assert update is not None
    sim.log.clear()
    with pytest.raises(errors.StaleEtag) as caught:
        await cloud.update(observed.runner_id, update.body, update.mask, etag=update.etag)
    assert caught.value.http_status == 400
    assert caught.value.code == "FAILED_PRECONDITION"
    assert calls(sim, "update") == [400]  # surfaced, not re-read and resent
    assert len(sim.log.entries) == 1
    fresh = await cloud.get(observed.runner_id)
    assert fresh.policy == models.CloudPolicy(display_name="someone else")


async def test_policy_update_without_etag_is_stale_etag(cloud: CloudClient, sim: Simulator) -> None:
    observed = await create(cloud)
    assert observed.runner_id
    with pytest.raises(errors.StaleEtag):
        await cloud.update(observed.runner_id, models.CloudRunner(policy=models.CloudPolicy()), ["policy"])
    assert calls(sim, "update") == [400]


async def test_update_of_unknown_runner_is_not_found(cloud: CloudClient) -> None:
    with pytest.raises(errors.NotFound):
        await cloud.update(new_id("missing"), models.CloudRunner(display_name="x"), ["displayName"])


async def test_update_with_an_immutable_path_is_invalid_argument(cloud: CloudClient) -> None:
    observed = await create(cloud)
    assert observed.runner_id
    with pytest.raises(errors.InvalidArgument):
        await cloud.update(observed.runner_id, {"identity": {"zone": "us-west-01a"}}, ["identity.zone"])


async def test_update_needs_a_mask(cloud: CloudClient, sim: Simulator) -> None:
    with pytest.raises(ValueError, match="mask"):
        await cloud.update("anything", models.CloudRunner(), [])
    assert calls(sim, "update") == []


RESPELLED: dict[object, object] = {
    "1000m": "1",
    "2048Mi": "2Gi",
    "32768Mi": "32Gi",
    "16000m": "16",
    "100m": "0.1",
    "128Mi": "134217728",
    "8Gi": "8192Mi",
    "10800": 10800,
    "3600": 3600,
    "2026-12-20T01:00:00+01:00": "2026-12-20T00:00:00Z",
    "2027-01-04T00:00:00.000Z": "2027-01-04T00:00:00Z",
}


def respelled(value: Any) -> Any:
    """The same runner written differently: other quantity spellings, numbers vs strings, time formats."""
    if isinstance(value, dict):
        out = {k: respelled(v) for k, v in value.items()}
        if out.get("maxGpuCount") == 0:
            out["maxGpuCount"] = "0"
        return out
    if isinstance(value, list):
        return [respelled(v) for v in value]
    return RESPELLED.get(value, value) if isinstance(value, str) else value


@pytest.mark.parametrize(
    "spelling",
    [pytest.param("as-sent", id="desired-as-sent"), pytest.param("respelled", id="desired-respelled")],
)
async def test_semantic_no_op_round_trip_of_a_rich_runner(
    cloud: CloudClient, sim: Simulator, spelling: str
) -> None:
    body = rich_body(new_id("rich"))
    sent = models.parse_runner(body)
    desired = sent if spelling == "as-sent" else models.parse_runner(respelled(body))
    assert models.to_wire(desired) != models.to_wire(sent) or spelling == "as-sent"
    created = await create(cloud, sent)
    assert compute_update(desired, created) is None
    sim.advance_clock(INSTALLED_AFTER)  # installed and connected: the policy is still the one sent
    observed = await cloud.get(created.runner_id or "")
    assert observed.install_status == READY
    assert compute_update(desired, observed) is None
    listed = [r async for r in cloud.iter_runners()]
    assert [compute_update(desired, r) for r in listed] == [None]
    assert observed.policy is not None
    assert observed.policy.constraints is not None
    assert observed.policy.constraints.resources is not None
    assert observed.policy.constraints.resources.max_gpu_count == 0  # presence kept: GPUs forbidden
    assert observed.identity is not None
    assert observed.identity.zone == "us-east-04a"


async def test_a_real_change_in_a_rich_runner_is_still_seen(cloud: CloudClient) -> None:
    body = rich_body(new_id("rich"))
    observed = await create(cloud, models.parse_runner(body))
    body["spec"]["overrides"]["resources"]["cpuRequest"] = "1001m"
    del body["policy"]["constraints"]["resources"]["maxGpuCount"]  # no cap is not "0 GPUs"
    update, result = await apply(cloud, models.parse_runner(body), observed)
    assert update.mask == ("policy", "spec.overrides")
    assert result.policy.constraints.resources.max_gpu_count is None


# -- delete ----------------------------------------------------------------------------------------


async def test_delete_is_deleting_then_gone(cloud: CloudClient, sim: Simulator) -> None:
    created = await create(cloud)
    runner_id = created.runner_id or ""
    await cloud.delete(runner_id)
    assert (await cloud.get(runner_id)).install_status == DELETING
    await cloud.delete(runner_id)  # repeating while deleting is harmless
    sim.advance_clock(INSTALL.delete_seconds + 0.001)
    assert await cloud.find(runner_id) is None
    with pytest.raises(errors.NotFound):
        await cloud.get(runner_id)
    await cloud.delete(runner_id)  # allowMissing by default
    assert calls(sim, "delete") == [200, 200, 200]


async def test_delete_of_unknown_runner_without_allow_missing_is_not_found(
    cloud: CloudClient, sim: Simulator
) -> None:
    with pytest.raises(errors.NotFound):
        await cloud.delete(new_id("missing"), allow_missing=False)
    assert calls(sim, "delete") == [404]


async def test_deleting_runner_keeps_its_cluster_until_gone(cloud: CloudClient, sim: Simulator) -> None:
    created = await create(cloud)
    assert created.identity is not None
    await cloud.delete(created.runner_id or "")
    again = runner(identity={"runnerId": new_id(), "zone": "z", "clusterId": created.identity.cluster_id})
    with pytest.raises(errors.AlreadyExists):
        await create(cloud, again)
    sim.advance_clock(INSTALL.delete_seconds + 0.001)
    assert (await create(cloud, again)).runner_id == again.runner_id


async def test_update_of_a_deleting_runner_is_failed_precondition(cloud: CloudClient) -> None:
    created = await create(cloud)
    await cloud.delete(created.runner_id or "")
    with pytest.raises(errors.FailedPrecondition) as caught:
        await cloud.update(created.runner_id or "", models.CloudRunner(display_name="x"), ["displayName"])
    assert not isinstance(caught.value, errors.StaleEtag)


async def test_policy_update_of_a_deleting_runner_is_not_a_stale_etag(cloud: CloudClient) -> None:
    created = await create(cloud)
    await cloud.delete(created.runner_id or "")
    with pytest.raises(errors.FailedPrecondition) as caught:
        await cloud.update(
            created.runner_id or "",
            models.CloudRunner(policy=models.CloudPolicy()),
            ["policy"],
            etag=created.etag,
        )
    assert not isinstance(caught.value, errors.StaleEtag)


# -- applyAvailableUpdate -------------------------------------------------------------------------


async def test_apply_available_update_without_one_is_failed_precondition(
    cloud: CloudClient, sim: Simulator
) -> None:
    created = await create(cloud)
    sim.advance_clock(INSTALLED_AFTER)
    with pytest.raises(errors.FailedPrecondition) as caught:
        await cloud.apply_available_update(created.runner_id or "")
    assert not isinstance(caught.value, errors.StaleEtag)
    assert caught.value.http_status == 400
    assert calls(sim, "applyAvailableUpdate") == [400]  # not retried


async def test_apply_available_update_after_a_release_rolls_it_out(
    cloud: CloudClient, sim: Simulator
) -> None:
    created = await create(cloud)
    runner_id = created.runner_id or ""
    sim.advance_clock(INSTALLED_AFTER)
    before = await cloud.get(runner_id)
    assert before.install_status == READY
    assert not before.update_available  # false is omitted on the wire
    version = sim.publish_release(models.ReleaseChannel.STABLE)
    assert (await cloud.get(runner_id)).update_available is True
    applied = await cloud.apply_available_update(runner_id)
    assert applied.rollout_in_progress is True
    assert applied.target_revision == (before.target_revision or 0) + 1
    sim.advance_clock(INSTALL.rollout_seconds + 0.001)
    done = await cloud.get(runner_id)
    assert done.active_config_version == version
    assert not done.update_available
    assert not done.rollout_in_progress


async def test_apply_available_update_of_unknown_runner_is_not_found(cloud: CloudClient) -> None:
    with pytest.raises(errors.NotFound):
        await cloud.apply_available_update(new_id("missing"))


# -- errors mapped from the simulator's real responses -------------------------------------------------


@pytest.mark.parametrize(
    ("token", "error", "status"),
    [
        pytest.param("CW-SECRET-wrong", errors.Unauthenticated, 401, id="wrong-token-unauthenticated"),
        pytest.param(DEV_USER_TOKEN, errors.PermissionDenied, 403, id="user-token-permission-denied"),
    ],
)
async def test_bad_credentials_are_classified_and_not_retried(
    server: RunningServer, token: str, error: type[errors.CloudError], status: int
) -> None:
    async with CloudClient(server.url, token, budget=roomy_budget()) as client:
        with pytest.raises(error) as caught:
            await client.get("anything")
        assert caught.value.http_status == status
        assert token not in str(caught.value)
        assert token not in repr(client)
        with pytest.raises(error):
            [r async for r in client.iter_runners()]
    assert calls(server.simulator, "get") == [status]
    assert calls(server.simulator, "list") == [status]


@pytest.mark.parametrize(
    ("fields", "violation"),
    [
        pytest.param(
            {"identity": {"runnerId": "Not_A_Label", "zone": "z", "clusterId": "c"}},
            "managed_runner.identity.runner_id",
            id="runner-id-not-a-label",
        ),
        pytest.param(
            {"spec": {"dataPlane": {}}},
            "managed_runner.spec.data_plane",
            id="data-plane-without-exposure",
        ),
        pytest.param(
            {"policy": {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 2_592_001}}}},
            "managed_runner.policy.constraints.lifecycle.default_lifetime_seconds",
            id="lifetime-above-30-days",
        ),
        pytest.param(
            {"policy": {"constraints": {"resources": {"defaultCpu": "2", "maxCpu": "1000m"}}}},
            "managed_runner.policy.constraints.resources.default_cpu",
            id="default-cpu-above-max",
        ),
    ],
)
async def test_invalid_create_is_invalid_argument_with_field_violations(
    cloud: CloudClient, sim: Simulator, fields: dict[str, Any], violation: str
) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        await create(cloud, runner(**fields))
    assert caught.value.http_status == 400
    assert violation in [f for f, _ in caught.value.field_violations]
    assert all(description for _, description in caught.value.field_violations)
    assert calls(sim, "create") == [400]


@pytest.mark.parametrize(
    "same", [pytest.param("runner_id", id="runner-id-taken"), pytest.param("cluster_id", id="cluster-taken")]
)
async def test_second_runner_is_already_exists(cloud: CloudClient, sim: Simulator, same: str) -> None:
    first = await create(cloud)
    assert first.identity is not None
    second = runner()
    assert second.identity is not None
    second = changed(
        second, identity=second.identity.model_copy(update={same: getattr(first.identity, same)})
    )
    with pytest.raises(errors.AlreadyExists) as caught:
        await create(cloud, second)
    assert caught.value.http_status == 409
    assert first.runner_id
    assert first.runner_id in caught.value.message
    assert calls(sim, "create") == [200, 409]


async def test_rate_limited_retry_waits_retry_after(
    retrying: CloudClient, sim: Simulator, clock: FakeClock
) -> None:
    sim.fail_next("list", 429, retry_after=3)
    assert [r async for r in retrying.iter_runners()] == []
    assert calls(sim, "list") == [429, 200]
    assert 3.0 in clock.sleeps  # the server's Retry-After, not the 0.15 s of our own back-off
    assert sum(clock.sleeps) == pytest.approx(3.0)
    assert retrying.budget.stats.rate_limited == 1


async def test_rate_limited_retry_really_pauses(server: RunningServer, cloud: CloudClient) -> None:
    server.simulator.fail_next("get", 429, retry_after=1)
    created = await create(cloud)
    started = time.monotonic()
    assert (await cloud.get(created.runner_id or "")).runner_id == created.runner_id
    assert time.monotonic() - started >= 0.95
    assert calls(server.simulator, "get") == [429, 200]


async def test_rate_limited_beyond_the_retry_budget_is_rate_limited(
    server: RunningServer, clock: FakeClock
) -> None:
    server.simulator.fail_next("list", 429, times=20, retry_after=30)
    client = CloudClient(
        server.url,
        DEV_ADMIN_TOKEN,
        budget=RequestBudget(clock=clock),
        sleep=clock.sleep,
        clock=clock,
        retry=RetryPolicy(budget=10.0),
    )
    async with client:
        with pytest.raises(errors.RateLimited) as caught:
            [r async for r in client.iter_runners()]
    assert caught.value.retry_after == 30.0
    assert calls(server.simulator, "list") == [429]  # a 30 s wait does not fit a 10 s retry budget


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(503, id="503-unavailable"),
        pytest.param(500, id="500-internal"),
        pytest.param(504, id="504-deadline"),
    ],
)
async def test_server_errors_are_retried_then_succeed(
    retrying: CloudClient, sim: Simulator, clock: FakeClock, status: int
) -> None:
    created = await create(retrying)
    sim.fail_next("get", status, times=2)
    assert (await retrying.get(created.runner_id or "")).runner_id == created.runner_id
    assert calls(sim, "get") == [status, status, 200]
    assert clock.sleeps == pytest.approx([0.15, 0.3])  # jittered exponential back-off, jitter fixed at 0.5


async def test_persistent_server_errors_give_up_as_unavailable(retrying: CloudClient, sim: Simulator) -> None:
    sim.fail_next("get", 503, times=50)
    with pytest.raises(errors.Unavailable) as caught:
        await retrying.get("anything")
    assert caught.value.http_status == 503
    assert 1 < len(calls(sim, "get")) <= RetryPolicy().max_attempts


async def test_unimplemented_is_not_retried(retrying: CloudClient, sim: Simulator) -> None:
    sim.fail_next("get", 501)
    with pytest.raises(errors.Unimplemented) as caught:
        await retrying.get("anything")
    assert caught.value.http_status == 501
    assert calls(sim, "get") == [501]


async def test_dropped_connection_is_retried(retrying: CloudClient, sim: Simulator, clock: FakeClock) -> None:
    created = await create(retrying)
    sim.drop_next("get")
    assert (await retrying.get(created.runner_id or "")).runner_id == created.runner_id
    assert calls(sim, "get") == [0, 200]
    assert len(clock.sleeps) == 1


async def test_dropped_create_is_retried_with_the_same_request_id(
    retrying: CloudClient, sim: Simulator
) -> None:
    sim.drop_next("create")
    created = await create(retrying)
    assert calls(sim, "create") == [0, 200]
    assert len(sim) == 1
    assert (await retrying.get(created.runner_id or "")).etag == created.etag


async def test_hang_longer_than_the_client_timeout_is_unavailable(server: RunningServer) -> None:
    server.simulator.hang_next("get", times=1, seconds=30)
    client = CloudClient(
        server.url, DEV_ADMIN_TOKEN, timeout=0.3, retry=RetryPolicy(max_attempts=1), budget=roomy_budget()
    )
    started = time.monotonic()
    async with client:
        with pytest.raises(errors.Unavailable) as caught:
            await client.get("anything")
    assert time.monotonic() - started < 5
    assert caught.value.code == "DEADLINE_EXCEEDED"
    assert type(caught.value) is errors.Unavailable


async def test_hang_then_retry_succeeds(server: RunningServer, clock: FakeClock) -> None:
    client = CloudClient(
        server.url,
        DEV_ADMIN_TOKEN,
        timeout=0.3,
        budget=RequestBudget(rate=10_000, burst=10_000, clock=clock),
        sleep=clock.sleep,
        clock=clock,
    )
    async with client:
        created = await create(client)
        server.simulator.hang_next("get", times=1, seconds=30)
        assert (await client.get(created.runner_id or "")).runner_id == created.runner_id
    assert len(clock.sleeps) == 1
