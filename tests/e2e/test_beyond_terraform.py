"""Plan preview, export/adoption and the paused preview (issue 10), on the real API server + simulator.

The plan must be exactly what the operator then sends: compared with the simulator's request log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import yaml

from runner_operator import schemacheck
from tests.e2e.harness import (
    GROUP,
    PLURAL,
    ROOT,
    VERSION,
    OperatorProcess,
    SimulatorThread,
    condition,
    manifest,
)
from tests.e2e.kube import Kube, wait_for
from tests.e2e.test_lifecycle import create, get, patch_spec, wait_ready
from tests.testenv.tools import tool

WRITES = ("POST", "PATCH", "DELETE")


def cli(
    sim: SimulatorThread, tmp_path: Path, *args: str, kube: Kube | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI against the simulator; `plan` reads the cluster of `kube`, or none (--offline)."""
    token = tmp_path / "token"
    token.write_text(sim.token)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    env.pop("COREWEAVE_API_TOKEN", None)
    env[schemacheck.VARIABLE] = tool("managed-runner-validate")  # offline plans check the CRD's rules
    if args[0] == "plan":
        args = (*args, *(("--kubeconfig", str(kube.kubeconfig)) if kube else ("--offline",)))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "runner_operator.cli",
            *args,
            "--endpoint",
            sim.url,
            "--token-file",
            str(token),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def writes_since(sim: SimulatorThread, mark: int, runner_ids: set[str] | None = None) -> list[dict[str, Any]]:
    calls = []
    for entry in sim.requests()[mark:]:
        if entry["method"] not in WRITES or entry["status"] != 200:
            continue
        if (
            runner_ids is not None
            and not any(r in entry["path"] or r in entry.get("query", "") for r in runner_ids)
            and entry["method"] != "POST"
        ):
            continue
        calls.append(entry)
    return calls


def as_call(entry: dict[str, Any]) -> tuple[str, str, str]:
    query = parse_qs(entry.get("query", ""))
    return entry["method"], entry["path"], ",".join(query.get("updateMask", []))


def test_plan_shows_exactly_the_calls_the_operator_makes(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess, tmp_path: Path
) -> None:
    body = manifest("planned", displayName="before", overrides={"args": ["--a"]})
    body["metadata"]["namespace"] = ns
    path = tmp_path / "runner.yaml"
    path.write_text(yaml.safe_dump(body))
    runner_id = body["spec"]["runnerId"]

    planned = cli(sim, tmp_path, "plan", "-f", str(path), "--json", kube=kube)
    assert planned.returncode == 0, planned.stderr
    calls = json.loads(planned.stdout)[0]["calls"]
    assert [(c["method"], c["path"]) for c in calls] == [("POST", "/v1/sandbox/managedRunners")]
    mark = len(sim.requests())
    create(kube, ns, body)
    wait_ready(kube, ns, "planned")
    made = [e for e in writes_since(sim, mark) if runner_id in json.dumps(e) or e["method"] == "POST"]
    assert [(e["method"], e["path"]) for e in made][:1] == [("POST", "/v1/sandbox/managedRunners")]

    changed = {
        **body,
        "spec": {
            **body["spec"],
            "displayName": "after",
            "overrides": {"args": ["--b"]},
            "policy": {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 120}}},
        },
    }
    path.write_text(yaml.safe_dump(changed))
    planned = cli(sim, tmp_path, "plan", "-f", str(path), "--json", kube=kube)
    assert planned.returncode == 0, planned.stderr
    shown = json.loads(planned.stdout)[0]["calls"]
    expected = [(c["method"], c["path"], c["query"].get("updateMask", "")) for c in shown]
    assert expected == [
        ("PATCH", f"/v1/sandbox/managedRunners/{runner_id}", "displayName,policy,spec.overrides")
    ]
    text = cli(sim, tmp_path, "plan", "-f", str(path), kube=kube)
    assert '~ displayName: "before" -> "after"' in text.stdout

    mark = len(sim.requests())
    patch_spec(kube, ns, "planned", {k: changed["spec"][k] for k in ("displayName", "overrides", "policy")})
    wait_ready(kube, ns, "planned", generation=2)
    assert [as_call(e) for e in writes_since(sim, mark, {runner_id})] == expected


def test_plan_masks_secrets(kube: Kube, sim: SimulatorThread, tmp_path: Path) -> None:
    body = manifest(
        "secretive",
        overrides={"env": [{"name": "TOKEN", "value": "plain-secret-value"}]},
        policy={
            "base": {
                "spec": {"containers": [{"name": "x", "env": [{"name": "K", "value": "base-secret-value"}]}]}
            }
        },
    )
    path = tmp_path / "runner.yaml"
    path.write_text(yaml.safe_dump(body))
    out = cli(sim, tmp_path, "plan", "-f", str(path))
    assert out.returncode == 0, out.stderr
    assert "plain-secret-value" not in out.stdout + out.stderr
    assert "base-secret-value" not in out.stdout + out.stderr
    assert sim.token not in out.stdout + out.stderr
    assert "<redacted>" in out.stdout


def test_paused_resource_previews_its_plan_in_status(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess
) -> None:
    body = manifest("preview")
    runner_id = body["spec"]["runnerId"]
    create(kube, ns, body)
    wait_ready(kube, ns, "preview")
    mark = len(sim.requests())
    patch_spec(kube, ns, "preview", {"paused": True, "displayName": "pending"})
    obj = wait_for(
        lambda: (get(kube, ns, "preview") or {}).get("status", {}).get("plan"), timeout=60, what="status.plan"
    )
    assert obj == {"action": "update", "updateMask": ["displayName"]}
    assert writes_since(sim, mark, {runner_id}) == []
    patch_spec(kube, ns, "preview", {"paused": False})
    wait_ready(kube, ns, "preview", generation=3)
    assert [as_call(e) for e in writes_since(sim, mark, {runner_id})] == [
        ("PATCH", f"/v1/sandbox/managedRunners/{runner_id}", "displayName")
    ]
    assert not (get(kube, ns, "preview") or {})["status"].get("plan")


def test_export_then_adopt_makes_no_write_calls(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess, tmp_path: Path
) -> None:
    ids = [f"console-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for i, runner_id in enumerate(ids):
        sim.control(
            "POST",
            "/runners",
            {
                "installed": True,
                "runner": {
                    "identity": {
                        "runnerId": runner_id,
                        "zone": "us-east-04a",
                        "clusterId": str(uuid.uuid4()),
                        "runnerGroupId": "batch" if i else "default",
                    },
                    "displayName": f"made in the console {i}",
                    "spec": {
                        "releaseChannel": "RELEASE_CHANNEL_RAPID",
                        "maintenancePolicy": {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 3600}]},
                        "overrides": {
                            "env": {"LOG_LEVEL": "debug", "API_KEY": "exported-secret"},
                            "resources": {"cpuRequest": "500m", "memoryLimit": "8Gi"},
                        },
                        "dataPlane": {"disabled": {}},
                    },
                    "policy": {
                        "constraints": {
                            "resources": {"maxGpuCount": "0", "defaultCpu": "1"},
                            "lifecycle": {"defaultLifetimeSeconds": 3600},
                        }
                    },
                },
            },
        )
    out_dir = tmp_path / "exported"
    exported = cli(sim, tmp_path, "export", "-o", str(out_dir), "-n", ns, *ids)
    assert exported.returncode == 0, exported.stderr
    files = sorted(p.name for p in out_dir.glob("*.yaml"))
    assert files == sorted(f"{i}.yaml" for i in ids)
    for runner_id in ids:
        assert "exported-secret" not in (out_dir / f"{runner_id}.yaml").read_text()
    mark = len(sim.requests())
    kube.kubectl("apply", "-f", str(out_dir / "secrets"))
    kube.kubectl("apply", "-f", str(out_dir))
    for runner_id in ids:
        obj = wait_ready(kube, ns, runner_id)
        assert obj["status"]["adopted"] is True
    assert writes_since(sim, mark, set(ids)) == []


def console_runner(sim: SimulatorThread, runner_id: str, cluster_id: str, display_name: str) -> None:
    """A runner made outside Kubernetes (the console, Terraform), installed and connected."""
    sim.control(
        "POST",
        "/runners",
        {
            "installed": True,
            "runner": {
                "identity": {"runnerId": runner_id, "zone": "us-east-04a", "clusterId": cluster_id},
                "displayName": display_name,
                "spec": {},
                "policy": {},
            },
        },
    )


def test_detailed_exitcode_is_2_exactly_when_the_operator_writes(
    kube: Kube, ns: str, sim: SimulatorThread, operator: OperatorProcess, tmp_path: Path
) -> None:
    """`plan --detailed-exitcode` against what the operator then does with the same manifest, on the
    simulator's request log: 2 when it creates, updates or deletes, 0 when it sends nothing, and 1
    (Blocked) where the operator refuses to touch a runner it does not own."""
    path = tmp_path / "runner.yaml"

    def plan(body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        path.write_text(yaml.safe_dump({**body, "metadata": {**body["metadata"], "namespace": ns}}))
        return cli(sim, tmp_path, "plan", "-f", str(path), "--detailed-exitcode", kube=kube)

    # A new runner: the operator creates it.
    body = manifest("detailed", displayName="one")
    runner_id = body["spec"]["runnerId"]
    assert plan(body).returncode == 2
    mark = len(sim.requests())
    create(kube, ns, body)
    wait_ready(kube, ns, "detailed")
    assert [e["method"] for e in writes_since(sim, mark, {runner_id})] == ["POST"]

    # Applied and Ready: nothing to send.
    unchanged = plan(body)
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "No API calls" in unchanged.stdout

    # A spec change: one update.
    changed = {**body, "spec": {**body["spec"], "displayName": "two"}}
    assert plan(changed).returncode == 2
    mark = len(sim.requests())
    patch_spec(kube, ns, "detailed", {"displayName": "two"})
    wait_ready(kube, ns, "detailed", generation=2)
    assert [e["method"] for e in writes_since(sim, mark, {runner_id})] == ["PATCH"]

    # A runner someone else made, without adopt: Blocked, and the operator sends nothing.
    taken_id = f"taken-{uuid.uuid4().hex[:6]}"
    cluster_id = str(uuid.uuid4())
    console_runner(sim, taken_id, cluster_id, "made elsewhere")
    taken = manifest("taken", runner_id=taken_id, cluster_id=cluster_id, displayName="ours")
    refused = plan(taken)
    assert refused.returncode == 1
    assert "Blocked (RunnerIdTaken)" in refused.stdout
    mark = len(sim.requests())
    create(kube, ns, taken)
    wait_for(
        lambda: condition(get(kube, ns, "taken"), "Synced").get("reason") == "RunnerIdTaken",
        timeout=60,
        what="RunnerIdTaken",
    )
    assert writes_since(sim, mark, {taken_id}) == []

    # The same runner with adopt: true: adopted, then its display name updated.
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "taken")
    wait_for(lambda: get(kube, ns, "taken") is None, timeout=60, what="taken gone")
    adopted = manifest("adopted", runner_id=taken_id, cluster_id=cluster_id, displayName="ours", adopt=True)
    shown = plan(adopted)
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "adopted" in shown.stdout
    mark = len(sim.requests())
    create(kube, ns, adopted)
    wait_ready(kube, ns, "adopted")
    assert [e["method"] for e in writes_since(sim, mark, {taken_id})] == ["PATCH"]
    assert plan(adopted).returncode == 0
