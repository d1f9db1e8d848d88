"""Async client for the six ManagedRunner endpoints: typed results, brief retries, a shared request budget.

JSON becomes wire models here and nowhere else; failures become `errors.CloudError`. The token never
reaches a repr, a log line or an exception.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import itertools
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from json import detect_encoding
from json import loads as parse_json
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
import pydantic

from runner_operator.cloud import budget as budgets
from runner_operator.cloud import errors, models, pages
from runner_operator.cloud.retrying import RetryPolicy

COLLECTION = "/v1/sandbox/managedRunners"
HORIZON_SLOTS = 2
"""A request for one runner reserves its budget slot only once at most this many are promised ahead
of it (`RequestBudget.acquire`'s horizon), so a list page, which serves every runner, never queues
behind a creation backlog: with 20 creates queued at 10 req/s each page waited 2 s, and the passes
of installing runners, waiting for that list, saw their installs 27 s late (bench/RESULTS.md)."""

Observer = Callable[[str, str, float], None]
"""Called after every attempt with (endpoint, HTTP status or 'transport', seconds): metrics hook."""


class CloudClient:
    """One credential's view of the API. Use as `async with CloudClient(url, token) as cloud: ...`."""

    def __init__(
        self,
        base_url: str,
        token: str | pydantic.SecretStr,
        *,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        budget: budgets.RequestBudget | None = None,
        sleep: budgets.Sleep = asyncio.sleep,
        clock: budgets.Clock = time.monotonic,
        jitter: Callable[[], float] = random.random,
        observer: Observer | None = None,
        queue_wait: float = 300.0,
    ) -> None:
        """An injected `http` client stays owned by the caller; otherwise one is built (on `transport`).

        Without `budget`, the process-wide budget for (base_url, token) is used.
        """
        self._base_url = base_url.rstrip("/")
        self._token = token if isinstance(token, pydantic.SecretStr) else pydantic.SecretStr(token)
        self._owns_http = http is None
        self._http = http if http is not None else httpx.AsyncClient(transport=transport)
        self._timeout = httpx.Timeout(timeout)
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._jitter = jitter
        self._observer = observer
        self._queue_wait = queue_wait
        self.budget = budget or budgets.shared(self._base_url, self._token.get_secret_value(), clock=clock)

    def __repr__(self) -> str:
        return f"CloudClient(base_url={self._base_url!r})"

    async def __aenter__(self) -> CloudClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # --- endpoints ------------------------------------------------------------------------------

    async def create(
        self, runner: models.CloudRunner, request_id: str, *, on_send: Callable[[], None] | None = None
    ) -> models.CloudRunner:
        """Create a runner; retries and repeats are safe only because `request_id` stays the same.

        `on_send` is called before each attempt: an answer to a retry may be about an earlier attempt."""
        if not request_id:
            raise ValueError("create needs a request_id that the caller persists and reuses")
        body = models.to_wire(runner, request=True)
        body.pop("etag", None)
        identity = body.get("identity")
        if isinstance(identity, dict) and isinstance(identity.get("zone"), str):
            identity["zone"] = identity["zone"].lower()
        response = await self._send(
            "POST", COLLECTION, params={"requestId": request_id}, json=body, on_send=on_send
        )
        return _runner(_object(response))

    async def get(self, runner_id: str) -> models.CloudRunner:
        """Read a runner; raises errors.NotFound only on the API's own NOT_FOUND for this runner.

        A NOT_FOUND that names another resource is an endpoint problem (errors.Misrouted), not absence.
        """
        try:
            return _runner(_object(await self._send("GET", _item(runner_id))))
        except errors.NotFound as exc:
            if not exc.names(runner_id):
                raise errors.Misrouted(
                    f"NOT_FOUND names {exc.resource_name!r}, not runner {runner_id!r}: "
                    "check the API endpoint",
                    code="MISROUTED",
                    http_status=exc.http_status,
                ) from None
            raise

    async def find(self, runner_id: str) -> models.CloudRunner | None:
        """Read a runner, or None when the API itself says NOT_FOUND for it."""
        try:
            return await self.get(runner_id)
        except errors.NotFound:
            return None

    async def iter_runners(
        self, page_size: int | None = None, on_send: Callable[[], None] | None = None
    ) -> AsyncIterator[models.CloudRunner]:
        """Every runner of the organisation, page by page.

        `on_send` is called as each page request leaves (after any wait for the request budget):
        the server's view is at least that recent, which a cache needs to know.
        """
        async with contextlib.aclosing(self.iter_entries(page_size, on_send)) as entries:
            async for _, entry in entries:
                yield _runner(entry)

    async def iter_entries(
        self, page_size: int | None = None, on_send: Callable[[], None] | None = None
    ) -> AsyncGenerator[tuple[models.RunnerIdentity, dict[str, Any]], None]:
        """Like `iter_runners`, but each runner as its parsed identity and its list entry, still JSON.

        For a cache that keeps entries compactly and parses one (`runner_from_json`) only when a pass
        asks for it. Only the identity is checked here: an unreadable one fails the whole list. Each
        page is parsed an entry at a time as it arrives (`pages.Page`): yielded entries are the
        caller's to keep. A page whose connection is lost half-way is asked for again, within the
        retry policy's attempts and time budget, and a runner it had already given (by ID) is not
        given twice; an entry without an ID may be.
        """
        params: dict[str, str] = {}
        if page_size:
            params["pageSize"] = str(page_size)
        seen: set[str] = set()
        while True:
            page, given, deadline = pages.Page(), set[str](), self._clock() + self._retry.budget
            for attempt in itertools.count(1):
                try:
                    async with contextlib.aclosing(self._page(page, params, on_send)) as items:
                        async for item in items:
                            identity = _identity(item)
                            if attempt > 1 and identity.runner_id in given:
                                continue  # given before the page was cut short and asked for again
                            if identity.runner_id:
                                given.add(identity.runner_id)
                            yield identity, item
                    break
                except _CutShort as exc:
                    cut = str(exc)
                delay = self._retry.delay(attempt, None, self._jitter)
                if attempt >= self._retry.max_attempts or self._clock() + delay > deadline:
                    raise errors.Unavailable(f"list response cut short ({cut})", code="UNAVAILABLE")
                await self._sleep(delay)
                page = pages.Page()
            token = page.next_page_token
            if not token:
                return
            if not isinstance(token, str) or token in seen:
                raise errors.IncompatibleServer("list pagination does not advance")
            seen.add(token)
            params["pageToken"] = token

    async def update(
        self,
        runner_id: str,
        body: models.CloudRunner | Mapping[str, Any],
        update_mask: Iterable[str],
        etag: str | None = None,
    ) -> models.CloudRunner:
        """PATCH the fields named by `update_mask` (camelCase paths); a named field absent in `body` resets.

        `etag` (or the body's own) must come from the read that produced a policy being written.
        """
        mask = sorted(set(update_mask))
        if not mask:
            raise ValueError("an update needs at least one mask path")
        wire = models.to_wire(body, request=True) if isinstance(body, models.CloudRunner) else dict(body)
        if etag is not None:
            wire["etag"] = etag
        response = await self._send(
            "PATCH",
            _item(runner_id),
            params={"updateMask": ",".join(mask)},
            json=wire,
            policy_update="policy" in mask,
        )
        return _runner(_object(response))

    async def delete(self, runner_id: str, allow_missing: bool = True) -> None:
        """Start decommissioning; with `allow_missing` the API's NOT_FOUND for it counts as deleted.

        Success is not proof the runner is gone: callers confirm with `get` (NOT_FOUND) afterwards.
        """
        params = {"allowMissing": "true"} if allow_missing else {}
        try:
            await self._send("DELETE", _item(runner_id), params=params)
        except errors.NotFound as exc:
            if not allow_missing or not exc.names(runner_id):
                raise

    async def apply_available_update(self, runner_id: str) -> models.CloudRunner:
        """Roll the runner to the newest version of its channel (FAILED_PRECONDITION if none is available)."""
        response = await self._send("POST", f"{_item(runner_id)}:applyAvailableUpdate", json={})
        return _runner(_object(response))

    # --- transport ------------------------------------------------------------------------------

    async def _page(
        self, page: pages.Page, params: Mapping[str, str], on_send: Callable[[], None] | None
    ) -> AsyncGenerator[Any, None]:
        """One list page's runners, parsed as its body arrives (`pages.Page`): the body is never held
        whole. A connection lost half-way raises _CutShort: the caller asks for the page again (the
        request is counted by its status, which came before the body: the ask again shows as one
        more list request)."""
        response = await self._send(
            "GET", COLLECTION, params=params, on_send=on_send, stream=True, serves_all=True
        )
        cut: str | None = None
        undecodable = False
        try:
            async with (
                contextlib.aclosing(_text(response)) as chunks,
                contextlib.aclosing(page.read(chunks)) as items,
            ):
                async for item in items:
                    yield item
        except httpx.TransportError as exc:
            cut = type(exc).__name__
        except httpx.DecodingError:  # a Content-Encoding that does not decode
            undecodable = True
        finally:
            await response.aclose()
        # Raised outside the handlers: httpx exceptions hold the request, whose headers hold the token.
        if cut is not None:
            raise _CutShort(cut)
        if undecodable:
            raise errors.IncompatibleServer("response body does not decode", http_status=response.status_code)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        policy_update: bool = False,
        on_send: Callable[[], None] | None = None,
        stream: bool = False,
        serves_all: bool = False,
    ) -> httpx.Response:
        """A successful response, after the budget's queue and brief retries of what may pass on retry.

        With `stream`, its body is still to be read, and the caller closes it. A request that
        `serves_all` (a list page) takes the first free slot of the budget; any other waits outside
        its queue until at most HORIZON_SLOTS are ahead of it."""
        deadline: float | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                # Waiting for the shared budget is queueing, not failing: callers wait
                # for up to queue_wait seconds; the retry budget counts from the first attempt.
                horizon = None if serves_all else HORIZON_SLOTS / self.budget.rate
                await self.budget.acquire(self._sleep, max_wait=self._queue_wait, horizon=horizon)
            except budgets.BudgetExhausted as exc:
                raise errors.RateLimited("local request budget exhausted", retry_after=exc.wait) from None
            if deadline is None:
                deadline = self._clock() + self._retry.budget
            if on_send is not None:
                on_send()
            outcome = await self._attempt(method, path, params, json, policy_update, stream)
            if isinstance(outcome, httpx.Response):
                return outcome
            error = outcome
            if isinstance(error, errors.RateLimited) and error.http_status == 429:
                self.budget.record_rate_limited(error.retry_after)
            if not isinstance(error, errors.Unavailable):
                raise error
            delay = self._retry.delay(attempt, getattr(error, "retry_after", None), self._jitter)
            if attempt >= self._retry.max_attempts or self._clock() + delay > deadline:
                raise error
            await self._sleep(delay)

    async def _attempt(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        json: Any,
        policy_update: bool,
        stream: bool = False,
    ) -> httpx.Response | errors.CloudError:
        """One request. With `stream`, the time observed for a success is until its headers (its body
        is read by the caller); an error's body is read first, as without."""
        headers = {
            "Authorization": f"Bearer {self._token.get_secret_value()}",
            "Accept": "application/json",
        }
        started = self._clock()
        try:
            request = self._http.build_request(
                method,
                self._base_url + path,
                params=params,
                json=json,
                headers=headers,
                timeout=self._timeout,
            )
            response = await self._http.send(request, stream=stream)
            if stream and not response.is_success:
                try:
                    await response.aread()  # an error's body is small, and read to classify it
                finally:
                    await response.aclose()
        except httpx.TimeoutException as exc:
            self._observe(method, path, "transport", started)
            # Never chain: httpx exceptions hold the request, whose headers hold the token.
            return errors.Unavailable(f"request timed out ({type(exc).__name__})", code="DEADLINE_EXCEEDED")
        except httpx.TransportError as exc:
            self._observe(method, path, "transport", started)
            return errors.Unavailable(f"transport error ({type(exc).__name__})", code="UNAVAILABLE")
        except httpx.DecodingError:  # a Content-Encoding that does not decode: not worth a retry
            self._observe(method, path, "transport", started)
            return errors.IncompatibleServer("response body does not decode")
        self._observe(method, path, str(response.status_code), started)
        if not response.is_success:
            return errors.from_response(response, policy_update=policy_update)
        return response

    def _observe(self, method: str, path: str, code: str, started: float) -> None:
        if self._observer is not None:
            self._observer(endpoint_of(method, path), code, max(0.0, self._clock() - started))


def endpoint_of(method: str, path: str) -> str:
    """The API method a request calls (a metric label), e.g. create, list, update, applyAvailableUpdate."""
    if path.endswith(":applyAvailableUpdate"):
        return "applyAvailableUpdate"
    if path.rstrip("/") == COLLECTION:
        return "create" if method == "POST" else "list"
    return {"GET": "get", "PATCH": "update", "DELETE": "delete"}.get(method, method.lower())


class _CutShort(Exception):
    """A list response whose connection was lost before its body ended (names the transport error)."""


TEXT_CHUNK = 64 * 1024
"""Bytes a streamed list body is decoded and parsed in, at least (the last piece aside): a connection
may deliver a few KB at a time, and each piece parsed costs a resumed walk and, for the runner it
cuts, one more try (bench/RESULTS.md, "List pages read as they arrive")."""


async def _text(response: httpx.Response) -> AsyncGenerator[str, None]:
    """A streamed body as text, TEXT_CHUNK bytes or more at a time, in the encoding its first bytes show
    (RFC 8259: UTF-8, or UTF-16/32 with or without a BOM, as `json.loads` accepts)."""
    pending: list[bytes] = []
    size, decoder = 0, None
    try:
        async for chunk in response.aiter_bytes():
            pending.append(chunk)
            size += len(chunk)
            if size < TEXT_CHUNK:
                continue
            data, size = b"".join(pending), 0
            pending.clear()
            decoder = decoder or _decoder(data)
            if text := decoder.decode(data):
                yield text
        data = b"".join(pending)
        yield (decoder or _decoder(data)).decode(data, final=True)
    except (UnicodeDecodeError, LookupError):
        raise errors.IncompatibleServer("response is not JSON", http_status=response.status_code) from None


def _decoder(head: bytes) -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder(detect_encoding(head))("surrogatepass")


def _object(response: httpx.Response) -> dict[str, Any]:
    """A response body as the JSON object it must be (an empty body as an empty one)."""
    if not response.content:
        return {}
    status = response.status_code
    try:
        data = parse_json(response.content)
    except ValueError:
        raise errors.IncompatibleServer("response is not JSON", http_status=status) from None
    if not isinstance(data, dict):
        raise errors.IncompatibleServer("response is not a JSON object", http_status=status)
    return data


def _item(runner_id: str) -> str:
    if not runner_id:
        raise ValueError("runner_id must not be empty")
    return f"{COLLECTION}/{quote(runner_id, safe='')}"


def runner_from_json(data: bytes) -> models.CloudRunner:
    """A runner from one list entry or response body kept as JSON bytes (as `iter_entries` yields it)."""
    try:
        runner = models.CloudRunner.model_validate_json(data)
    except pydantic.ValidationError as exc:
        raise _unparsed(exc) from None
    if runner.spec is None:
        raise errors.IncompatibleServer("runner in response has no spec")
    return runner


def _identity(data: object) -> models.RunnerIdentity:
    identity = data.get("identity") if isinstance(data, dict) else None
    try:
        return models.RunnerIdentity.model_validate({} if identity is None else identity)
    except pydantic.ValidationError as exc:
        raise _unparsed(exc, "identity") from None


def _unparsed(exc: pydantic.ValidationError, *prefix: str) -> errors.IncompatibleServer:
    where = ", ".join(".".join(str(p) for p in (*prefix, *e["loc"])) for e in exc.errors()[:5])
    return errors.IncompatibleServer(f"runner in response does not parse at: {where}")


def _runner(data: object) -> models.CloudRunner:
    # A "policy-only" v1 server omits spec; reading that as "spec reset to defaults" would be wrong.
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        raise errors.IncompatibleServer("runner in response has no spec")
    try:
        return models.parse_runner(data)
    except pydantic.ValidationError as exc:
        raise _unparsed(exc) from None
