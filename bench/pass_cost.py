"""CPU per steady-state pass (a Ready runner shaped like examples/managedrunner.yaml, list snapshot hit).

    .venv/bin/python -m bench.pass_cost [--passes 3000]

At resync 60 s, N runners cost N/60 such passes a second: this is the floor of the operator's
steady CPU. Reported as ratios measured in one run: the full pass, the same with the semantic-form
memo of cloud/diff.py turned off (each pass then computes every form it needs twice: to plan, and
again to report readiness; the simulator echoes what was sent, and equal values need no form, so
here the two are about the same: the memo counts where a server respells what it stores), and a
pass recognised as quiet and skipped (`runner_operator.quiet`: the same
inputs as the last pass that wrote, sent and reported nothing). Each includes parsing the object,
as the handler does. In-process simulator; no Kubernetes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from runner_operator import reconciling, resource  # noqa: E402
from runner_operator.cloud import budget, diff  # noqa: E402
from runner_operator.cloud.cache import RunnerCache  # noqa: E402
from runner_operator.cloud.client import CloudClient  # noqa: E402
from runner_operator.cloud.runners import Runners  # noqa: E402
from runner_operator.quiet import QuietPasses  # noqa: E402
from runner_operator.resource import FINALIZER  # noqa: E402
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig, Timings  # noqa: E402
from runner_operator.simulator.server import serve  # noqa: E402

SECRETS = {("runner-extra", "registry-mirror-token"): "not-a-real-token"}


async def measure(passes: int) -> dict[str, float]:
    timings = Timings(
        install_seconds=0.01, provision_seconds=0.01, rollout_seconds=0.01, heartbeat_seconds=1e6
    )
    roomy = budget.RequestBudget(1000, 1000)
    async with (
        await serve(SimulatorConfig(timings=timings)) as srv,
        CloudClient(srv.url, DEV_ADMIN_TOKEN, budget=roomy) as client,
    ):
        spec = yaml.safe_load((ROOT / "examples" / "managedrunner.yaml").read_text())["spec"]
        meta = {
            "name": "r",
            "namespace": "ns",
            "uid": "u-1",
            "generation": 1,
            "resourceVersion": "7",
            "finalizers": [FINALIZER],
        }
        body: dict[str, Any] = {"metadata": meta, "spec": spec, "status": {}}
        start = datetime.now(UTC)
        for i in range(20):  # create it and let it become Ready
            outcome = await one(body, Runners(client), start + timedelta(seconds=i))
            body["status"] = {**body["status"], **outcome.status.to_patch()}
            await asyncio.sleep(0.05)
        assert body["status"].get("phase") == "Ready", body["status"].get("phase")
        runners = Runners(client, RunnerCache(client), max_age=1e9)
        results = {}
        for label, kept, quiet in (
            ("memo on", diff._FORMS_KEPT, None),
            ("memo off", 0, None),
            ("memo on again", diff._FORMS_KEPT, None),
            ("quiet, skipped", diff._FORMS_KEPT, QuietPasses()),
        ):
            diff._FORMS_KEPT = kept
            diff._FORMS.clear()
            await one(body, runners, start + timedelta(seconds=100), quiet)  # a steady pass first
            began = time.process_time()
            for i in range(passes):
                outcome = await one(body, runners, start + timedelta(seconds=100 + i / passes), quiet)
                assert not outcome.calls
                assert outcome.unchanged == (quiet is not None)
            results[label] = (time.process_time() - began) / passes * 1000
        return results


async def one(
    body: dict[str, Any], runners: Runners, now: datetime, quiet: QuietPasses | None = None
) -> reconciling.Outcome:
    res = resource.ManagedRunnerResource.from_body(body)
    ctx = reconciling.Context(now=now, deletion_timeout=60, secrets=SECRETS)
    return await reconciling.reconcile(res, runners, ctx, quiet)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passes", type=int, default=3000)
    args = parser.parse_args()
    results = asyncio.run(measure(args.passes))
    for label, ms in results.items():
        print(f"{label:>14}: {ms:.3f} ms CPU per steady pass")
    on = (results["memo on"] + results["memo on again"]) / 2
    print(f"memo on / memo off: {on / results['memo off']:.2f}")
    print(f"skipped / full (memo on): {results['quiet, skipped'] / on:.2f}")
    for label, ms in (("full", on), ("skipped", results["quiet, skipped"])):
        print(f"one core's share at N=3,000, resync 60 s (passes only, {label}): {ms * 3000 / 60 / 10:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
