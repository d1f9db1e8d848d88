"""`runner-operator`: the command line. `run` is the container's entry point; `simulate` serves a local API.

Environment (see settings.py): RUNNER_OPERATOR_API_ENDPOINT or COREWEAVE_API_ENDPOINT, and the
operator-wide default credentials (COREWEAVE_API_TOKEN or RUNNER_OPERATOR_DEFAULT_SECRET).
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner-operator", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run the operator against the current kubeconfig / in-cluster config"
    )
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    run.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument("--peering", default=None, help="kopf peering name (default: standalone, one replica)")
    run.add_argument("-v", "--verbose", action="store_true")
    run.add_argument(
        "--json-logs",
        action="store_true",
        help="one JSON object per log line (also RUNNER_OPERATOR_JSON_LOGS)",
    )

    commands.add_parser(
        "simulate", help="serve the CoreWeave API simulator (see `simulate --help`)", add_help=False
    )

    args, rest = parser.parse_known_args(argv)
    if args.command == "simulate":
        from runner_operator.simulator import server

        return server.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    import kopf

    import runner_operator.handlers  # noqa: F401  (registers the handlers)
    from runner_operator import settings

    json_logs = args.json_logs or settings.load().json_logs
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.JSON if json_logs else kopf.LogFormat.FULL)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_QuietTimers())
    kopf.run(
        standalone=args.peering is None,
        peering_name=args.peering,
        namespaces=args.namespace or (),
        clusterwide=not args.namespace,
        liveness_endpoint=args.liveness,
    )
    return 0


class _QuietTimers(logging.Filter):
    """Drop kopf's per-tick 'Timer ... succeeded.' lines: thousands of runners would drown the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Timer ") and message.endswith(" succeeded."))


if __name__ == "__main__":
    sys.exit(main())
