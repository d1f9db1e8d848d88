"""The `plan` and `export` commands: Terraform's plan and import, the Kubernetes way.

`plan` reads the live runner and prints the exact calls the operator would make for a manifest,
with secrets masked. `export` writes ManagedRunner manifests (with `adopt: true`) for the runners
of an organization, so a team can move to GitOps without recreating anything.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from runner_operator import exporting, planning, preview, resource
from runner_operator.cloud.client import CloudClient
from runner_operator.cloud.models import CloudRunner
from runner_operator.desired import desired_runner

UNKNOWN_KEY = "<derived from the resource UID when applied>"


def load_manifests(path: Path) -> list[dict[str, Any]]:
    """The ManagedRunner documents of a YAML file ('-' reads standard input)."""
    text = sys.stdin.read() if str(path) == "-" else path.read_text()
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    return [d for d in docs if d.get("kind") == resource.KIND]


async def plan(
    manifests: Sequence[Mapping[str, Any]],
    cloud: CloudClient,
    *,
    secrets: Mapping[tuple[str, str], str] | None = None,
    out: TextIO = sys.stdout,
    as_json: bool = False,
) -> int:
    """Print what applying each manifest would do; exit code 2 when any is blocked."""
    blocked = False
    results: list[dict[str, Any]] = []
    for doc in manifests:
        spec = resource.ManagedRunnerSpec.model_validate(doc.get("spec") or {})
        observed = await cloud.find(spec.runner_id)
        values = dict(secrets or {})
        for ref in spec.env_secret_refs():
            # Unknown Secret values are assumed unchanged: compare with what the API has.
            current = (
                observed.spec.overrides.env
                if observed and observed.spec and observed.spec.overrides
                else None
            ) or {}
            name = (
                next(
                    (
                        v.name
                        for v in spec.overrides.env
                        if v.value_from and v.value_from.secret_key_ref == ref
                    ),
                    "",
                )
                if spec.overrides
                else ""
            )
            values.setdefault((ref.name, ref.key), current.get(name, preview.MASK))
        desired = desired_runner(spec, values)
        facts = planning.Facts(
            desired=desired,
            observed=observed,
            bound=observed is not None,
            adopt=spec.adopt,
            request_id=UNKNOWN_KEY,
            new_request_id=UNKNOWN_KEY,
            paused=False,
        )
        action = planning.plan(facts)
        blocked = blocked or isinstance(action, planning.Conflict)
        shown = preview.preview(action, observed)
        name = (doc.get("metadata") or {}).get("name", spec.runner_id)
        if as_json:
            results.append({"name": name, "runnerId": spec.runner_id, **shown.as_json()})
        else:
            out.write(f"# ManagedRunner {name} (runner {spec.runner_id})\n{shown.text()}\n\n")
    if as_json:
        out.write(json.dumps(results, indent=2) + "\n")
    return 2 if blocked else 0


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, exit status 1, no traceback."""


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
