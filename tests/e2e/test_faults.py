"""The fault suite: API faults, the operator killed, the API server restarted, bad credentials, scale.

Each scenario owns a simulator (its own API token), a namespace and an operator watching only
that namespace, and measures: time to converge (or to the expected condition), the API calls the
operator made (total, in the fault window, the busiest second), the final cloud-versus-Kubernetes
check and a scan of every output for secrets. Outcomes go to a JSON file as they finish;
`RELIABILITY_REPORT=docs/reliability.md pytest tests/e2e/test_faults.py` also writes the report.

SIGKILL during create, rollout and delete and deletion while the operator is down are in
test_crash_safety.py; this module adds the kill in the middle of an update.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from runner_operator import cadence
from tests.e2e import reliability
from tests.e2e.faults_harness import OPERATOR_ENV, TOKEN_SECRET, FaultEnv, new_token
from tests.e2e.harness import condition
from tests.e2e.kube import Kube, wait_for
from tests.e2e.reliability import cloud_matches

T = TypeVar("T")

HERE = "tests/e2e/test_faults.py"


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    started = time.monotonic()
    yield
    settings = {
        **OPERATOR_ENV,
        "simulator timings": "install 0.5 s, provision 1 s, rollout 1 s, delete 1.5 s",
    }
    written = reliability.finish(wall_seconds=time.monotonic() - started, settings=settings)
    if written is not None:
        print(f"\nreliability report written to {written} (data: {reliability.json_path()})")


@pytest.fixture
def world(kube: Kube, crd: str, tmp_path: Path) -> Iterator[FaultEnv]:
    env = FaultEnv(kube, tmp_path)
    try:
        yield env
    finally:
        env.close()


def source(name: str) -> str:
    return f"{HERE}::{name}"


# -- API faults ------------------------------------------------------------------------------------


def test_bursts_of_5xx(world: FaultEnv) -> None:
    with reliability.scenario(
        "5xx-burst",
        "Bursts of 5xx",
        fault="5 mixed 500/502/503/504 on every endpoint during create; then 12 x 503 on update",
        expected="the short burst is absorbed by client retries (no condition); the long one reports "
        "Synced=False ApiUnavailable, then converges with one runner and one successful update",
        source=source("test_bursts_of_5xx"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator()
        for status in (500, 502, 503, 504, 503):
            world.fault(endpoint="*", kind="error", status=status, times=1)
        body = world.body("burst", displayName="one")
        runner_id = body["spec"]["runnerId"]
        start = time.monotonic()
        world.create(body)
        rec.time("short burst: create to Ready", world.wait_ready("burst"))
        rec.notes.append(
            f"short burst: {len(world.calls.calls(start))} calls, busiest second "
            f"{world.calls.busiest_second(start)}"
        )
        assert not any("ApiUnavailable" in o for o in rec.observed), rec.observed
        failed = sum(1 for c in world.calls.calls() if c.status >= 500)
        assert failed == 5, failed

        world.fault(endpoint="update", kind="error", status=503, times=12)
        start = time.monotonic()
        generation = world.patch_spec("burst", {"displayName": "two"})
        rec.time(
            "long burst: reported ApiUnavailable", world.wait_reason("burst", "Synced", "ApiUnavailable")
        )
        rec.time("long burst: after the report, to Ready", world.wait_ready("burst", generation=generation))
        took = rec.time("long burst: spec change to Ready", time.monotonic() - start)
        rec.converge_seconds, rec.converge_what = took, "spec change to Ready through 12 x 503"
        calls, busiest = rec.window(world.calls, start, time.monotonic())
        assert (world.cloud.runner(runner_id) or {}).get("displayName") == "two"
        assert world.successful("POST") == 1
        assert world.successful("PATCH", runner_id) == 1
        rec.call_bound = "long burst window <= 12 failures + 1 update + 6 reads; busiest second <= 6"
        assert calls <= 19, calls
        assert busiest <= 6, busiest
        world.final_checks(rec)


def test_failed_spec_change_is_retried_before_the_resync(world: FaultEnv) -> None:
    with reliability.scenario(
        "retry-cadence",
        "A spec change failing transiently is retried soon (resync 600 s)",
        fault="10 x 503 on update (more than one pass of client retries: about 7 fit its 10 s) after a "
        "spec change to a Ready runner",
        expected="Synced=False ApiUnavailable with a non-steady cadence, retried within the medium "
        "interval (30 s), Ready at the new generation once the burst ends",
        source=source("test_failed_spec_change_is_retried_before_the_resync"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator(RUNNER_OPERATOR_RESYNC_INTERVAL="600")
        world.create(world.body("cadence", displayName="one"))
        world.wait_ready("cadence")
        world.fault(endpoint="update", kind="error", status=503, times=10)
        generation = world.patch_spec("cadence", {"displayName": "two"})
        rec.time("reported ApiUnavailable", world.wait_reason("cadence", "Synced", "ApiUnavailable"))
        status = (world.get("cadence") or {}).get("status") or {}
        rec.notes.append(
            "conditions after the failed pass: "
            + ", ".join(
                f"{c['type']}={c['status']} (generation {c.get('observedGeneration')})"
                for c in status.get("conditions") or ()
            )
            + f"; cadence {cadence.of_status(status).cadence!r}"
        )
        rec.call_bound = "n/a (convergence time is the point)"
        assert cadence.of_status(status).cadence != "slow", (
            "an unapplied generation got the steady-state cadence"
        )
        took = rec.time("to Ready", world.wait_ready("cadence", generation=generation, timeout=45))
        rec.converge_seconds, rec.converge_what = took, "after ApiUnavailable"
        world.final_checks(rec)


def test_sustained_429_shares_one_budget(world: FaultEnv) -> None:
    runners, seconds, retry_after = 5, 10.0, 1.0
    with reliability.scenario(
        "429-sustained",
        "Sustained 429 with Retry-After",
        fault=f"every call answered 429 (Retry-After {retry_after:.0f} s) for {seconds:.0f} s "
        f"while {runners} runners on one token each have a spec change to send",
        expected="one shared budget: about one call per Retry-After for all runners together "
        "(not one per runner), Synced=False RateLimited, then every runner converges",
        source=source("test_sustained_429_shares_one_budget"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator()
        names = [f"rl-{i}" for i in range(runners)]
        for name in names:
            world.create(world.body(name, displayName="before"))
        world.wait_ready(*names)
        world.sim.control(
            "PUT", "/faults/rates", {"endpoint": "*", "rate": 1.0, "status": 429, "retryAfter": retry_after}
        )
        start = time.monotonic()
        for name in names:
            world.patch_spec(name, {"displayName": "after"})
        time.sleep(seconds)
        end = time.monotonic()
        world.clear_faults()
        calls, busiest = rec.window(world.calls, start, end)
        took = rec.time("fault end to all Ready", world.wait_ready(*names, generation=2))
        rec.converge_seconds, rec.converge_what = took, "all Ready, after the 429s stop"
        limited = sum(1 for c in world.calls.calls(start, end) if c.status == 429)
        rec.notes.append(
            f"{limited} calls answered 429 in {seconds:.0f} s for {runners} runners "
            f"(unshared, each runner would retry every {retry_after:.0f} s: about {runners * seconds:.0f})"
        )
        bound = runners + 2 * seconds / retry_after
        rec.call_bound = (
            f"window <= {bound:.0f} calls (runners + 2 per Retry-After); busiest second <= {runners + 2}"
        )
        assert calls <= bound, calls
        assert busiest <= runners + 2, busiest
        for name in names:
            obj = world.get(name)
            assert obj is not None
            assert (world.cloud.runner(obj["spec"]["runnerId"]) or {}).get("displayName") == "after"
        world.final_checks(rec)


def test_slow_responses_and_timeouts(world: FaultEnv) -> None:
    with reliability.scenario(
        "slow-timeouts",
        "Slow responses and timeouts",
        fault="0.4 s latency on every call (request timeout 1 s); then 3 update calls hang 5 s; "
        "then every call takes 1.5 s (all time out)",
        expected="slow calls succeed; hung updates time out and are retried (nothing applied twice); "
        "a sustained outage reports Synced=False ApiUnavailable and recovers when it ends",
        source=source("test_slow_responses_and_timeouts"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator(RUNNER_OPERATOR_REQUEST_TIMEOUT="1")
        world.sim.control("PUT", "/faults/latency", {"endpoint": "*", "seconds": 0.4})
        body = world.body("slow", displayName="one")
        runner_id = body["spec"]["runnerId"]
        world.create(body)
        rec.time("slow API: create to Ready", world.wait_ready("slow"))
        world.sim.control("PUT", "/faults/latency", {"endpoint": "*", "seconds": 0})

        world.fault(endpoint="update", kind="hang", times=3, seconds=5)
        generation = world.patch_spec("slow", {"displayName": "two"})
        rec.time("3 hung updates: spec change to Ready", world.wait_ready("slow", generation=generation))
        world.clear_faults()

        world.sim.control("PUT", "/faults/latency", {"endpoint": "*", "seconds": 1.5})
        start = time.monotonic()
        generation = world.patch_spec("slow", {"displayName": "three"})
        rec.time(
            "sustained timeouts: reported ApiUnavailable",
            world.wait_reason("slow", "Synced", "ApiUnavailable"),
        )
        end = time.monotonic()
        rec.notes.append(f"reported: {condition(world.get('slow'), 'Synced').get('message')!r}")
        world.sim.control("PUT", "/faults/latency", {"endpoint": "*", "seconds": 0})
        took = rec.time("outage end to Ready", world.wait_ready("slow", generation=generation))
        rec.converge_seconds, rec.converge_what = took, "Ready, after the outage ends"
        calls, busiest = rec.window(world.calls, start, end)
        assert (world.cloud.runner(runner_id) or {}).get("displayName") == "three"
        hung = world.calls.arrivals("update") - world.successful("PATCH")
        rec.notes.append(f"{hung} update calls hung (or timed out) and were abandoned by the client")
        rec.call_bound = "outage window <= 2 calls per second of outage + 2; busiest second <= 3"
        assert calls <= 2 * (end - start) + 2, calls
        assert busiest <= 3, busiest
        world.final_checks(rec)


def test_dropped_connections(world: FaultEnv) -> None:
    with reliability.scenario(
        "dropped",
        "Dropped connections",
        fault="2 reads and 1 create dropped unanswered, 1 create served but its response lost; "
        "later 1 policy update served but its response lost, 1 dropped",
        expected="one runner (the lost create is replayed with the same request ID); the lost policy "
        "update is resent only with its original etag, which the API refuses (StaleEtag), and the "
        "next pass re-reads and finds it applied",
        source=source("test_dropped_connections"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator()
        world.fault(endpoint="get", kind="drop", times=2)
        world.fault(endpoint="create", kind="drop", times=1)
        world.fault(endpoint="create", kind="lose", times=1)
        body = world.body("dropped")
        runner_id = body["spec"]["runnerId"]
        world.create(body)
        rec.time("create to Ready", world.wait_ready("dropped"))
        assert len(world.cloud.runners()) == 1
        world.fault(endpoint="update", kind="lose", times=1)
        world.fault(endpoint="update", kind="drop", times=1)
        start = time.monotonic()
        policy = {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 1800}}}
        generation = world.patch_spec("dropped", {"policy": policy})
        took = rec.time("policy change to Ready", world.wait_ready("dropped", generation=generation))
        rec.converge_seconds, rec.converge_what = took, "policy change to Ready"
        calls, _busiest = rec.window(world.calls, start, time.monotonic())
        cloud = world.cloud.runner(runner_id)
        assert cloud is not None
        assert cloud["policy"]["constraints"]["lifecycle"]["defaultLifetimeSeconds"] == 1800
        served = [c for c in world.calls.calls() if c.method == "PATCH" and c.status in (0, 200)]
        rec.notes.append(
            "update calls: "
            + ", ".join(
                f"{c.status or 'no response'}{f' ({c.fault})' if c.fault else ''}"
                for c in world.calls.calls()
                if c.method == "PATCH"
            )
        )
        assert len(served) <= 3
        rec.call_bound = "policy change window <= 12 calls"
        assert calls <= 12, calls
        world.final_checks(rec)


def test_install_failure_and_disconnection_recover(world: FaultEnv) -> None:
    with reliability.scenario(
        "install-disconnect",
        "Install failure then recovery; disconnection",
        fault="runner A's install fails as it finishes; runner B disconnects once Ready; both are "
        "fixed in the cloud 3 s after the operator reports them",
        expected="A: Ready=False InstallFailed + Event; B: Ready=False Disconnected + Event; slow "
        "polling while degraded (no hot loop); both Ready again after the fix",
        source=source("test_install_failure_and_disconnection_recover"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator(RUNNER_OPERATOR_RESYNC_INTERVAL="4")
        a, b = world.body("install-fails"), world.body("disconnects")
        a_id, b_id = a["spec"]["runnerId"], b["spec"]["runnerId"]
        world.create(b)
        world.wait_ready("disconnects")
        world.create(a)
        wait_for(lambda: world.cloud.runner(a_id), timeout=30, what="runner A created")
        world.cloud.run(lambda s: s.fail_install(a_id, immediately=False))
        world.cloud.run(lambda s: s.disconnect(b_id))
        start = time.monotonic()
        rec.time("A reported InstallFailed", world.wait_reason("install-fails", "Ready", "InstallFailed"))
        rec.time("B reported Disconnected", world.wait_reason("disconnects", "Ready", "Disconnected"))
        time.sleep(3)
        end = time.monotonic()
        calls, _busiest = rec.window(world.calls, start, end)
        world.cloud.run(lambda s: s.recover_install(a_id))
        world.cloud.run(lambda s: s.reconnect(b_id))
        took = rec.time("fix to both Ready", world.wait_ready("install-fails", "disconnects", timeout=75))
        rec.converge_seconds, rec.converge_what = took, "both Ready after the fix; medium cadence 30 s"
        reasons = world.event_reasons()
        assert "InstallFailed" in reasons, reasons
        assert "Disconnected" in reasons, reasons
        rec.call_bound = "degraded window: <= 4 calls per runner"
        assert calls <= 8, calls
        assert world.successful("POST") == 2
        world.final_checks(rec)


def test_concurrent_writer_races_policy_updates(world: FaultEnv) -> None:
    races = 2
    with reliability.scenario(
        "stale-etag",
        "Concurrent writer racing policy updates",
        fault=f"for each of {races} policy changes, another writer changes the policy while the "
        "operator's PATCH is in flight (0.5 s update latency), so the PATCH carries a stale etag",
        expected="Synced=False StaleEtag, then a fresh read and a re-planned write: the spec's policy "
        "wins, one successful policy write per change, never a blind resend",
        source=source("test_concurrent_writer_races_policy_updates"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator()
        body = world.body("race")
        runner_id = body["spec"]["runnerId"]
        world.create(body)
        world.wait_ready("race")
        world.sim.control("PUT", "/faults/latency", {"endpoint": "update", "seconds": 0.5})
        start = time.monotonic()
        took = 0.0
        for n in range(races):
            seconds = 3600 + n
            since = time.monotonic()
            before = world.calls.arrivals("update")
            generation = world.patch_spec(
                "race", {"policy": {"constraints": {"lifecycle": {"defaultLifetimeSeconds": seconds}}}}
            )
            wait_for(partial(_more_arrivals, world, "update", before), timeout=30, what="PATCH in flight")
            world.sim.control(
                "PATCH",
                f"/runners/{runner_id}",
                {"policy": {"constraints": {"lifecycle": {"defaultLifetimeSeconds": 60 + n}}}},
            )
            took = max(
                took, rec.time(f"change {n + 1} to Ready", world.wait_ready("race", generation=generation))
            )
            cloud = world.cloud.runner(runner_id)
            assert cloud is not None
            assert cloud["policy"]["constraints"]["lifecycle"]["defaultLifetimeSeconds"] == seconds
            assert world.calls.count(since, method="PATCH", status=200) == 1, "one write per change"
        rec.converge_seconds, rec.converge_what = took, "slowest raced change to Ready"
        calls, _busiest = rec.window(world.calls, start, time.monotonic())
        patches = [c for c in world.calls.calls(start) if c.method == "PATCH"]
        stale = sum(1 for c in patches if c.status == 400 and c.fault is None)
        rec.notes.append(f"{stale} PATCH calls were refused for a stale etag (FAILED_PRECONDITION, HTTP 400)")
        assert stale == races, stale
        # Never a blind resend: the PATCH that follows a refused one comes after a fresh read.
        calls_after = world.calls.calls(start)
        for i, refused in enumerate(calls_after):
            if refused.method != "PATCH" or refused.status != 400:
                continue
            later = calls_after[i + 1 :]
            resent = next((k for k, c in enumerate(later) if c.method == "PATCH"), None)
            if resent is not None:
                assert any(c.method == "GET" for c in later[:resent]), (
                    "a PATCH was resent without a fresh read"
                )
        assert any("StaleEtag" in o for o in rec.observed), rec.observed
        rec.call_bound = f"<= {6 * races} calls for {races} raced changes"
        assert calls <= 6 * races, calls
        world.final_checks(rec)


# -- the operator, the API server, credentials -----------------------------------------------------


def test_killed_in_the_middle_of_an_update(world: FaultEnv) -> None:
    with reliability.scenario(
        "kill-update",
        "SIGKILL at the update step",
        fault="the operator is SIGKILLed while its PATCH is being served (2 s update latency), "
        "then restarted",
        expected="the restarted operator finds the change applied (or applies it): one successful "
        "update, the new generation Ready, one runner",
        source=source("test_killed_in_the_middle_of_an_update"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        op = world.operator()
        body = world.body("kill-update", releaseChannel="RELEASE_CHANNEL_STABLE")
        runner_id = body["spec"]["runnerId"]
        world.create(body)
        world.wait_ready("kill-update")
        world.sim.control("PUT", "/faults/latency", {"endpoint": "update", "seconds": 2})
        before = world.calls.arrivals("update")
        generation = world.patch_spec("kill-update", {"releaseChannel": "RELEASE_CHANNEL_RAPID"})
        wait_for(lambda: world.calls.arrivals("update") > before, timeout=30, what="PATCH in flight")
        op.kill()
        killed = time.monotonic()
        world.sim.control("PUT", "/faults/latency", {"endpoint": "update", "seconds": 0})
        time.sleep(2.5)  # the PATCH the dead operator sent completes (or not) meanwhile
        calls, _ = rec.window(world.calls, killed, time.monotonic())
        assert calls <= 1, "calls while no operator runs: at most the PATCH in flight"
        world.operator()
        took = rec.time("restart to Ready", world.wait_ready("kill-update", generation=generation))
        rec.converge_seconds, rec.converge_what = took, "operator restart to Ready"
        rec.time("kill to Ready", time.monotonic() - killed)
        cloud = world.cloud.runner(runner_id)
        assert cloud is not None
        assert cloud["spec"]["releaseChannel"] == "RELEASE_CHANNEL_RAPID"
        updates = world.successful("PATCH", runner_id)
        rec.notes.append(f"successful updates: {updates}; creates: {world.successful('POST')}")
        assert updates == 1, updates
        assert world.successful("POST") == 1
        world.final_checks(rec)


def test_api_server_restart_breaks_watches(world: FaultEnv, kube: Kube) -> None:
    if kube.cluster is None:
        pytest.skip("needs the local control plane (restarts its kube-apiserver)")
    with reliability.scenario(
        "apiserver-restart",
        "API server restarted, watch streams broken",
        fault="kube-apiserver SIGKILLed and restarted (same port and etcd) while a runner is Ready",
        expected="the operator re-establishes its watches: a spec change and a new resource made "
        "right after the restart converge; no duplicate runner",
        source=source("test_api_server_restart_breaks_watches"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator()
        world.create(world.body("before", displayName="one"))
        world.wait_ready("before")
        started = time.monotonic()
        kube.cluster.restart_apiserver()
        rec.time("apiserver restart", time.monotonic() - started)
        after = time.monotonic()
        calls, _ = rec.window(world.calls, started, after)
        rec.call_bound = "while the apiserver is down: <= 2 calls (a resync at most)"
        assert calls <= 2, calls
        generation = wait_for(
            lambda: _try(lambda: world.patch_spec("before", {"displayName": "two"})),
            timeout=30,
            what="spec patched after the restart",
        )
        world.create(world.body("after"))
        world.wait_ready("after")
        world.wait_ready("before", generation=generation)
        took = rec.time("restart done to both converged", time.monotonic() - after)
        rec.converge_seconds, rec.converge_what = took, "apiserver back to both converged"
        assert world.successful("POST") == 2
        world.final_checks(rec)


def _more_arrivals(world: FaultEnv, endpoint: str, before: int) -> bool:
    return world.calls.arrivals(endpoint) > before


def _try(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except Exception:
        return None


def test_credentials_missing_wrong_fixed_then_rotated(world: FaultEnv) -> None:
    rotated = new_token("rotated")
    wrong = new_token("wrong")
    world.also_secret += [rotated, wrong]
    world.cloud.run(lambda s: setattr(s.config, "admin_tokens", (world.token, rotated)))
    with reliability.scenario(
        "credentials",
        "Credentials Secret missing, wrong, fixed, rotated",
        fault="the token Secret is missing; then holds a wrong token; then the right one; then, "
        "while Ready, it is rotated to a new token and the old token is revoked",
        expected="Synced=False CredentialsSecretNotFound, then CredentialsRejected, slow retries "
        "(no hot loop), Ready once fixed; after rotation the new token is used at the next pass",
        source=source("test_credentials_missing_wrong_fixed_then_rotated"),
    ) as rec:
        world.watch(rec)
        world.operator()
        body = world.body("creds")
        runner_id = body["spec"]["runnerId"]
        world.create(body)
        rec.time("missing: reported", world.wait_reason("creds", "Synced", "CredentialsSecretNotFound"))
        world.token_secret(wrong)
        start = time.monotonic()
        rec.time("wrong: reported", world.wait_reason("creds", "Synced", "CredentialsRejected", timeout=75))
        time.sleep(2)
        end = time.monotonic()
        world.kube.core.patch_namespaced_secret(
            TOKEN_SECRET, world.ns, {"stringData": {"token": world.token}}
        )
        took = rec.time("fixed to Ready", world.wait_ready("creds", timeout=75))
        calls, _busiest = rec.window(world.calls, start, end)
        rec.converge_seconds, rec.converge_what = took, "Secret fixed to Ready; medium cadence 30 s"
        rejected = sum(1 for c in world.calls.calls() if c.status == 401)
        rec.notes.append(f"{rejected} calls were refused with 401 in total")

        world.kube.core.patch_namespaced_secret(TOKEN_SECRET, world.ns, {"stringData": {"token": rotated}})
        world.cloud.run(lambda s: setattr(s.config, "admin_tokens", (rotated,)))
        rotated_at = time.monotonic()
        generation = world.patch_spec("creds", {"displayName": "after rotation"})
        rec.time("rotation: spec change to Ready", world.wait_ready("creds", generation=generation))
        assert (world.cloud.runner(runner_id) or {}).get("displayName") == "after rotation"
        assert world.calls.count(rotated_at, status=401) == 0, "the old token was used after rotation"
        rec.call_bound = "wrong-token window <= 4 calls"
        assert calls <= 4, calls
        world.final_checks(rec)


def test_many_resources_at_once(world: FaultEnv) -> None:
    count = 25
    with reliability.scenario(
        "many",
        f"{count} ManagedRunners at once",
        fault=f"{count} ManagedRunners created in one namespace at once (one token), "
        "then all deleted at once",
        expected="all Ready, then all gone with their runners; calls within the shared budget "
        "(set to 8/s, burst 10 via RUNNER_OPERATOR_REQUESTS_PER_SECOND/_REQUEST_BURST)",
        source=source("test_many_resources_at_once"),
    ) as rec:
        world.watch(rec)
        world.token_secret()
        world.operator(RUNNER_OPERATOR_REQUESTS_PER_SECOND="8", RUNNER_OPERATOR_REQUEST_BURST="10")
        names = [f"many-{i:02d}" for i in range(count)]
        bodies = [world.body(name) for name in names]
        start = time.monotonic()
        threads = [threading.Thread(target=world.create, args=(b,)) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = rec.time("all created to all Ready", world.wait_ready(*names, timeout=120))
        rec.converge_seconds, rec.converge_what = took, "all 25 Ready"
        _calls, busiest = rec.window(world.calls, start, time.monotonic())
        live = cloud_matches(world.kube, world.ns, world.cloud)
        creates = world.successful("POST")
        rec.notes.append(
            f"{creates} successful create calls for {count} runners "
            f"({creates - count} idempotent replays of a persisted request ID)"
        )
        assert len(world.cloud.runners()) == count
        assert creates <= count + 3, creates
        steady = world.calls.calls(start + 2.0, start + took)
        rate = len(steady) / max(took - 2.0, 1.0)
        rec.notes.append(f"mean call rate after the first 2 s: {rate:.1f}/s (budget 8/s)")
        rec.call_bound = (
            "busiest second <= 22 (burst 10 + 8/s, plus slack: timestamps are taken server-side), "
            "mean rate after the first 2 s <= 9.5/s"
        )
        assert busiest <= 22, busiest
        assert rate <= 9.5, rate
        deleted = time.monotonic()
        world.kube.kubectl("delete", "managedrunners", "--all", "-n", world.ns, "--wait=false")
        rec.time("all deleted to all gone", world.wait_gone(*names, timeout=120))
        rec.notes.append(
            f"create phase: {len(world.calls.calls(start, deleted))} calls; delete phase: "
            f"{world.successful('DELETE')} delete calls, "
            f"{len(world.calls.calls(deleted))} calls, busiest second {world.calls.busiest_second(deleted)}"
        )
        assert world.cloud.runners() == {}
        assert count <= world.successful("DELETE") <= count + 3
        world.final_checks(rec)
        rec.cloud = f"{live} while they exist; after deleting all: {rec.cloud}"
