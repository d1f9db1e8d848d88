"""Leader election on a coordination.k8s.io/v1 Lease: who may act, decided from what was read.

Any number of replicas run; the one holding the Lease reconciles, the others wait. The rules
(those of client-go's leader election, which controller-runtime, cert-manager and Crossplane use):

- A Lease is taken over only once its record has not changed for its whole `leaseDurationSeconds`,
  timed by this process's own clock from when it first saw that record: clocks of different nodes
  are never compared. A released Lease (no holder) is free at once.
- The holder renews every retry period and gives up (stops acting: the process exits) when it has
  not renewed for the renew deadline, which is shorter than the Lease duration. So a holder that
  lost its connection stops before anyone else may start: never two writers.
- Every write carries the resourceVersion that was read, so two candidates never both win.

Pure: the shell (`leader`) reads and writes the Lease and keeps time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Timing:
    """controller-runtime's defaults: a 15 s Lease, renewed every 2 s, given up after 10 s without renewal."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "leader election needs lease duration > renew deadline > retry period > 0, got "
                f"{self.lease_duration} / {self.renew_deadline} / {self.retry_period}"
            )


@dataclass(frozen=True)
class Record:
    """The Lease's spec: who holds it, for how long, and how often it changed hands."""

    holder: str = ""
    """empty: released (free at once)."""
    lease_duration: int = 15
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


@dataclass(frozen=True)
class Seen:
    """The last record read, and when (this process's monotonic clock) it was first seen as it is."""

    record: Record | None
    at: float


def observe(previous: Seen | None, record: Record | None, now: float) -> Seen:
    """A record unchanged since the last read keeps the time it was first seen: it is ageing."""
    if previous is not None and previous.record == record:
        return previous
    return Seen(record, now)


def free(seen: Seen, me: str, now: float) -> bool:
    """Whether `me` may take the Lease: nobody holds it, it is ours, or its holder stopped renewing."""
    record = seen.record
    if record is None or not record.holder or record.holder == me:
        return True
    return now >= seen.at + record.lease_duration


def claim(seen: Seen, me: str, now: float, wall: datetime, timing: Timing) -> Record | None:
    """The record to write to hold (or keep holding) the Lease, or None while another holds it."""
    if not free(seen, me, now):
        return None
    record = seen.record or Record()
    duration = round(timing.lease_duration)
    if record.holder == me:
        return dataclasses.replace(record, renew_time=wall, lease_duration=duration)
    return Record(
        holder=me,
        lease_duration=duration,
        acquire_time=wall,
        renew_time=wall,
        transitions=record.transitions + (0 if seen.record is None else 1),
    )


def released(record: Record, me: str, wall: datetime) -> Record | None:
    """The record that hands the Lease over at once (on a clean stop), or None when it is not ours."""
    if record.holder != me:
        return None
    return dataclasses.replace(record, holder="", lease_duration=1, renew_time=wall)


def wait_before_retry(seen: Seen, me: str, now: float, timing: Timing) -> float:
    """How long a candidate waits before trying again.

    A standby reads every half retry period, and wakes when the Lease would expire if that is
    sooner: it dates the holder's last renewal by when it first saw it, so reading twice as often
    halves that lateness (measured: SIGKILL to takeover, bench/RESULTS.md). A holder renews every
    retry period.
    """
    record = seen.record
    if record is None or not record.holder or record.holder == me:
        return timing.retry_period
    expires_in = seen.at + record.lease_duration - now
    return max(0.05, min(timing.retry_period / 2, expires_in))
