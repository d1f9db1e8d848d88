"""Running the simulator: `serve()` for tests (127.0.0.1, port 0) and the blocking CLI `main()`.

The CLI is wired as `runner-operator simulate`; it is the only place that reads the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from types import TracebackType

from aiohttp import web

from runner_operator.simulator import app as http_app
from runner_operator.simulator.config import (
    ADMIN_TOKEN_ENV,
    DEV_ADMIN_TOKEN,
    DEV_USER_TOKEN,
    USER_TOKEN_ENV,
    SimulatorConfig,
    Timings,
)
from runner_operator.simulator.core import Simulator

log = logging.getLogger("runner_operator.simulator")


class RunningServer:
    """A started simulator: `.url`, `.simulator`, `await close()`; also an async context manager."""

    def __init__(self, runner: web.AppRunner, simulator: Simulator, url: str) -> None:
        self._runner = runner
        self.simulator = simulator
        self.url = url

    async def close(self) -> None:
        self._runner.app[http_app.CLOSING].set()  # release requests held by a "hang" fault
        await self._runner.cleanup()

    async def __aenter__(self) -> RunningServer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def serve(config: SimulatorConfig | None = None, simulator: Simulator | None = None) -> RunningServer:
    """Start serving on config.host:config.port (port 0 picks a free one)."""
    config = config or (simulator.config if simulator else SimulatorConfig())
    simulator = simulator or Simulator(config)
    runner = web.AppRunner(http_app.build(simulator), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    sockets = runner.addresses
    host, port = sockets[0][0], sockets[0][1]
    shown = f"[{host}]" if ":" in host else host
    return RunningServer(runner, simulator, f"http://{shown}:{port}")


DEFAULT_PORT = 8765


def parse_args(argv: list[str] | None) -> SimulatorConfig:
    defaults = Timings()
    parser = argparse.ArgumentParser(
        prog="runner-operator simulate",
        description="Serve a local CoreWeave Sandboxes control-plane simulator (managed runners API).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    # Not 8080 or 9090: the operator's own health and metrics ports, often run side by side.
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; GET /healthz answers 200"
    )
    parser.add_argument(
        "--admin-token",
        default=os.environ.get(ADMIN_TOKEN_ENV, DEV_ADMIN_TOKEN),
        help=f"SANDBOX_ADMIN bearer token (env {ADMIN_TOKEN_ENV}; default {DEV_ADMIN_TOKEN})",
    )
    parser.add_argument(
        "--user-token",
        default=os.environ.get(USER_TOKEN_ENV, DEV_USER_TOKEN),
        help=f"SANDBOX_USER-only bearer token, refused on runner endpoints (default {DEV_USER_TOKEN})",
    )
    parser.add_argument("--control-token", default=None, help="token for /_sim (default: the admin token)")
    parser.add_argument("--state-file", default=None, help="JSON file keeping state across restarts")
    for name in ("install", "provision", "rollout", "delete", "heartbeat"):
        parser.add_argument(
            f"--{name}-seconds", type=float, default=getattr(defaults, f"{name}_seconds"), metavar="S"
        )
    parser.add_argument("--reject-uppercase-zone", action="store_true", help="refuse zones not in lowercase")
    parser.add_argument(
        "--lenient", action="store_true", help="ignore unknown JSON fields instead of refusing"
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=None,
        metavar="RPS",
        help="server-side quota per token: over it, 429 with Retry-After",
    )
    parser.add_argument("--rate-burst", type=int, default=10, metavar="N")
    parser.add_argument("--latency", type=float, default=0.0, metavar="S", help="added latency per API call")
    parser.add_argument("--quiet", action="store_true", help="do not log every request")
    args = parser.parse_args(argv)
    return SimulatorConfig(
        host=args.host,
        port=args.port,
        admin_tokens=(args.admin_token,),
        user_tokens=(args.user_token,) if args.user_token else (),
        control_token=args.control_token,
        state_file=args.state_file,
        timings=Timings(
            args.install_seconds,
            args.provision_seconds,
            args.rollout_seconds,
            args.delete_seconds,
            args.heartbeat_seconds,
        ),
        reject_uppercase_zone=args.reject_uppercase_zone,
        lenient=args.lenient,
        rate_limit=args.rate_limit,
        rate_burst=args.rate_burst,
        latency=args.latency,
        log_requests=not args.quiet,
    )


async def _run(config: SimulatorConfig) -> None:
    server = await serve(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("simulator listening on %s (API under %s)", server.url, http_app.BASE)
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    """Blocking entry point: serve until SIGINT/SIGTERM."""
    config = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_run(config))
    return 0
