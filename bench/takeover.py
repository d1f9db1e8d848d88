"""Leader election takeover times on the real API server (issue 16), with the default timings.

    python -m bench.takeover [--rounds 5] [--out FILE]

Each round: replica A leads, replica B waits; A is SIGKILLed (a node loss) and then, in a second
measurement, B is stopped cleanly with a standby C waiting (a rolling update). Reported: seconds
from the kill / the SIGTERM until the Lease names the new holder, and until a spec change made at
that moment is Ready (the new leader has started kopf and reconciled).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "operator"))

from bench.scale import apply_crd  # noqa: E402
from tests.e2e.conftest import E2E_TIMINGS  # noqa: E402
from tests.e2e.harness import SimulatorThread, manifest  # noqa: E402
from tests.e2e.kube import Kube  # noqa: E402
from tests.e2e.test_leader_election import HOLDS, handover, holder, replica  # noqa: E402
from tests.e2e.test_lifecycle import create, patch_spec, wait_ready  # noqa: E402
from tests.testenv.localcluster import LocalCluster  # noqa: E402


def one_round(kube: Kube, sim: SimulatorThread, work: Path, k: int) -> dict[str, float]:
    ns = kube.new_namespace("takeover")
    kube.create_secret(ns, "coreweave-api", {"token": sim.token})
    a = replica(kube, ns, sim, work)
    procs = [a]
    try:
        a.wait_for_log(HOLDS, timeout=60)
        b = replica(kube, ns, sim, work)
        procs.append(b)
        b.wait_for_log("standby, the Lease is held by", timeout=60)
        create(kube, ns, manifest("r"))
        wait_ready(kube, ns, "r")
        time.sleep(k % 3)  # the kill lands at different points of the 2 s renewal period

        first = holder(kube, ns)
        killed = time.monotonic()
        a.kill()
        second, kill_lease = handover(kube, ns, first)
        patch_spec(kube, ns, "r", {"displayName": "after the kill"})
        wait_ready(kube, ns, "r", generation=2)
        kill_ready = time.monotonic() - killed

        c = replica(kube, ns, sim, work)
        procs.append(c)
        c.wait_for_log("standby, the Lease is held by", timeout=60)
        stopped = time.monotonic()
        b.stop()
        _, stop_lease = handover(kube, ns, second)
        patch_spec(kube, ns, "r", {"displayName": "after the stop"})
        wait_ready(kube, ns, "r", generation=3)
        stop_ready = time.monotonic() - stopped
    finally:
        for proc in procs:
            proc.stop()
    return {
        "sigkill_to_new_holder_s": kill_lease,
        "sigkill_to_change_ready_s": kill_ready,
        "sigterm_to_new_holder_s": stop_lease,
        "sigterm_to_change_ready_s": stop_ready,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="takeover-"))
    cluster = LocalCluster(work / "cluster").start()
    sim = SimulatorThread(E2E_TIMINGS).start()
    try:
        apply_crd(cluster)
        kube = Kube(cluster.kubeconfig)
        rounds = [one_round(kube, sim, work, k) for k in range(args.rounds)]
    finally:
        sim.stop()
        cluster.stop()
    summary: dict[str, Any] = {"rounds": rounds}
    for key in rounds[0]:
        values = sorted(r[key] for r in rounds)
        summary[key] = {"min": values[0], "median": statistics.median(values), "max": values[-1]}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
