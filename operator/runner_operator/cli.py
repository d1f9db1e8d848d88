"""`runner-operator`: the command line. `run` is the container's entry point; `simulate` serves a local API.

Environment (see settings.py): RUNNER_OPERATOR_API_ENDPOINT or COREWEAVE_API_ENDPOINT, and the
operator-wide default credentials (COREWEAVE_API_TOKEN or RUNNER_OPERATOR_DEFAULT_SECRET).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from runner_operator import schemacheck
from runner_operator.cloud.client import CloudClient

if TYPE_CHECKING:
    from runner_operator import livecluster, metrics

LEADERSHIP_LOST = 75
"""Exit status after losing the Lease (EX_TEMPFAIL): the Deployment restarts the pod as a standby."""


EXIT_CODES = """exit status:
  0  done (plan: nothing to change, or changes without --detailed-exitcode)
  1  an error: bad arguments, an unreadable or invalid manifest, no or a rejected token, the API
     unreachable, or a plan the operator would refuse (Blocked)
  2  plan --detailed-exitcode only: the operator would create, update or delete a runner
  130 interrupted"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1: 2 means "changes pending" for `plan --detailed-exitcode`."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _shard(text: str) -> str:
    from runner_operator.sharding import Shard

    try:
        return str(Shard.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="runner-operator",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
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
    run.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        type=_shard,
        help="handle shard I of N only, with its own Lease (RUNNER_OPERATOR_SHARD; needs leader election)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging (same as --log-level debug)")
    run.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=None,
        help="default: RUNNER_OPERATOR_LOG_LEVEL, else info",
    )
    run.add_argument(
        "--json-logs",
        action="store_true",
        help="one JSON object per log line (also RUNNER_OPERATOR_JSON_LOGS)",
    )

    commands.add_parser(
        "simulate", help="serve the CoreWeave API simulator (see `simulate --help`)", add_help=False
    )

    plan = commands.add_parser(
        "plan", help="show the API calls applying a manifest would make (secrets masked)"
    )
    plan.add_argument("-f", "--filename", type=Path, required=True, help="ManagedRunner YAML ('-' = stdin)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 2 when the operator would create, update or delete a runner (Terraform's meaning)",
    )
    plan.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="for manifests without one (default: the kubeconfig context's)",
    )
    plan.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="read the live resources and dry-run the apply there (default: KUBECONFIG, ~/.kube/config)",
    )
    plan.add_argument(
        "--offline", action="store_true", help="read no cluster: every manifest is planned as a new resource"
    )
    plan.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="FILE",
        help="without a cluster: the manifests as last applied (e.g. the previous commit's); a manifest"
        " found there by namespace and name is checked as a change of it (immutable fields)",
    )
    _api_options(plan)

    export = commands.add_parser(
        "export", help="write ManagedRunner manifests (adopt: true) for existing runners"
    )
    export.add_argument("-o", "--output-dir", type=Path, required=True)
    export.add_argument("-n", "--namespace", default="default", help="namespace of the written manifests")
    export.add_argument(
        "--credentials-secret",
        default="coreweave-api",
        help="Secret (in that namespace, key 'token') the manifests reference",
    )
    export.add_argument("runner_ids", nargs="*", help="only these runners (default: all)")
    _api_options(export)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "simulate":
        from runner_operator.simulator import server

        return server.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "plan":
            return asyncio.run(_plan(args))
        if args.command == "export":
            return asyncio.run(_export(args))
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        problem = user_problem(exc, args)
        if problem is None:
            raise  # a bug: its traceback is what a report needs
        sys.stderr.write(f"runner-operator {args.command}: {problem}\n")
        return 1


def user_problem(exc: BaseException, args: argparse.Namespace) -> str | None:
    """One line that says what went wrong and what to do, for every mistake a user can make."""
    import pydantic

    from runner_operator import settings
    from runner_operator.cloud import errors
    from runner_operator.commands import UserError

    endpoint = getattr(args, "endpoint", None) or _configured_endpoint()
    match exc:
        case UserError() | schemacheck.ValidatorFailed():
            return str(exc)
        case pydantic.ValidationError() if exc.title == settings.Settings.__name__:
            return settings.describe(exc)
        case errors.Unauthenticated():
            return (
                f"the API at {endpoint} rejected the token (401): check --token-file or COREWEAVE_API_TOKEN"
            )
        case errors.PermissionDenied():
            return f"the token may not do this (403: {exc.message}): it needs the SANDBOX_ADMIN role"
        case errors.Misrouted():
            return f"{endpoint} answered 404 without the API's NOT_FOUND: check --endpoint ({exc.message})"
        case errors.Unavailable():
            return f"cannot reach the API at {endpoint}: {exc.message}; check --endpoint and the network"
        case errors.CloudError():
            return f"the API at {endpoint} refused: {exc}"
        case OSError() if exc.filename is not None:
            return f"cannot use {exc.filename}: {exc.strerror or exc}"
    from kubernetes.config.config_exception import ConfigException

    if isinstance(exc, ConfigException):
        return f"cannot use the kubeconfig: {exc}"
    return None


def _configured_endpoint() -> str:
    from runner_operator import settings

    try:
        return settings.load().api_endpoint
    except ValueError:
        return settings.DEFAULT_ENDPOINT


def _api_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint", default=None, help="API base URL (default: settings / COREWEAVE_API_ENDPOINT)"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file holding the API token (default: COREWEAVE_API_TOKEN)",
    )


def _client(args: argparse.Namespace) -> CloudClient:
    from runner_operator import settings
    from runner_operator.cloud.retrying import RetryPolicy
    from runner_operator.commands import UserError

    config = settings.load()
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip()
        except OSError as exc:
            raise UserError(f"cannot read the token file {args.token_file}: {exc.strerror or exc}") from None
        if not token:
            raise UserError(f"the token file {args.token_file} is empty")
    elif config.default_token is not None:
        token = config.default_token.get_secret_value()
    else:
        raise UserError("no API token: pass --token-file FILE or set COREWEAVE_API_TOKEN")
    # A person is waiting: two quick attempts, not the operator's ten seconds of retries.
    return CloudClient(
        args.endpoint or config.api_endpoint,
        token,
        timeout=config.request_timeout,
        retry=RetryPolicy(max_attempts=2, budget=1.0),
    )


async def _plan(args: argparse.Namespace) -> int:
    from runner_operator import commands

    manifests = commands.load_manifests(args.filename)
    cluster = None if args.offline else await asyncio.to_thread(_cluster, args.kubeconfig)
    try:
        return await _plan_with(args, manifests, cluster)
    finally:
        if cluster is not None:
            cluster.close()


async def _plan_with(
    args: argparse.Namespace, manifests: list[dict[str, Any]], cluster: livecluster.Cluster | None
) -> int:
    from runner_operator import commands

    namespace = args.namespace or (cluster.namespace if cluster else "default")
    manifests = [_in_namespace(doc, namespace) for doc in manifests]
    notes = []
    if args.against is not None and cluster is not None:
        raise commands.UserError(
            "--against is for plans without a cluster (add --offline): with one, the live object is the"
            " version a change is checked against"
        )
    previous = _previous(args.against, namespace) if args.against is not None else {}
    if cluster is None and not await asyncio.to_thread(_check_offline, manifests, previous):
        notes.append(
            f"note: the CRD's rules were not checked: {schemacheck.EXECUTABLE} was not found"
            f" (on PATH or {schemacheck.VARIABLE}; see `plan` in the README)"
        )
    results = []
    async with _client(args) as cloud:
        for doc in manifests:
            live = None
            if cluster is not None:
                refused = await asyncio.to_thread(cluster.dry_run, doc)
                if refused:
                    raise commands.UserError(f"the API server refuses {_name(doc)}: {refused}")
                body, claims = await asyncio.to_thread(cluster.live, doc)
                live = commands.Live(body, claims)
            results.append(await commands.plan_one(doc, cloud, live=live, namespace=namespace))
    commands.show(results, sys.stdout, as_json=args.json)
    if cluster is None and not args.offline:
        notes.append("note: no kubeconfig found: planned as new resources (ownership from the API alone)")
    for note in notes:
        sys.stderr.write(note + "\n")
    if any(r.blocked for r in results):
        return 1
    return 2 if args.detailed_exitcode and any(r.writes for r in results) else 0


def _previous(path: Path, namespace: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The manifests of --against by (namespace, name)."""
    from runner_operator import commands

    docs = [_in_namespace(doc, namespace) for doc in commands.load_manifests(path)]
    return {_key(doc): doc for doc in docs}


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    meta = doc.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _check_offline(manifests: list[dict[str, Any]], previous: dict[tuple[str, str], dict[str, Any]]) -> bool:
    """Refuse, as the API server would, a manifest the CRD rejects; False when no validator is at hand."""
    from runner_operator.commands import UserError

    program = schemacheck.executable()
    if program is None:
        return False
    olds = [previous.get(_key(doc)) for doc in manifests]
    for doc, refusal in zip(manifests, schemacheck.refusals(manifests, program, olds), strict=True):
        if refusal is not None:
            raise UserError(f"the CRD refuses {_name(doc)}: {refusal}")
    return True


def _cluster(kubeconfig: Path | None) -> livecluster.Cluster | None:
    from runner_operator import livecluster

    return livecluster.connect(kubeconfig)


def _in_namespace(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    meta = doc.get("metadata") or {}
    return {**doc, "metadata": {**meta, "namespace": meta.get("namespace") or namespace}}


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"ManagedRunner {meta.get('namespace')}/{meta.get('name')}"


async def _export(args: argparse.Namespace) -> int:
    from runner_operator import commands

    async with _client(args) as cloud:
        written = await commands.export(
            cloud,
            args.output_dir,
            namespace=args.namespace,
            credentials_secret=args.credentials_secret,
            only=args.runner_ids,
        )
    for path in written:
        sys.stdout.write(f"wrote {path}\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.shard:  # before the handlers are imported: they read the settings at import time
        os.environ["RUNNER_OPERATOR_SHARD"] = args.shard
    import kopf

    from runner_operator import allocator, handlers, metrics, settings  # handlers: registers them

    config = settings.load()  # a bad value is one line (user_problem), before anything starts
    allocator.limit_arenas(config.malloc_arenas)  # before any thread allocates
    allocator.fix_mmap_threshold(config.malloc_mmap_threshold)
    json_logs = args.json_logs or config.json_logs
    level = log_level(args, config.log_level)
    kopf.configure(
        verbose=level == "debug",
        quiet=level in ("warning", "error"),
        log_format=kopf.LogFormat.JSON if json_logs else kopf.LogFormat.FULL,
    )
    logging.getLogger().setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_QuietFeed())

    registry = metrics.Registry(version=version())
    _serve_metrics(registry, config.metrics_port)

    def operate() -> None:
        registry.leader.set(1)
        kopf.run(
            standalone=args.peering is None,
            peering_name=args.peering,
            namespaces=args.namespace or (),
            clusterwide=not args.namespace,
            liveness_endpoint=args.liveness,
            memo=handlers.SharedMemo(
                watched_namespaces=len(args.namespace), namespaces=tuple(args.namespace), metrics=registry
            ),
        )

    if not config.leader_election:
        operate()
        return 0
    from runner_operator import leader

    leader.load_kube_config()
    elector = leader.from_settings(config)
    with leader.standby_health(args.liveness, elector):
        elector.acquire()
    with elector.holding(on_lost=_stop_acting):
        operate()
    return 0


def _serve_metrics(registry: metrics.Registry, port: int) -> None:
    """Serve /metrics before the Lease is held, so a standby is scraped too (leader = 0).

    Metrics are optional: a port already in use is logged, not a reason to stop reconciling.
    """
    if not port:
        return
    try:
        registry.serve(port)
    except OSError as exc:
        logging.getLogger("runner_operator.metrics").error(
            "metrics endpoint not started on port %d: %s", port, exc
        )
        return
    logging.getLogger("runner_operator.metrics").info("metrics on :%d/metrics", port)


def log_level(args: argparse.Namespace, configured: str) -> str:
    """`-v` wins, then `--log-level`, then RUNNER_OPERATOR_LOG_LEVEL."""
    if args.verbose:
        return "debug"
    return str(args.log_level or configured)


def version() -> str:
    """The installed distribution's version (what `pip show managed-runner-operator` says)."""
    from importlib import metadata

    try:
        return metadata.version("managed-runner-operator")
    except metadata.PackageNotFoundError:  # run from a source tree without installing it
        return "0+unknown"


def _stop_acting(why: str) -> None:
    """Leadership lost: exit now, before the Lease can expire for another replica (no two writers)."""
    logging.getLogger("runner_operator.leader").critical("leader election: lost (%s); exiting", why)
    logging.shutdown()
    os._exit(LEADERSHIP_LOST)


class _QuietFeed(logging.Filter):
    """Drop kopf's "Handler 'seen' succeeded." line, logged for every watch event of every object."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Handler 'seen' succeeded."


if __name__ == "__main__":
    sys.exit(main())
