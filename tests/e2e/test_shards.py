"""Shards (issue 16): N processes split the ManagedRunners, each shard with its own Lease.

On the real API server: three shards over 60 ManagedRunners, each object handled by exactly one
shard (the one `sharding.shard_of` names, from each process's log); then 3 -> 2 -> 4 shards the way a
rolling update does it (the new processes start while the old ones still run, then the old ones
stop), with a spec change of every object during each overlap. The simulator's request log shows
every create and every update exactly once: nothing dropped, nothing doubled.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from runner_operator.sharding import shard_of
from tests.e2e.harness import GROUP, PLURAL, VERSION, OperatorProcess, SimulatorThread, manifest, ready_at
from tests.e2e.kube import Kube, json_object, wait_for
from tests.e2e.test_crash_safety import mutating_calls
from tests.e2e.test_leader_election import HOLDS
from tests.e2e.test_lifecycle import create, patch_spec

OBJECTS = 60
HANDLES = re.compile(r"Shard (\d+)/(\d+) handles ([^/\s]+)/([^/\s]+)\.$", re.MULTILINE)


def shard(kube: Kube, ns: str, sim: SimulatorThread, tmp_path: Path, spec: str) -> OperatorProcess:
    env = {
        "RUNNER_OPERATOR_LEADER_ELECTION": "true",
        "RUNNER_OPERATOR_LEADER_ELECTION_NAMESPACE": ns,
        "RUNNER_OPERATOR_SHARD": spec,
        "RUNNER_OPERATOR_REQUESTS_PER_SECOND": "60",  # 1/N each (sharding rule 5)
    }
    return OperatorProcess(kube.kubeconfig, [ns], sim.url, tmp_path, env=env).start()


def handled(proc: OperatorProcess) -> set[tuple[str, str, int, int]]:
    return {(ns, name, int(i), int(n)) for i, n, ns, name in HANDLES.findall(proc.output())}


def all_ready(kube: Kube, ns: str, generation: int) -> list[dict[str, Any]] | None:
    found = json_object(kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL))["items"]
    ready = [obj for obj in found if ready_at(obj, generation)]
    return found if len(ready) == OBJECTS else None


def assert_each_object_has_one_shard(procs: list[OperatorProcess], ns: str, count: int) -> None:
    """Every object named by exactly one of these processes, the shard `shard_of` gives it."""
    seen = Counter((n, name) for proc in procs for n, name, _, _ in handled(proc))
    assert set(seen) == {(ns, f"s{i:02d}") for i in range(OBJECTS)}
    assert set(seen.values()) == {1}, [k for k, v in seen.items() if v > 1]
    for proc in procs:
        for n, name, index, total in handled(proc):
            assert (total, index) == (count, shard_of(n, name, count))
    assert all(handled(p) for p in procs), "a shard handled nothing"


def change_every_spec(kube: Kube, ns: str, label: str) -> None:
    for i in range(OBJECTS):
        patch_spec(kube, ns, f"s{i:02d}", {"displayName": label})


def test_shards_split_the_objects_and_a_change_of_count_drops_or_doubles_nothing(
    kube: Kube, crd: str, own_sim: SimulatorThread, tmp_path: Path
) -> None:
    ns = kube.new_namespace("shards")
    kube.create_secret(ns, "coreweave-api", {"token": own_sim.token})
    ids = []
    for i in range(OBJECTS):
        body = manifest(f"s{i:02d}")
        ids.append(body["spec"]["runnerId"])
        create(kube, ns, body)
    procs: list[OperatorProcess] = []
    try:
        three = [shard(kube, ns, own_sim, tmp_path, f"{i}/3") for i in range(3)]
        procs += three
        wait_for(lambda: all_ready(kube, ns, 1), timeout=180, what="60 Ready over 3 shards")
        assert_each_object_has_one_shard(three, ns, 3)

        gaps = []
        generation = 1
        old = three
        for count in (2, 4):
            new = [shard(kube, ns, own_sim, tmp_path, f"{i}/{count}") for i in range(count)]
            procs += new
            for proc in new:  # they wait while the old count acts (a rolling update's overlap)
                proc.wait_for_log("held with another shard count", timeout=60)
            generation += 1
            change_every_spec(kube, ns, f"overlap to {count}")
            wait_for(partial(all_ready, kube, ns, generation), timeout=180, what=f"generation {generation}")
            assert not any(HOLDS in p.output() for p in new), "a new shard acted during the overlap"
            first_stop = time.monotonic()
            for proc in old:
                proc.stop()
                assert proc.exited() == 0
            for proc in new:
                proc.wait_for_log(HOLDS, timeout=60)
            gaps.append(time.monotonic() - first_stop)
            generation += 1
            change_every_spec(kube, ns, f"on {count}")
            wait_for(partial(all_ready, kube, ns, generation), timeout=180, what=f"generation {generation}")
            assert_each_object_has_one_shard(new, ns, count)
            old = new
        print(f"first old shard stopping -> every new shard acting: {', '.join(f'{g:.1f} s' for g in gaps)}")
    finally:
        for proc in procs:
            proc.stop()
    assert mutating_calls(own_sim, ids[0])["create"] == OBJECTS
    for runner_id in ids:
        calls = mutating_calls(own_sim, runner_id)
        assert (calls["update"], calls["delete"]) == (4, 0), (runner_id, calls)
