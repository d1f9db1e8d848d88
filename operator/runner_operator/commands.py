"""The `plan` and `export` commands: Terraform's plan and import, the Kubernetes way.

`plan` reads the live runner and prints the exact calls the operator would make for a manifest,
with secrets masked. `export` writes ManagedRunner manifests (with `adopt: true`) for the runners
of an organization, so a team can move to GitOps without recreating anything.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pydantic
import yaml

from runner_operator import claiming, exporting, planning, preview, reconciling, resource
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import CloudRunner
from runner_operator.cloud.runners import Runners
from runner_operator.desired import desired_runner

UNKNOWN_KEY = "<derived from the resource UID when applied>"
STEPS = 4
"""Bookkeeping actions (reserving the create key, adopting) the plan follows to the call after them."""


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, exit status 1, no traceback."""


@dataclass(frozen=True)
class Live:
    """The cluster's side of a manifest, read when a kubeconfig is reachable."""

    body: Mapping[str, Any] | None
    """the ManagedRunner of that namespace and name, if it exists (its status says what it holds)."""
    claims: tuple[claiming.Claim, ...] = ()
    """every ManagedRunner's claim on the manifest's runner ID."""


@dataclass(frozen=True)
class Planned:
    name: str
    runner_id: str
    shown: preview.Preview
    writes: bool
    """the operator would send a create, update or delete for this manifest."""
    blocked: bool


def load_manifests(path: Path) -> list[dict[str, Any]]:
    """The ManagedRunner documents of a YAML file ('-' reads standard input)."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise UserError(f"{path} is not valid YAML{where}: {problem}") from None
    found = [d for d in docs if d.get("kind") == resource.KIND]
    if not found:
        raise UserError(f"no ManagedRunner in {path}")
    return found


def parse(doc: Mapping[str, Any], live: Live | None, namespace: str) -> resource.ManagedRunnerResource:
    """The resource the operator would see once `doc` is applied over `live` (its status kept)."""
    meta: Mapping[str, Any] = doc.get("metadata") or {}
    current: Mapping[str, Any] = (live.body if live else None) or {}
    live_meta: Mapping[str, Any] = current.get("metadata") or {}
    body = {
        **doc,
        "metadata": {
            **meta,
            "name": meta.get("name") or "(unnamed)",
            "namespace": meta.get("namespace") or namespace,
            "uid": live_meta.get("uid") or claiming.PLANNED_UID,
            "generation": live_meta.get("generation") or 1,
            "deletionTimestamp": live_meta.get("deletionTimestamp"),
            # The operator puts its finalizer on before it creates or adopts anything.
            "finalizers": [resource.FINALIZER],
        },
        "status": dict(current.get("status") or {}),
    }
    try:
        return resource.ManagedRunnerResource.from_body(body)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"spec.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()[:3]
        )
        more = f" (and {len(exc.errors()) - 3} more)" if len(exc.errors()) > 3 else ""
        raise UserError(f"ManagedRunner {body['metadata']['name']}: {problems}{more}") from None


async def plan_one(
    doc: Mapping[str, Any],
    cloud: CloudClient,
    *,
    live: Live | None = None,
    namespace: str = "default",
    secrets: Mapping[tuple[str, str], str] | None = None,
    now: datetime | None = None,
) -> Planned:
    """What the operator would do for `doc`: the same planner, fed as the operator feeds it.

    Ownership follows the operator's rules: a runner this resource does not hold is adopted only with
    `adopt: true` and otherwise reported (RunnerIdTaken); another ManagedRunner's claim on the ID is
    reported (DuplicateRunnerId) when the cluster can be read. Bookkeeping steps (reserving the
    create key, adopting) are followed to the API call that comes after them.
    """
    res = parse(doc, live, namespace)
    runners = Runners(cloud)
    observed = await runners.observe(res.spec.runner_id)
    held_id = reconciling.held_id(res)
    held = await runners.observe(held_id) if held_id else None
    values = dict(secrets or {})
    for ref in res.env_secret_refs():  # unknown Secret values are assumed unchanged
        values.setdefault((ref.name, ref.key), _current_env(res.spec, observed, ref))
    claimed = (
        claiming.claimed_by(res.spec.runner_id, res.namespace, res.uid, live.claims)
        if live is not None
        else None
    )
    facts = reconciling.facts_for(
        res,
        desired_runner(res.spec, values, lenient=res.deleting),
        observed,
        held,
        bound_here=None,
        claimed_by=claimed,
        credential=None,
        now=now or datetime.now(UTC),
    )
    if not res.deleting and reconciling.may_replace(facts):
        facts = dataclasses.replace(facts, cluster_holder=await runners.cluster_holder(res.spec.cluster_id))
    notes: list[str] = []
    action = planning.plan(facts)
    for _ in range(STEPS):
        match action:
            case planning.ReserveRequestId(request_id):
                facts = dataclasses.replace(
                    facts, request_id=request_id, reserved_at=now or datetime.now(UTC)
                )
            case planning.Adopt() | planning.Bind():
                notes.append(preview.preview(action, observed).note)
                facts = dataclasses.replace(facts, bound=True)
            case _:
                break
        action = planning.plan(facts)
    shown = preview.preview(action, observed)
    if res.uid == claiming.PLANNED_UID:  # the create key will come from the uid the API server assigns
        calls = tuple(
            dataclasses.replace(c, query={**c.query, "requestId": UNKNOWN_KEY})
            if "requestId" in c.query
            else c
            for c in shown.calls
        )
        shown = dataclasses.replace(shown, calls=calls)
    if notes:
        shown = dataclasses.replace(shown, note=" ".join([*notes, shown.note]).strip())
    return Planned(
        name=res.name,
        runner_id=res.spec.runner_id,
        shown=shown,
        writes=bool(shown.calls),
        blocked=isinstance(action, planning.Conflict),
    )


def _current_env(spec: resource.ManagedRunnerSpec, observed: CloudRunner | None, ref: Any) -> str:
    """The value the API holds for the env variable that `ref` feeds, or the mask when unknown."""
    current = (
        observed.spec.overrides.env if observed and observed.spec and observed.spec.overrides else None
    ) or {}
    name = next(
        (
            v.name
            for v in (spec.overrides.env if spec.overrides else ())
            if v.value_from and v.value_from.secret_key_ref == ref
        ),
        "",
    )
    return current.get(name, preview.MASK)


def show(results: Sequence[Planned], out: TextIO, *, as_json: bool) -> None:
    if as_json:
        rows = [
            {
                "name": r.name,
                "runnerId": r.runner_id,
                "writes": r.writes,
                "blocked": r.blocked,
                **r.shown.as_json(),
            }
            for r in results
        ]
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    for r in results:
        out.write(f"# ManagedRunner {r.name} (runner {r.runner_id})\n{r.shown.text()}\n\n")


async def export(
    cloud: CloudClient,
    out_dir: Path,
    *,
    namespace: str,
    credentials_secret: str,
    only: Sequence[str] = (),
) -> list[Path]:
    """Write one manifest per runner (and a Secret manifest for env values, kept apart from Git).

    Runner IDs asked for and not found are an error before anything is written: a typo must not
    look like an export of nothing.
    """
    runners = [r async for r in cloud.iter_runners() if not only or r.runner_id in only]
    missing = sorted(set(only) - {r.runner_id for r in runners})
    if missing:
        raise UserError(f"no runner {', '.join(missing)} visible to this token: nothing written")
    return write_exports(runners, out_dir, namespace=namespace, credentials_secret=credentials_secret)


def write_exports(
    runners: Sequence[CloudRunner], out_dir: Path, *, namespace: str, credentials_secret: str
) -> list[Path]:
    written: list[Path] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for runner in runners:
        manifest, secret = exporting.to_manifest(
            runner, namespace=namespace, credentials_secret=credentials_secret
        )
        path = out_dir / f"{runner.runner_id}.yaml"
        path.write_text(exporting.HEADER + yaml.safe_dump(manifest, sort_keys=False))
        written.append(path)
        if secret is not None:
            secrets_dir = out_dir / "secrets"
            secrets_dir.mkdir(exist_ok=True)
            secret_path = secrets_dir / f"{runner.runner_id}-env.yaml"
            secret_path.write_text(exporting.SECRET_HEADER + yaml.safe_dump(secret, sort_keys=False))
            secret_path.chmod(0o600)
            written.append(secret_path)
    return written
