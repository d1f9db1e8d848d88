"""CloudClient against the in-memory API: endpoints, retries, error surfacing, secrecy."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from runner_operator.cloud import client as client_module
from runner_operator.cloud import errors, models
from runner_operator.cloud.budget import RequestBudget
from runner_operator.cloud.client import CloudClient, runner_from_json
from runner_operator.cloud.models import parse_runner
from runner_operator.cloud.retrying import RetryPolicy
from tests.unit.cloud.fakes import BASE_URL, TOKEN, Body, FakeApi, FakeClock, list_page, runner_json

DESIRED = models.CloudRunner(
    identity=models.RunnerIdentity(runner_id="prod-1", zone="US-EAST-04A", cluster_id="c-1"),
    display_name="Prod",
    policy=models.CloudPolicy(),
    spec=models.RunnerSpec(release_channel=models.ReleaseChannel.RAPID),
    etag="ignored-on-create",
    install_status=models.InstallStatus.READY,
)


# --- endpoints ------------------------------------------------------------------------------------


async def test_create_sends_request_id_lowercase_zone_and_no_output_fields(
    cloud: CloudClient, api: FakeApi
) -> None:
    created = await cloud.create(DESIRED, request_id="req-1")

    request = api.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v1/sandbox/managedRunners")
    assert request.url.params["requestId"] == "req-1"
    body = api.bodies()[0]
    assert body["identity"] == {"runnerId": "prod-1", "zone": "us-east-04a", "clusterId": "c-1"}
    assert body["policy"] == {}
    assert "etag" not in body
    assert "installStatus" not in body
    assert created.identity is not None
    assert created.identity.cluster_name == "prod-east"


async def test_create_requires_a_request_id(cloud: CloudClient, api: FakeApi) -> None:
    with pytest.raises(ValueError, match="request_id"):
        await cloud.create(DESIRED, request_id="")
    assert api.requests == []


async def test_create_retries_reuse_the_same_request_id(cloud: CloudClient, api: FakeApi) -> None:
    api.fail_next(503, code=14)
    await cloud.create(DESIRED, request_id="req-7")
    assert [r.url.params["requestId"] for r in api.requests] == ["req-7", "req-7"]


async def test_get_parses_the_runner(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json(updateAvailable=True, activeRevision="3")
    runner = await cloud.get("prod-1")
    assert runner.runner_id == "prod-1"
    assert runner.update_available is True
    assert runner.active_revision == 3
    assert api.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


async def test_get_missing_raises_not_found_and_find_returns_none(cloud: CloudClient) -> None:
    with pytest.raises(errors.NotFound) as caught:
        await cloud.get("ghost")
    assert caught.value.http_status == 404
    assert caught.value.retryable is False
    assert await cloud.find("ghost") is None


async def test_find_returns_existing_runner(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json()
    found = await cloud.find("prod-1")
    assert found is not None
    assert found.etag == "e1"


async def test_runner_id_is_escaped_in_the_path(cloud: CloudClient, api: FakeApi) -> None:
    await cloud.find("a/b")
    assert api.requests[0].url.raw_path == b"/v1/sandbox/managedRunners/a%2Fb"


async def test_get_without_spec_is_an_incompatible_server(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = {k: v for k, v in runner_json().items() if k != "spec"}
    with pytest.raises(errors.IncompatibleServer) as caught:
        await cloud.get("prod-1")
    assert caught.value.retryable is False
    assert len(api.requests) == 1


async def test_unparsable_runner_is_incompatible_and_hides_the_values(
    cloud: CloudClient, api: FakeApi
) -> None:
    api.runners["prod-1"] = runner_json(activeRevision="not-a-number-SECRETISH")
    with pytest.raises(errors.IncompatibleServer, match="activeRevision") as caught:
        await cloud.get("prod-1")
    assert "SECRETISH" not in str(caught.value)


@pytest.mark.parametrize("list_key", ["managedRunners", "runners"])
async def test_iter_runners_follows_pages(list_key: str, clock: FakeClock) -> None:
    api = FakeApi(page_size=2, list_key=list_key)
    for name in ["c", "a", "e", "b", "d"]:
        api.runners[name] = runner_json(name)
    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(api.handle), clock=clock) as cloud:
        ids = [runner.runner_id async for runner in cloud.iter_runners(page_size=2)]
    assert ids == ["a", "b", "c", "d", "e"]
    assert [r.url.params.get("pageToken") for r in api.requests] == [None, "2", "4"]
    assert {r.url.params["pageSize"] for r in api.requests} == {"2"}


async def test_iter_runners_on_empty_org(cloud: CloudClient) -> None:
    assert [r async for r in cloud.iter_runners()] == []


async def test_iter_runners_stops_on_a_repeated_page_token(clock: FakeClock) -> None:
    def loop(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"managedRunners": [], "nextPageToken": "same"})

    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(loop), clock=clock) as cloud:
        with pytest.raises(errors.IncompatibleServer):
            async for _ in cloud.iter_runners():
                pass


async def test_iter_entries_gives_identities_and_the_entries_as_listed(
    cloud: CloudClient, api: FakeApi
) -> None:
    api.runners["a"] = runner_json("a", displayName="A")
    api.runners["b"] = runner_json("b")
    del api.runners["b"]["spec"]  # unread here: only a pass that asks for it finds out
    listed = [(identity.runner_id, entry) async for identity, entry in cloud.iter_entries()]
    assert listed == [("a", api.runners["a"]), ("b", api.runners["b"])]


async def test_a_number_past_64_bits_in_a_list_is_read_exactly(cloud: CloudClient, api: FakeApi) -> None:
    """Valid JSON that faster parsers refuse: the list is read, and its entries kept, as listed."""
    api.runners["a"] = runner_json("a") | {"someCounter": 2**70}
    listed = [entry async for _, entry in cloud.iter_entries()]
    assert listed[0]["someCounter"] == 2**70


async def test_iter_entries_refuses_an_unreadable_identity(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["a"] = runner_json("a")
    api.runners["a"]["identity"] = "a"
    with pytest.raises(errors.IncompatibleServer, match="identity"):
        async for _ in cloud.iter_entries():
            pass


async def test_a_page_cut_short_is_asked_again_and_each_runner_yielded_once(clock: FakeClock) -> None:
    """Cut after its first piece (TEXT_CHUNK) was given: the page asked again gives only the rest."""
    names = [f"r{i:04d}" for i in range(600)]
    first = list_page(*names, token="2")
    assert len(first) > 2 * client_module.TEXT_CHUNK
    bodies = [Body(first, cut=len(first) * 3 // 4, size=4096), Body(first, size=4096), Body(list_page("d"))]
    given: list[str] = []

    served: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        served.append(request)
        return httpx.Response(200, stream=bodies[len(served) - 1])

    async with CloudClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock, sleep=clock.sleep
    ) as cloud:
        async for identity, _ in cloud.iter_entries():
            given.append(str(identity.runner_id))
            if len(served) == 1:
                first_try = len(given)
    assert given == [*names, "d"]
    assert first_try > 100  # runners were given before the cut: the dedupe is what kept them once
    assert [r.url.params.get("pageToken") for r in served] == [None, None, "2"]
    assert all(body.closed for body in bodies)


class AlwaysCut:
    """Serves a page of two runners whose connection is lost 3 bytes before its end, every time."""

    def __init__(self) -> None:
        self.served: list[Body] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        data = list_page("a", "b")
        self.served.append(Body(data, cut=len(data) - 3))
        return httpx.Response(200, stream=self.served[-1])


async def test_a_page_cut_short_every_time_is_unavailable_without_the_token(clock: FakeClock) -> None:
    serve, policy = AlwaysCut(), RetryPolicy(max_attempts=3)
    served = serve.served
    async with CloudClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock, sleep=clock.sleep, retry=policy
    ) as cloud:
        with pytest.raises(errors.Unavailable, match="cut short") as caught:
            [identity async for identity, _ in cloud.iter_entries()]
    assert len(served) == 3
    assert all(body.closed for body in served)
    assert TOKEN not in str(caught.value)
    # Nothing chained: the transport error, which holds the request and its headers, is dropped.
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


async def test_asking_again_stops_within_the_retry_policys_time_budget(clock: FakeClock) -> None:
    serve = AlwaysCut()
    policy = RetryPolicy(max_attempts=100, budget=1.0)  # backoffs 0.15, 0.3, 0.6 s: the third passes 1 s
    async with CloudClient(
        BASE_URL,
        TOKEN,
        transport=httpx.MockTransport(serve),
        clock=clock,
        sleep=clock.sleep,
        retry=policy,
        jitter=lambda: 0.5,
    ) as cloud:
        with pytest.raises(errors.Unavailable, match="cut short"):
            [identity async for identity, _ in cloud.iter_entries()]
    assert len(serve.served) == 3


async def test_a_page_giving_one_id_twice_gives_it_twice_unless_asked_again(clock: FakeClock) -> None:
    """Only entries a cut page already gave are skipped on the page asked for again."""

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Body(list_page("a", "a")))

    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock) as cloud:
        ids = [identity.runner_id async for identity, _ in cloud.iter_entries()]
    assert ids == ["a", "a"]


async def test_a_list_that_fails_on_an_entry_closes_its_response(clock: FakeClock) -> None:
    entry = runner_json("b")
    del entry["spec"]
    rest = [runner_json(f"c{i}") for i in range(1000)]  # more than one piece: the body is still open
    body = Body(json.dumps({"managedRunners": [runner_json("a"), entry, *rest]}).encode(), size=4096)
    assert len(body.data) > 2 * client_module.TEXT_CHUNK

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=body)

    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock) as cloud:
        with pytest.raises(errors.IncompatibleServer, match="no spec"):
            async for _ in cloud.iter_runners():
                pass
        assert body.closed  # at once, not when a finalizer gets round to the list


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-32-le"])
async def test_a_page_is_read_in_the_encoding_its_first_bytes_show(encoding: str, clock: FakeClock) -> None:
    text = json.dumps({"managedRunners": [runner_json("é-\u2028")]}, ensure_ascii=False)

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Body(text.encode(encoding)))

    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock) as cloud:
        ids = [identity.runner_id async for identity, _ in cloud.iter_entries()]
    assert ids == ["é-\u2028"]


async def test_a_body_in_small_pieces_is_decoded_in_few_large_ones() -> None:
    """Each piece parsed costs a resumed walk: a few KB at a time from the connection become TEXT_CHUNK."""
    text = json.dumps({"runners": [{"name": "é\u2028" * 50}] * 2000}, ensure_ascii=False)
    data = text.encode("utf-16")
    pieces = [piece async for piece in client_module._text(httpx.Response(200, stream=Body(data, size=1000)))]
    assert "".join(pieces) == text
    assert len(data) > 3 * client_module.TEXT_CHUNK
    assert len(pieces) <= len(data) // client_module.TEXT_CHUNK + 1


async def test_a_body_that_does_not_decode_is_incompatible_without_the_token(clock: FakeClock) -> None:
    """A Content-Encoding that does not decode: httpx's DecodingError holds the request, never chained."""

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Encoding": "gzip"}, stream=Body(b"not gzip at all"))

    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock) as cloud:
        with pytest.raises(errors.IncompatibleServer, match="does not decode") as caught:
            [identity async for identity, _ in cloud.iter_entries()]
        with pytest.raises(errors.IncompatibleServer, match="does not decode") as read:
            await cloud.get("a")
    for exc in (caught.value, read.value):
        assert exc.__cause__ is None
        assert exc.__context__ is None
        assert TOKEN not in str(exc)


async def test_a_page_that_is_not_text_is_incompatible(clock: FakeClock) -> None:
    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Body(b'{"managedRunners": ["\xff\xfe\xfd"]}'))

    async with CloudClient(BASE_URL, TOKEN, transport=httpx.MockTransport(serve), clock=clock) as cloud:
        with pytest.raises(errors.IncompatibleServer, match="not JSON"):
            [identity async for identity, _ in cloud.iter_entries()]


def test_runner_from_json_reads_as_a_response_does() -> None:
    body = runner_json("a", createTime="2026-01-02T03:04:05.5Z", activeRevision=3)
    assert runner_from_json(json.dumps(body).encode()) == models.parse_runner(body)


@pytest.mark.parametrize(
    ("body", "problem"),
    [({"identity": {"runnerId": "a"}}, "no spec"), ({"spec": {}, "etag": 5}, "does not parse at: etag")],
    ids=["no-spec", "bad-field"],
)
def test_runner_from_json_refuses_what_a_response_may_not_be(body: dict[str, object], problem: str) -> None:
    with pytest.raises(errors.IncompatibleServer, match=problem):
        runner_from_json(json.dumps(body).encode())


async def test_update_sends_sorted_mask_and_etag(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json()
    body = models.CloudRunner(display_name="New", policy=models.CloudPolicy(display_name="p"))

    updated = await cloud.update("prod-1", body, ["policy", "displayName", "policy"], etag="e1")

    request = api.requests[0]
    assert request.method == "PATCH"
    assert request.url.params["updateMask"] == "displayName,policy"
    assert api.bodies()[0] == {"displayName": "New", "policy": {"displayName": "p"}, "etag": "e1"}
    assert updated.display_name == "New"
    assert updated.etag == "e1+"


async def test_update_accepts_a_plain_dict_body(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json(displayName="Old")
    updated = await cloud.update("prod-1", {}, ["displayName"])
    assert updated.display_name is None


async def test_update_with_empty_mask_is_refused_locally(cloud: CloudClient, api: FakeApi) -> None:
    with pytest.raises(ValueError, match="mask"):
        await cloud.update("prod-1", models.CloudRunner(), [])
    assert api.requests == []


async def test_stale_etag_is_surfaced_not_retried(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json()
    with pytest.raises(errors.StaleEtag) as caught:
        await cloud.update("prod-1", models.CloudRunner(policy=models.CloudPolicy()), ["policy"], etag="old")
    assert len(api.requests) == 1
    assert caught.value.code == "FAILED_PRECONDITION"
    assert "stale" in str(caught.value)


async def test_delete_sends_allow_missing_and_tolerates_absence(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json()
    await cloud.delete("prod-1")
    await cloud.delete("prod-1")
    assert [r.url.params.get("allowMissing") for r in api.requests] == ["true", "true"]
    assert api.runners == {}


async def test_delete_counts_not_found_as_success_when_allowed(cloud: CloudClient, api: FakeApi) -> None:
    api.fail_next(404, code=5)
    await cloud.delete("prod-1")  # no NotFound raised
    assert api.requests[-1].url.params["allowMissing"] == "true"


async def test_delete_without_allow_missing_raises_not_found(cloud: CloudClient, api: FakeApi) -> None:
    with pytest.raises(errors.NotFound):
        await cloud.delete("ghost", allow_missing=False)
    assert "allowMissing" not in api.requests[0].url.params


async def test_apply_available_update(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json(updateAvailable=True, targetRevision=1)
    runner = await cloud.apply_available_update("prod-1")
    assert api.requests[0].url.path == "/v1/sandbox/managedRunners/prod-1:applyAvailableUpdate"
    assert (runner.target_revision, runner.rollout_in_progress, runner.update_available) == (2, True, False)


async def test_apply_without_available_update_is_a_failed_precondition(
    cloud: CloudClient, api: FakeApi
) -> None:
    api.runners["prod-1"] = runner_json()
    with pytest.raises(errors.FailedPrecondition) as caught:
        await cloud.apply_available_update("prod-1")
    assert not isinstance(caught.value, errors.StaleEtag)


# --- retries --------------------------------------------------------------------------------------


async def test_transient_failures_are_retried_with_growing_backoff(
    cloud: CloudClient, api: FakeApi, clock: FakeClock
) -> None:
    api.runners["prod-1"] = runner_json()
    api.fail_next(503, code=14)
    api.fail_next(500, code=13)
    api.fail_next(504)
    assert (await cloud.get("prod-1")).runner_id == "prod-1"
    assert len(api.requests) == 4
    assert clock.sleeps == pytest.approx([0.15, 0.3, 0.6])  # jitter pinned at 0.5


async def test_transport_errors_and_timeouts_are_retried(cloud: CloudClient, api: FakeApi) -> None:
    api.runners["prod-1"] = runner_json()
    api.fail_next(0, error=httpx.ConnectError("boom"))
    api.fail_next(0, error=httpx.ReadTimeout("slow"))
    await cloud.get("prod-1")
    assert len(api.requests) == 3


async def test_rate_limit_honours_retry_after(cloud: CloudClient, api: FakeApi, clock: FakeClock) -> None:
    api.runners["prod-1"] = runner_json()
    api.fail_next(429, code=8, headers={"Retry-After": "2"})
    await cloud.get("prod-1")
    assert len(api.requests) == 2
    assert sum(clock.sleeps) == pytest.approx(2.0)
    assert cloud.budget.stats.rate_limited == 1


async def test_retry_info_detail_sets_the_delay(cloud: CloudClient, api: FakeApi, clock: FakeClock) -> None:
    api.runners["prod-1"] = runner_json()
    detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
    api.fail_next(429, code=8, details=[detail])
    await cloud.get("prod-1")
    assert sum(clock.sleeps) == pytest.approx(1.5)


async def test_retry_after_beyond_the_budget_gives_up_at_once(
    cloud: CloudClient, api: FakeApi, clock: FakeClock
) -> None:
    api.fail_next(429, code=8, headers={"Retry-After": "60"})
    with pytest.raises(errors.RateLimited) as caught:
        await cloud.get("prod-1")
    assert caught.value.retry_after == 60
    assert caught.value.retryable is True
    assert len(api.requests) == 1
    assert clock.sleeps == []


def faked(api: FakeApi, clock: FakeClock, **options: Any) -> CloudClient:
    """A client of the in-memory API on the fake clock, with `options` (retry, budget)."""
    return CloudClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(api.handle), sleep=clock.sleep, clock=clock, **options
    )


async def test_retries_stop_at_the_time_budget(api: FakeApi, clock: FakeClock) -> None:
    api.fail_next(503, times=100)
    policy = RetryPolicy(initial=1.0, cap=4.0, max_attempts=100, budget=10.0)
    async with faked(api, clock, retry=policy) as cloud:
        with pytest.raises(errors.Unavailable):
            await cloud.get("prod-1")
    assert sum(clock.sleeps) <= 10.0
    assert 3 <= len(api.requests) < 100


async def test_retries_stop_at_the_attempt_cap(api: FakeApi, clock: FakeClock) -> None:
    api.fail_next(502, times=10)
    policy = RetryPolicy(max_attempts=3, budget=1000)
    async with faked(api, clock, retry=policy) as cloud:
        with pytest.raises(errors.Unavailable):
            await cloud.get("prod-1")
    assert len(api.requests) == 3


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        pytest.param(400, 3, errors.InvalidArgument, id="invalid-argument"),
        pytest.param(401, 16, errors.Unauthenticated, id="unauthenticated"),
        pytest.param(403, 7, errors.PermissionDenied, id="permission-denied"),
        pytest.param(409, 6, errors.AlreadyExists, id="already-exists"),
        pytest.param(409, 10, errors.StaleEtag, id="aborted"),
        pytest.param(501, 12, errors.Unimplemented, id="unimplemented"),
        pytest.param(418, None, errors.CloudError, id="unknown-4xx"),
    ],
)
async def test_rejections_are_not_retried(
    cloud: CloudClient, api: FakeApi, status: int, code: int | None, expected: type[errors.CloudError]
) -> None:
    api.fail_next(status, times=5, code=code)
    with pytest.raises(expected):
        await cloud.get("prod-1")
    assert len(api.requests) == 1


# --- secrecy --------------------------------------------------------------------------------------


async def test_token_never_appears_in_repr_or_errors(cloud: CloudClient, api: FakeApi) -> None:
    api.fail_next(0, times=20, error=httpx.ConnectError(f"could not connect with {TOKEN}"))
    with pytest.raises(errors.Unavailable) as caught:
        await cloud.get("prod-1")
    assert TOKEN not in repr(cloud)
    assert TOKEN not in str(caught.value)
    assert TOKEN not in repr(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


async def test_injected_http_client_is_left_open(api: FakeApi, clock: FakeClock) -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(api.handle))
    async with CloudClient(BASE_URL, TOKEN, http=http, clock=clock, budget=RequestBudget(clock=clock)):
        pass
    assert not http.is_closed
    await http.aclose()


async def test_a_list_page_is_sent_ahead_of_a_creation_backlog(api: FakeApi, clock: FakeClock) -> None:
    """Twenty creates wait for a 10 req/s budget (2 s); a list asked for after them is sent among
    the first few requests: it serves every runner, while a create serves one."""
    budget = RequestBudget(rate=10, burst=1, clock=clock)
    async with faked(api, clock, budget=budget) as cloud:
        creates = [
            asyncio.create_task(cloud.create(parse_runner(runner_json(f"r-{i}")), request_id=f"k-{i}"))
            for i in range(20)
        ]
        for _ in range(10):
            await asyncio.sleep(0)
        listed = [identity.runner_id async for identity, _ in cloud.iter_entries()]
        await asyncio.gather(*creates)
    methods = [r.method for r in api.requests]
    assert methods.count("POST") == 20
    assert methods.index("GET") <= client_module.HORIZON_SLOTS + 2, methods
    assert len(listed) < 20, "the list went out while most creates still waited"
