"""Settings of one simulator instance: tokens, life-cycle timings, strictness switches, state file.

Defaults follow the contract (5.4 timings, 3.4 page sizes); tests shrink the timings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Documented development tokens; override them for anything reachable from other machines.
DEV_ADMIN_TOKEN = "CW-SECRET-simulator-admin"
DEV_USER_TOKEN = "CW-SECRET-simulator-user"
ADMIN_TOKEN_ENV = "SIMULATOR_ADMIN_TOKEN"
USER_TOKEN_ENV = "SIMULATOR_USER_TOKEN"

# Organisation of every token not in SimulatorConfig.organizations.
DEFAULT_ORGANIZATION = ""

DEFAULT_RELEASES = {"RELEASE_CHANNEL_STABLE": "stable-1.0.0", "RELEASE_CHANNEL_RAPID": "rapid-1.1.0"}


@dataclass
class Timings:
    """Seconds spent in each asynchronous step of the life cycle (contract 5.4)."""

    install_seconds: float = 2.0  # PENDING -> PROVISIONING
    provision_seconds: float = 5.0  # PROVISIONING -> READY + CONNECTED
    rollout_seconds: float = 3.0  # targetRevision bump -> activeRevision catches up
    delete_seconds: float = 5.0  # DELETING -> gone
    heartbeat_seconds: float = 10.0  # lastHeartbeatTime refresh period while connected

    @classmethod
    def instant(cls) -> Timings:
        """Tiny timings for tests that still want to observe every state."""
        return cls(0.05, 0.05, 0.05, 0.05, 0.05)


@dataclass
class SimulatorConfig:
    host: str = "127.0.0.1"
    port: int = 0
    admin_tokens: tuple[str, ...] = (DEV_ADMIN_TOKEN,)
    user_tokens: tuple[str, ...] = (DEV_USER_TOKEN,)
    # token -> organisation (contract A.29): runners are visible to their organisation only. A listed
    # token is also an admin token of its organisation; unlisted tokens are in DEFAULT_ORGANIZATION.
    organizations: dict[str, str] = field(default_factory=dict)
    # Token for the /_sim control API; when None the admin tokens are accepted there.
    control_token: str | None = None
    timings: Timings = field(default_factory=Timings)
    require_request_id: bool = True
    reject_uppercase_zone: bool = False
    lenient: bool = False
    # False: a policy update without an etag is accepted (last writer wins); a wrong one still fails.
    require_etag: bool = True
    # True: PATCH refuses a body whose identity.runnerId differs from the path.
    reject_id_mismatch: bool = False
    # clusterId -> clusterName; unknown clusters get a name derived from the ID.
    cluster_names: dict[str, str] = field(default_factory=dict)
    # True: a clusterId missing from cluster_names is NOT_FOUND on create.
    known_clusters_only: bool = False
    default_policy: dict[str, Any] = field(default_factory=lambda: {"displayName": "Default policy"})
    releases: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RELEASES))
    default_page_size: int = 50
    max_page_size: int = 1000
    # Server-side request rate limit per token (requests per second; None = unlimited): over it,
    # 429 RESOURCE_EXHAUSTED with Retry-After, like a real quota.
    rate_limit: float | None = None
    rate_burst: int = 10
    latency: float = 0.0
    """seconds added to every API call (realistic network and server time)."""
    state_file: str | None = None
    log_requests: bool = True
    # Seconds since the epoch; injectable so tests can drive time without sleeping.
    clock: Callable[[], float] | None = None
