"""`runner-operator plan` decides as the operator does: the same Facts, the same ownership rules.

Each row: what the cloud holds, what the cluster says about the manifest (nothing: not applied,
or no kubeconfig), and the one thing the plan must show.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner_operator import claiming, commands, resource
from runner_operator.cloud.client import CloudClient
from runner_operator.desired import desired_runner
from runner_operator.simulator.server import RunningServer

RUNNER = "plan-me"
MANIFEST: dict[str, Any] = {
    "apiVersion": "sandbox.coreweave.com/v1alpha1",
    "kind": "ManagedRunner",
    "metadata": {"name": "r", "namespace": "team"},
    "spec": {
        "runnerId": RUNNER,
        "clusterId": "3f6c1d2e-8b4a-4c1f-9e7d-2a5b6c7d8e9f",
        "zone": "us-east-04a",
        "displayName": "mine",
        "policy": {},
    },
}


def manifest(**spec: Any) -> dict[str, Any]:
    return {**MANIFEST, "spec": {**MANIFEST["spec"], **spec}}


def live(
    status: Mapping[str, Any] | None = None,
    *,
    deleting: bool = False,
    claims: tuple[claiming.Claim, ...] = (),
) -> commands.Live:
    meta = {
        "name": "r",
        "namespace": "team",
        "uid": "u-1",
        "generation": 3,
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-06-01T00:00:00Z"
    body = {**MANIFEST, "metadata": meta, "status": dict(status or {})}
    return commands.Live(body, claims or (claiming.claim(body)[1],))


async def made_elsewhere(cloud: CloudClient, **spec: Any) -> None:
    parsed = resource.ManagedRunnerSpec.model_validate(manifest(**spec)["spec"])
    await cloud.create(desired_runner(parsed, {}), "made-elsewhere")


@pytest.mark.parametrize(
    ("cloud_has", "cluster", "calls", "blocked", "note"),
    [
        pytest.param(
            None,
            None,
            [f"POST /v1/sandbox/managedRunners?requestId={commands.UNKNOWN_KEY}"],
            False,
            "will be created",
            id="new-runner",
        ),
        pytest.param({"displayName": "theirs"}, None, [], True, "RunnerIdTaken", id="taken-not-adopted"),
        pytest.param(
            {"displayName": "theirs", "adopt": True},
            None,
            [f"PATCH /v1/sandbox/managedRunners/{RUNNER}?updateMask=displayName"],
            False,
            "adopted",
            id="adopted-then-updated",
        ),
        pytest.param({"displayName": "mine"}, live({"runnerId": RUNNER}), [], False, "", id="bound-in-sync"),
        pytest.param(
            {"displayName": "old"},
            live({"runnerId": RUNNER}),
            [f"PATCH /v1/sandbox/managedRunners/{RUNNER}?updateMask=displayName"],
            False,
            "",
            id="bound-spec-change",
        ),
        pytest.param(
            {"displayName": "mine"},
            live({"runnerId": RUNNER}, deleting=True),
            [f"DELETE /v1/sandbox/managedRunners/{RUNNER}?allowMissing=true"],
            False,
            "",
            id="bound-deleting",
        ),
        pytest.param(
            None,
            live(
                claims=(
                    (0, "2025-01-01T00:00:00Z", "team/first", "u-0"),
                    (1, "2026-01-01T00:00:00Z", "team/r", "u-1"),
                )
            ),
            [],
            True,
            "DuplicateRunnerId",
            id="claimed-by-another-resource",
        ),
    ],
)
async def test_plan_follows_the_operators_ownership_rules(
    server: RunningServer,
    cloud: CloudClient,
    cloud_has: dict[str, Any] | None,
    cluster: commands.Live | None,
    calls: list[str],
    blocked: bool,
    note: str,
) -> None:
    spec = dict(cloud_has or {})
    adopt = spec.pop("adopt", False)
    if cloud_has is not None:
        await made_elsewhere(cloud, **spec)
    now = datetime.fromtimestamp(server.simulator.now(), UTC) + timedelta(hours=1)
    planned = await commands.plan_one(manifest(adopt=adopt), cloud, live=cluster, now=now)
    assert [c.line() for c in planned.shown.calls] == calls
    assert planned.writes == bool(calls)
    assert planned.blocked is blocked
    assert note in planned.shown.note
    text = planned.shown.text()
    assert ("already matches the spec" in text) is (not calls and not planned.shown.note)


def test_a_new_manifest_claims_after_every_applied_one() -> None:
    applied = claiming.claim(
        {
            **MANIFEST,
            "metadata": {**MANIFEST["metadata"], "uid": "u-9", "creationTimestamp": "2099-01-01T00:00:00Z"},
        }
    )
    planned = claiming.claim(
        {**MANIFEST, "metadata": {**MANIFEST["metadata"], "name": "new", "uid": claiming.PLANNED_UID}}
    )
    assert planned[1] > applied[1]
    assert claiming.claimed_by(RUNNER, "team", claiming.PLANNED_UID, [applied[1], planned[1]]) == "team/r"
    assert (
        claiming.claimed_by(RUNNER, "other", claiming.PLANNED_UID, [applied[1], planned[1]])
        == "in another namespace"
    )
    assert claiming.claimed_by(RUNNER, "team", "u-9", [applied[1], planned[1]]) is None
    assert claiming.claimed_by(RUNNER, "team", "u-9", [applied[1]]) is None
