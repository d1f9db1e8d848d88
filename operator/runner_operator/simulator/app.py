"""The aiohttp application: REST routes of contract section 4, bearer auth, faults, request log.

Handlers only translate HTTP to Simulator calls, in the organisation of the caller's token;
tokens and bodies are never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from runner_operator.simulator import control, errors, faults
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.errors import ApiError
from runner_operator.simulator.faults import LoggedRequest

log = logging.getLogger("runner_operator.simulator")

BASE = faults.API_PREFIX
SIMULATOR = control.SIMULATOR
CLOSING = web.AppKey("closing", asyncio.Event)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status, headers=err.headers)


def bare_not_found() -> web.Response:
    """Go's http.NotFound: what a default mux, proxy or ingress without the route answers (A.27)."""
    return web.Response(
        status=404,
        text="404 page not found\n",
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def ok(body: dict[str, Any]) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), content_type="application/json"
    )


def query(request: web.Request, name: str, snake: str) -> str | None:
    value = request.query.get(name)
    return value if value is not None else request.query.get(snake)


def flag(request: web.Request, name: str, snake: str) -> bool:
    value = query(request, name, snake)
    if value is None or value.lower() in ("", "false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise errors.invalid_field(snake, "must be true or false")


async def json_body(request: web.Request, required: bool = True) -> Any:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise errors.invalid_field("body", "a JSON ManagedRunner body is required")
        return None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise errors.invalid_field("body", f"malformed JSON: {exc}") from None


def _sim(request: web.Request) -> Simulator:
    return request.app[SIMULATOR]


def _org(request: web.Request) -> str:
    """The caller's organisation; authorize() has already admitted the token."""
    return _sim(request).organization_of(_token(request))


# -- API handlers ------------------------------------------------------------------------


async def create(request: web.Request) -> web.Response:
    body = await json_body(request)
    return ok(
        _sim(request).create(
            body, query(request, "requestId", "request_id"), copy=False, organization=_org(request)
        )
    )


async def list_runners(request: web.Request) -> web.Response:
    sim = _sim(request)
    return ok(
        sim.list_runners(
            query(request, "pageSize", "page_size"),
            query(request, "pageToken", "page_token"),
            query(request, "clusterId", "cluster_id"),
            copy=False,
            organization=_org(request),
        )
    )


async def get(request: web.Request) -> web.Response:
    return ok(_sim(request).get(request.match_info["runnerId"], copy=False, organization=_org(request)))


async def update(request: web.Request) -> web.Response:
    masks = request.query.getall("updateMask", []) + request.query.getall("update_mask", [])
    body = await json_body(request)
    return ok(
        _sim(request).update(
            request.match_info["runnerId"], body, masks, copy=False, organization=_org(request)
        )
    )


async def delete(request: web.Request) -> web.Response:
    allow_missing = flag(request, "allowMissing", "allow_missing")
    return ok(_sim(request).delete(request.match_info["runnerId"], allow_missing, organization=_org(request)))


async def custom_method(request: web.Request) -> web.Response:
    runner_id, _, verb = request.match_info["runnerId"].partition(":")
    if verb != "applyAvailableUpdate":
        raise ApiError(12, f"method {verb or 'POST'!r} is not implemented")
    body = await json_body(request, required=False)
    if body not in (None, {}):
        raise errors.invalid_field("body", "applyAvailableUpdate takes no body or {}")
    return ok(_sim(request).apply_available_update(runner_id, copy=False, organization=_org(request)))


ROUTES: list[tuple[str, str, str, Handler]] = [
    ("POST", BASE, "create", create),
    ("GET", BASE, "list", list_runners),
    ("GET", BASE + "/{runnerId}", "get", get),
    ("PATCH", BASE + "/{runnerId}", "update", update),
    ("DELETE", BASE + "/{runnerId}", "delete", delete),
    ("POST", BASE + "/{runnerId}", "applyAvailableUpdate", custom_method),
]
ENDPOINT_OF = {(method, path): name for method, path, name, _ in ROUTES}


# -- middlewares -------------------------------------------------------------------------


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(token: str, candidates: tuple[str, ...]) -> bool:
    found = False
    for candidate in candidates:
        found |= hmac.compare_digest(token.encode(), candidate.encode())
    return found


def authorize(request: web.Request, control_route: bool) -> None:
    """Admin tokens are the configured ones plus every token of the organisation map."""
    sim = _sim(request)
    config = sim.config
    token = _token(request)
    if token is None:
        raise errors.unauthenticated()
    admin_tokens = config.admin_tokens + tuple(sim.organizations)
    if control_route:
        allowed = (config.control_token,) if config.control_token else admin_tokens
        if not _matches(token, allowed):
            raise (
                errors.unauthenticated()
                if not _matches(token, config.user_tokens)
                else errors.permission_denied()
            )
        return
    if _matches(token, admin_tokens):
        return
    if _matches(token, config.user_tokens):
        raise errors.permission_denied()
    raise errors.unauthenticated()


HEALTHZ = "/healthz"


@web.middleware
async def healthz(request: web.Request, handler: Handler) -> web.StreamResponse:
    """GET /healthz answers 200 for probes and scripts: no token, not logged, no faults."""
    if request.path == HEALTHZ:
        return web.Response(text="ok\n")
    return await handler(request)


@web.middleware
async def serve_api(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Log, authenticate, inject faults and turn ApiError into google.rpc.Status bodies.

    A bare-404 prefix answers before authentication, like a proxy in front of the API would.
    """
    sim = _sim(request)
    started = time.perf_counter()
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else request.path
    endpoint = ENDPOINT_OF.get((request.method, route), "")
    if endpoint == "applyAvailableUpdate":
        route += ":applyAvailableUpdate"
    control_route = request.path.startswith(control.PREFIX)
    status, fault, lose = 0, None, False
    try:
        if not control_route and sim.faults.misrouted(request.path):
            fault, status = faults.BARE_404, 404
            return bare_not_found()
        try:
            if request.match_info.http_exception is not None:
                raise _unrouted(request.match_info.http_exception)
            authorize(request, control_route=control_route)
            if endpoint and sim.config.rate_limit:
                wait = sim.limiter.admit(
                    _token(request) or "", sim.config.rate_limit, sim.config.rate_burst, time.monotonic()
                )
                if wait:
                    raise errors.injected(429, "request rate limit exceeded", retry_after=wait)
            if endpoint:
                decision = sim.faults.decide(endpoint)
                fault = decision.label
                lose = decision.lose
                if decision.latency:
                    await asyncio.sleep(decision.latency)
                if decision.drop:
                    _drop(request)
                    raise _Dropped
                if decision.hang:
                    await _hold(request, decision.hang)
                    raise errors.injected(504, "injected fault: the request timed out")
                if decision.error is not None:
                    raise decision.error
            response = await handler(request)
            if lose:
                _drop(request)
                raise _Dropped
        except ApiError as err:
            response = error_response(err)
        status = response.status
        return response
    except _Dropped:
        return web.Response(status=500)  # never written: the transport is already closed
    finally:
        ms = (time.perf_counter() - started) * 1000
        sim.log.record(
            LoggedRequest(
                request.method,
                route,
                request.path,
                endpoint,
                status,
                round(ms, 3),
                fault,
                request.query_string,
                time.time() - ms / 1000,
            )
        )
        if sim.config.log_requests:
            log.info("%s %s %s %.1fms", request.method, request.path, status or "dropped", ms)


class _Dropped(Exception):
    pass


def _drop(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _hold(request: web.Request, seconds: float) -> None:
    closing = request.app[CLOSING]
    try:
        await asyncio.wait_for(closing.wait(), seconds)
    except TimeoutError:
        return


def _unrouted(exc: web.HTTPException) -> ApiError:
    if exc.status == 405:
        return ApiError(12, f"method not allowed on this path: {exc.reason}", http_status=405)
    return ApiError(5, "no such route", http_status=exc.status)


def build(simulator: Simulator) -> web.Application:
    app = web.Application(middlewares=[healthz, serve_api])
    app[SIMULATOR] = simulator
    app[CLOSING] = asyncio.Event()
    for method, path, _, handler in ROUTES:
        app.router.add_route(method, path, handler)
    control.add_routes(app.router)
    return app
