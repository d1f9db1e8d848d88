"""Leader election for `runner-operator run`: wait for the Lease, keep it, or stop acting.

A standby does not start kopf at all (no watch, no finalizer, no status write): it reads the Lease
every half retry period and answers the health probe. Once it holds the Lease it starts the operator,
and a thread renews the Lease beside it. If a renewal has not succeeded for the renew deadline, or
the Lease shows another holder, the process exits at once (the Deployment restarts it as a
standby): it stops before the Lease expires for anyone else. A clean stop hands the Lease over.
Decisions are `runner_operator.leases`; this module reads, writes and keeps time.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from runner_operator import kubeerrors, leases, sharding
from runner_operator.settings import Settings

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class Conflict(Exception):
    """Someone else wrote the Lease since it was read (or created it first)."""


class LeaseStore(Protocol):
    def read(self) -> tuple[leases.Record, str] | None:
        """The Lease's record and resourceVersion, or None when there is no Lease."""

    def create(self, record: leases.Record) -> str: ...

    def update(self, record: leases.Record, version: str) -> str:
        """Write `record` if the Lease is still at `version` (else Conflict); the new version."""


@dataclass
class KubernetesLeases:
    """The Lease `namespace/name` through the official client, each call bounded by `timeout`."""

    namespace: str
    name: str
    api: Any = None
    timeout: float = 2.0
    count: int = 1
    """the shard count written on the Lease (`sharding.COUNT_ANNOTATION`)."""
    base: str = ""
    """the unsharded Lease name: the other shards' Leases are `peers` (default: `name`)."""

    def __post_init__(self) -> None:
        if self.api is None:
            from kubernetes import client

            self.api = client.CoordinationV1Api()

    def read(self) -> tuple[leases.Record, str] | None:
        from kubernetes import client

        try:
            found = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _record(found), str(found.metadata.resource_version)

    def peers(self) -> dict[str, tuple[leases.Record, int]]:
        """This operator's other Leases (other shards, or another shard count), with their N."""
        found = self.api.list_namespaced_lease(self.namespace, _request_timeout=self.timeout)
        base = self.base or self.name
        return {
            item.metadata.name: (_record(item), _count(item))
            for item in found.items
            if item.metadata.name != self.name and sharding.is_peer(item.metadata.name, base)
        }

    def _metadata(self) -> dict[str, Any]:
        annotations = {sharding.COUNT_ANNOTATION: str(self.count)}
        return {"name": self.name, "namespace": self.namespace, "annotations": annotations}

    def create(self, record: leases.Record) -> str:
        from kubernetes import client

        body = {"metadata": self._metadata(), "spec": _spec(record)}
        try:
            made = self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.timeout)
        except client.ApiException as exc:
            if exc.status == 409:
                raise Conflict("the Lease was created by someone else") from None
            raise
        return str(made.metadata.resource_version)

    def update(self, record: leases.Record, version: str) -> str:
        from kubernetes import client

        body = {
            "metadata": {**self._metadata(), "resourceVersion": version},
            "spec": _spec(record),
        }
        try:
            done = self.api.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self.timeout
            )
        except client.ApiException as exc:
            if exc.status == 409:
                raise Conflict("the Lease changed since it was read") from None
            raise
        return str(done.metadata.resource_version)


def _record(lease: Any) -> leases.Record:
    spec = lease.spec
    return leases.Record(
        holder=spec.holder_identity or "",
        lease_duration=int(spec.lease_duration_seconds or 0),
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        transitions=int(spec.lease_transitions or 0),
    )


def _count(lease: Any) -> int:
    """The shard count a Lease records; 1 when it records none (an unsharded leader's)."""
    text = (lease.metadata.annotations or {}).get(sharding.COUNT_ANNOTATION, "1")
    return int(text) if str(text).isdigit() and int(text) > 0 else 1


def _spec(record: leases.Record) -> dict[str, Any]:
    def stamp(at: datetime.datetime | None) -> str | None:
        return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if at else None

    return {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": record.lease_duration,
        "acquireTime": stamp(record.acquire_time),
        "renewTime": stamp(record.renew_time),
        "leaseTransitions": record.transitions,
    }


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class Elector:
    """One candidate: acquire (blocking), then keep the Lease in a thread, then release it."""

    store: LeaseStore
    identity: str
    timing: leases.Timing = field(default_factory=leases.Timing)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime.datetime] = _now
    shard: sharding.Shard = field(default_factory=sharding.Shard)
    peers: Callable[[], Mapping[str, tuple[leases.Record, int]]] | None = None
    """this operator's other Leases; None: none to agree with (a single Lease, as in tests)."""
    _seen: leases.Seen | None = None
    _peers: dict[str, sharding.Peer] = field(default_factory=dict)
    _version: str = ""
    renewed_at: float | None = None
    """when this process last wrote the Lease as its holder (monotonic), None while a standby."""
    read_at: float | None = None
    """when the Lease was last read successfully: a standby is healthy while this is recent."""

    def try_once(self) -> bool:
        """Read the Lease and, if it is free or ours, write ourselves in. Whether we hold it now."""
        try:
            found = self.store.read()
            now = self.clock()
            self.read_at = now
            self._seen = leases.observe(self._seen, found[0] if found else None, now)
            wanted = leases.claim(self._seen, self.identity, now, self.wall(), self.timing)
            if wanted is None:
                return False
            self._version = self.store.update(wanted, found[1]) if found else self.store.create(wanted)
        except Conflict as exc:
            log.debug("leader election: %s", exc)
            return False
        except Exception as exc:  # the API server is unreachable or refuses: try again next period
            log.warning("leader election: %s", kubeerrors.describe(exc))
            return False
        self._seen = leases.observe(self._seen, wanted, self.clock())
        self.renewed_at = self.clock()
        return True

    def holder(self) -> str:
        return self._seen.record.holder if self._seen and self._seen.record else ""

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Wait until this candidate holds the Lease (False if `stop` was set first)."""
        stop = stop or threading.Event()
        announced, waited_for = "", list[str]()
        while not stop.is_set():
            held, blockers = self.attempt()
            if held:
                as_shard = f" as shard {self.shard}" if self.shard.count > 1 else ""
                log.info("leader election: %s holds the Lease; starting%s", self.identity, as_shard)
                return True
            if blockers and blockers != waited_for:
                waited_for = blockers
                log.info(
                    "leader election: shard %s waits: %s held with another shard count",
                    self.shard,
                    ", ".join(blockers),
                )
            elif self.holder() and self.holder() not in (announced, self.identity):
                announced = self.holder()
                log.info("leader election: standby, the Lease is held by %s", announced)
            seen = self._seen or leases.Seen(None, self.clock())
            stop.wait(
                # jittered: two counts that both stepped back do not retry in step forever
                random.uniform(0.25, 0.75) * self.timing.retry_period
                if blockers
                else leases.wait_before_retry(seen, self.identity, self.clock(), self.timing)
            )
        return False

    def attempt(self) -> tuple[bool, list[str]]:
        """One try: whether this candidate holds its Lease and may act, and which Leases of another
        shard count stand in the way (`sharding` rule 3: read before taking the Lease, to not churn
        it, and again after, since another count may have started meanwhile; then hand it back)."""
        blockers = self.blockers()
        if blockers or not self.try_once():
            return False, blockers
        blockers = self.blockers()
        if blockers:
            self.release()
        return not blockers, blockers

    def blockers(self) -> list[str]:
        """The live Leases of another shard count (`sharding.blocking`); a failed read blocks too."""
        if self.peers is None:
            return []
        try:
            found = self.peers()
        except Exception as exc:  # unknown is not "none": wait and read again
            log.warning("leader election: cannot list the other shards' Leases: %s", kubeerrors.describe(exc))
            return ["(the Leases could not be listed)"]
        now = self.clock()
        self._peers = {
            name: sharding.Peer(
                leases.observe(self._peers[name].seen if name in self._peers else None, record, now), count
            )
            for name, (record, count) in found.items()
        }
        return sharding.blocking(self.shard, self.identity, self._peers, now)

    def keep(self, on_lost: Callable[[str], None], stop: threading.Event) -> None:
        """Renew every retry period until `stop`; call `on_lost` once renewal fails for good."""
        while not stop.wait(self.timing.retry_period):
            why = self.renew_once()
            if why is not None:
                on_lost(why)
                return

    def renew_once(self) -> str | None:
        """One renewal; why leadership is lost (another holder, or past the renew deadline), or None.

        The call to the API is bounded by what is left of the deadline, so a hung request cannot
        keep this process acting past it."""
        left = (self.renewed_at or 0.0) + self.timing.renew_deadline - self.clock()
        if isinstance(self.store, KubernetesLeases):
            self.store.timeout = max(0.1, min(self.timing.retry_period, left))
        if self.try_once():
            return None
        if self.holder() and self.holder() != self.identity:
            return f"the Lease is now held by {self.holder()}"
        if self.clock() - (self.renewed_at or 0.0) >= self.timing.renew_deadline:
            return f"the Lease was not renewed for {self.timing.renew_deadline:g} s"
        return None

    @contextlib.contextmanager
    def holding(self, on_lost: Callable[[str], None]) -> Iterator[None]:
        """Keep the Lease in a thread for the duration of the block; hand it over at the end."""
        stop = threading.Event()
        keeper = threading.Thread(target=self.keep, args=(on_lost, stop), name="lease-renewal", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join(self.timing.retry_period + 5)
            self.release()

    def release(self) -> None:
        """Hand the Lease over at once, if it is still ours (a standby then takes it on its next read)."""
        try:
            found = self.store.read()
            if found is None:
                return
            record = leases.released(found[0], self.identity, self.wall())
            if record is not None:
                self.store.update(record, found[1])
                log.info("leader election: released the Lease")
        except Exception as exc:  # it expires on its own anyway
            log.warning("leader election: could not release the Lease: %s", kubeerrors.describe(exc))


def load_kube_config() -> None:
    """In-cluster config first, then the kubeconfig (as the handlers' clients do)."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


def identity() -> str:
    """The pod's name (or the host's) and a random suffix: a restarted pod is a new candidate."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def lease_namespace(config: Settings) -> str:
    if config.leader_election_namespace:
        return config.leader_election_namespace
    if SERVICE_ACCOUNT_NAMESPACE.exists():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


def from_settings(config: Settings) -> Elector:
    """An elector on the configured Lease (the kubeconfig must be loaded already)."""
    timing = leases.Timing(
        config.leader_election_lease_duration,
        config.leader_election_renew_deadline,
        config.leader_election_retry_period,
    )
    shard = config.sharded()
    store = KubernetesLeases(
        lease_namespace(config),
        shard.lease_name(config.leader_election_lease),
        timeout=timing.retry_period,
        count=shard.count,
        base=config.leader_election_lease,
    )
    return Elector(store, identity(), timing, shard=shard, peers=store.peers)


@contextlib.contextmanager
def standby_health(liveness: str | None, elector: Elector) -> Iterator[None]:
    """Answer the liveness/readiness probe while waiting for the Lease (kopf serves it once it runs):
    200 while the Lease was read within its duration (a healthy standby), 503 otherwise."""
    if not liveness:
        yield
        return
    url = urlparse(liveness)

    class Probe(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recent = (
                elector.read_at is not None
                and elector.clock() - elector.read_at < elector.timing.lease_duration
            )
            ok = self.path.split("?")[0] == (url.path or "/") and recent
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"standby\n" if ok else b"not ready\n")

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), Probe)
    thread = threading.Thread(target=server.serve_forever, name="standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
