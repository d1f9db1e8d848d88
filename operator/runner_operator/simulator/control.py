"""The /_sim test-control API: the HTTP face of the Simulator's fault and life-cycle methods.

Not part of the CoreWeave contract; guarded by the control token (or an admin token).
Runner-scoped routes act in the default organisation unless given `?organization=`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from runner_operator.simulator import errors, faults
from runner_operator.simulator.config import DEFAULT_ORGANIZATION
from runner_operator.simulator.core import Simulator
from runner_operator.simulator.schema import camel_to_snake, format_time

PREFIX = faults.CONTROL_PREFIX
SIMULATOR = web.AppKey("simulator", Simulator)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _reply(body: Any) -> web.Response:
    return web.json_response(body)


async def _args(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise errors.invalid_field("body", f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise errors.invalid_field("body", "expected a JSON object")
    return {camel_to_snake(k): v for k, v in data.items()}


def _guard(handler: Handler) -> Handler:
    """Bad control arguments become INVALID_ARGUMENT instead of a 500."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (TypeError, ValueError) as exc:
            raise errors.invalid_field("control", str(exc)) from None

    return wrapped


def _sim(request: web.Request) -> Simulator:
    return request.app[SIMULATOR]


def _organization(request: web.Request, args: dict[str, Any] | None = None) -> str:
    """The organisation a control call acts in: body `organization`, else the query, else the default."""
    value = (args or {}).get("organization", request.query.get("organization", DEFAULT_ORGANIZATION))
    if not isinstance(value, str):
        raise ValueError("organization must be a string")
    return value


async def state(request: web.Request) -> web.Response:
    """`runners` counts every organisation, or only the one given as `?organization=`."""
    sim = _sim(request)
    counts = sim.organization_counts()
    scoped = "organization" in request.query
    return _reply(
        {
            "simulator": True,
            "now": format_time(sim.now()),
            "runners": counts.get(_organization(request), 0) if scoped else len(sim),
            "organizations": counts,
            "timings": dataclasses.asdict(sim.timings),
            "releases": sim.releases,
            "faults": sim.faults.describe(),
        }
    )


async def reset(request: web.Request) -> web.Response:
    _sim(request).reset()
    return _reply({})


async def clock(request: web.Request) -> web.Response:
    args = await _args(request)
    sim = _sim(request)
    now = sim.advance_clock(float(args.get("advance_seconds", 0)))
    sim.advance()
    return _reply({"now": format_time(now)})


async def timings(request: web.Request) -> web.Response:
    args = await _args(request)
    return _reply(dataclasses.asdict(_sim(request).set_timings(**{k: float(v) for k, v in args.items()})))


async def add_fault(request: web.Request) -> web.Response:
    args = await _args(request)
    sim = _sim(request)
    kind = args.pop("kind", "error")
    endpoint = str(args.pop("endpoint", "*"))
    times = int(args.pop("times", 1))
    if kind == "drop":
        sim.drop_next(endpoint, times)
    elif kind == "lose":
        sim.lose_next(endpoint, times)
    elif kind == "hang":
        sim.hang_next(endpoint, times, float(args.pop("seconds", 30.0)))
    elif kind == "error":
        retry_after = args.pop("retry_after", None)
        code = args.pop("code", None)
        sim.fail_next(
            endpoint,
            int(args.pop("status", 503)),
            times,
            None if retry_after is None else float(retry_after),
            args.pop("message", None),
            None if code is None else int(code),
        )
    else:
        raise ValueError(f"unknown fault kind {kind!r}; expected error, drop, lose or hang")
    return _reply(sim.faults.describe())


async def set_rate(request: web.Request) -> web.Response:
    args = await _args(request)
    sim = _sim(request)
    seed, retry_after = args.get("seed"), args.get("retry_after")
    sim.set_error_rate(
        str(args.get("endpoint", "*")),
        float(args.get("rate", 0.0)),
        int(args.get("status", 503)),
        None if seed is None else int(seed),
        None if retry_after is None else float(retry_after),
    )
    return _reply(sim.faults.describe())


async def set_latency(request: web.Request) -> web.Response:
    args = await _args(request)
    sim = _sim(request)
    sim.set_latency(str(args.get("endpoint", "*")), float(args.get("seconds", 0.0)))
    return _reply(sim.faults.describe())


async def bare404(request: web.Request) -> web.Response:
    """{"prefix": path prefix (default the runner API), "enabled": bool (default true)}."""
    args = await _args(request)
    sim = _sim(request)
    enabled = args.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError("enabled must be true or false")
    sim.set_bare404(str(args.get("prefix", faults.API_PREFIX)), enabled)
    return _reply(sim.faults.describe())


async def organizations(request: web.Request) -> web.Response:
    """{"tokens": {token: organisation}, "merge": bool}: replace or extend the map (tokens not echoed)."""
    args = await _args(request)
    tokens = args.get("tokens")
    if not isinstance(tokens, dict):
        raise ValueError("expected {'tokens': {token: organization}, 'merge': bool}")
    sim = _sim(request)
    mapping = sim.set_organizations(tokens, merge=bool(args.get("merge", False)))
    return _reply({"tokens": len(mapping), "organizations": sorted(set(mapping.values()))})


async def clear_faults(request: web.Request) -> web.Response:
    _sim(request).clear_faults()
    return _reply({})


async def requests_log(request: web.Request) -> web.Response:
    log = _sim(request).log
    return _reply(
        {
            "counts": dict(log.counts),
            "requests": [dataclasses.asdict(e) for e in log.entries if not e.route.startswith(PREFIX)],
        }
    )


async def clear_requests(request: web.Request) -> web.Response:
    _sim(request).log.clear()
    return _reply({})


async def release(request: web.Request) -> web.Response:
    args = await _args(request)
    channel = str(args.get("channel", "RELEASE_CHANNEL_STABLE"))
    version = _sim(request).publish_release(channel, args.get("version"))
    return _reply({"channel": channel, "version": version})


async def create_runner(request: web.Request) -> web.Response:
    raw = await request.read()
    data = json.loads(raw) if raw.strip() else {}
    if not isinstance(data, dict) or not isinstance(data.get("runner"), dict):
        raise ValueError("expected {'runner': ManagedRunner, 'installed': bool, 'organization': str}")
    return _reply(
        _sim(request).create_out_of_band(
            data["runner"], bool(data.get("installed", True)), organization=_organization(request, data)
        )
    )


async def edit_runner(request: web.Request) -> web.Response:
    raw = await request.read()
    data = json.loads(raw) if raw.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("expected a partial ManagedRunner object")
    return _reply(
        _sim(request).edit_out_of_band(
            request.match_info["runnerId"], data, organization=_organization(request)
        )
    )


async def delete_runner(request: web.Request) -> web.Response:
    immediately = request.query.get("immediately", "true").lower() != "false"
    _sim(request).delete_out_of_band(
        request.match_info["runnerId"], immediately, organization=_organization(request)
    )
    return _reply({})


async def fail_install(request: web.Request) -> web.Response:
    args = await _args(request)
    return _reply(
        _sim(request).fail_install(
            request.match_info["runnerId"],
            str(args.get("reason", "RUNNER_INSTALL_ERROR_REASON_INSTALL_FAILED")),
            str(args.get("message", "injected install failure")),
            bool(args.get("immediately", True)),
            organization=_organization(request, args),
        )
    )


async def recover_install(request: web.Request) -> web.Response:
    return _reply(
        _sim(request).recover_install(request.match_info["runnerId"], organization=_organization(request))
    )


async def disconnect(request: web.Request) -> web.Response:
    return _reply(
        _sim(request).disconnect(request.match_info["runnerId"], organization=_organization(request))
    )


async def reconnect(request: web.Request) -> web.Response:
    return _reply(
        _sim(request).reconnect(request.match_info["runnerId"], organization=_organization(request))
    )


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/state", state),
    ("POST", "/reset", reset),
    ("POST", "/clock", clock),
    ("POST", "/timings", timings),
    ("POST", "/faults", add_fault),
    ("PUT", "/faults/rates", set_rate),
    ("PUT", "/faults/latency", set_latency),
    ("POST", "/faults/bare404", bare404),
    ("DELETE", "/faults", clear_faults),
    ("POST", "/organizations", organizations),
    ("GET", "/requests", requests_log),
    ("DELETE", "/requests", clear_requests),
    ("POST", "/releases", release),
    ("POST", "/runners", create_runner),
    ("PATCH", "/runners/{runnerId}", edit_runner),
    ("DELETE", "/runners/{runnerId}", delete_runner),
    ("POST", "/runners/{runnerId}/installFailure", fail_install),
    ("DELETE", "/runners/{runnerId}/installFailure", recover_install),
    ("POST", "/runners/{runnerId}/disconnect", disconnect),
    ("POST", "/runners/{runnerId}/reconnect", reconnect),
]


def add_routes(router: web.UrlDispatcher) -> None:
    for method, path, handler in ROUTES:
        router.add_route(method, PREFIX + path, _guard(handler))
