"""When to look at a ManagedRunner again, and why: the one place for that policy (pure, no I/O).

Decided from the status alone, so the scheduler's feed (which sees only the stored object) and
the pass that just wrote that status always agree:
- fast: something is in flight (a create, an install, a rollout, a decommission);
- medium: degraded or retrying after an error, or stalled on something a person fixes outside
  the spec (a Secret, the token, a route), which no spec change would wake;
- slow: steady, paused, or stalled on something only a spec change fixes (the watch wakes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runner_operator.reasons import Reason


class Cadence(StrEnum):
    FAST = "fast"
    MEDIUM = "medium"
    SLOW = "slow"
    NONE = "none"
    """the finalizer was released: nothing more to look at."""


FIXED_OUTSIDE_THE_SPEC = frozenset(
    {
        Reason.CREDENTIALS_REJECTED,
        Reason.PERMISSION_DENIED,
        Reason.CREDENTIALS_MISSING,
        Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED,
        Reason.CREDENTIALS_SECRET_NOT_FOUND,
        Reason.CREDENTIALS_KEY_MISSING,
        Reason.SECRET_NOT_FOUND,
        Reason.SECRET_KEY_MISSING,
        Reason.SECRET_ACCESS_DENIED,
        Reason.SECRET_READ_FAILED,
        Reason.ENDPOINT_MISROUTED,
        Reason.RUNNER_NOT_VISIBLE,
    }
)
"""Stalled reasons a person fixes outside the spec: Secrets and endpoints are not watched, so the
resource is looked at again at the medium cadence to notice the fix within a minute."""

DEGRADED = frozenset({Reason.INSTALL_FAILED, Reason.DISCONNECTED})
"""Ready reasons of a runner that is up but unwell: the cloud may recover it, slowly."""


@dataclass(frozen=True)
class Verdict:
    cadence: Cadence
    why: str


def of_status(status: Mapping[str, Any]) -> Verdict:
    """The cadence a status calls for (the scheduler's feed calls this on every watch event)."""
    conds = {str(c.get("type")): c for c in status.get("conditions") or () if isinstance(c, Mapping)}
    ready, synced, stalled = conds.get("Ready", {}), conds.get("Synced", {}), conds.get("Stalled", {})
    if stalled.get("status") == "True":
        if synced.get("reason") in FIXED_OUTSIDE_THE_SPEC:
            return Verdict(Cadence.MEDIUM, f"stalled on {synced.get('reason')}, fixed outside the spec")
        return Verdict(Cadence.SLOW, "stalled until the spec changes")
    if synced.get("reason") == "Paused":
        return Verdict(Cadence.SLOW, "paused")
    if synced.get("status") == "False":
        # Even on a runner still Ready from an older generation: the newer one is not applied.
        return Verdict(Cadence.MEDIUM, f"retrying after {synced.get('reason')}")
    if ready.get("status") == "True":
        return Verdict(Cadence.SLOW, "ready")
    if not conds:
        return Verdict(Cadence.FAST, "never looked at")
    if ready.get("reason") in DEGRADED:
        return Verdict(Cadence.MEDIUM, f"degraded: {ready.get('reason')}")
    return Verdict(Cadence.FAST, f"in flight: {ready.get('reason')}")


def spec_is_new(
    generation: int, seen_generation: int | None, status: Mapping[str, Any], *, deleting: bool = False
) -> bool:
    """Whether a watched body carries a spec not looked at yet: its pass is due at once and reads its
    Secrets now (whoever edits the spec may just have rotated a token).

    Against the body last seen when there is one: any other generation is a spec change, except
    the one a deletion makes (the API server moves the generation when it sets deletionTimestamp on
    an object with finalizers). At first sight (a start) only the status can say: a pass that looks
    at a spec writes its generation into the Synced condition, applied or not, so a generation
    the status names and the body has moved past was changed while nobody looked.
    """
    if deleting:
        return False
    if seen_generation is not None:
        return generation != seen_generation
    conds = status.get("conditions") or ()
    synced = [c for c in conds if isinstance(c, Mapping) and c.get("type") == "Synced"]
    looked = synced[0].get("observedGeneration") if synced else None
    if not isinstance(looked, int):
        looked = status.get("observedGeneration")  # the generation last applied
    return isinstance(looked, int) and looked != generation


@dataclass(frozen=True)
class Intervals:
    """Seconds between looks per cadence (from the operator's settings)."""

    fast: float
    resync: float

    @property
    def medium(self) -> float:
        """Retries after errors: well apart from the fast poll, never more often than every 30 s."""
        return max(self.fast * 15, 30.0)

    def of(self, cadence: Cadence) -> float | None:
        return {
            Cadence.FAST: self.fast,
            Cadence.MEDIUM: self.medium,
            Cadence.SLOW: self.resync,
            Cadence.NONE: None,
        }[cadence]

    def freshness(self, cadence: Cadence) -> float:
        """How old a batched (list) observation may be for a pass at this cadence.

        About one poll while in flight. Steady passes accept half a resync: the list they share is
        re-read as often as the oldest acceptable age, and at thousands of runners parsing it was
        the largest steady cost after the passes themselves (a tenth of a resync: 17% of a core at
        1,000 runners, resync 60 s). A drift is still seen within one and a half resyncs.
        """
        if cadence == Cadence.FAST:
            return self.fast
        if cadence == Cadence.MEDIUM:
            return self.medium / 2
        return self.resync / 2


@dataclass(frozen=True)
class Next:
    """What a pass's outcome means for the next look."""

    cadence: Cadence
    delay: float | None
    """seconds to the next look (None: never); a server's Retry-After beats the cadence."""
    why: str


def after_pass(
    status: Mapping[str, Any],
    intervals: Intervals,
    *,
    released: bool = False,
    retry_after: float | None = None,
    deleting: bool = False,
) -> Next:
    """The next look after a pass that wrote `status`."""
    if released:
        return Next(Cadence.NONE, None, "released")
    verdict = of_status(status)
    if retry_after:
        return Next(verdict.cadence, retry_after, f"the API asked to wait {retry_after:g}s")
    if deleting:
        if (status.get("deletion") or {}).get("stalled"):
            # Past the deadline a deletion keeps retrying, slower; Stalled=True says so.
            return Next(Cadence.MEDIUM, intervals.medium, "deletion past its deadline")
        if verdict.cadence != Cadence.FAST:
            # A deletion never waits a full resync: whatever holds it may clear any minute.
            return Next(Cadence.MEDIUM, intervals.medium, f"deleting; {verdict.why}")
    return Next(verdict.cadence, intervals.of(verdict.cadence), verdict.why)
