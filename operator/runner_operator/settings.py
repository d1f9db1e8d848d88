"""Operator-wide configuration, read once from the environment (the only module that reads os.environ).

Per-resource choices (credentials Secret, deletion policy, pause, adoption) live on the
ManagedRunner itself; this is what applies to every resource the operator handles.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from runner_operator import leases, sharding, tenancy

DEFAULT_ENDPOINT = "https://api.coreweave.com"


class Settings(BaseModel):
    """Environment variables are the upper-case field names prefixed with RUNNER_OPERATOR_."""

    model_config = ConfigDict(frozen=True)

    api_endpoint: str = DEFAULT_ENDPOINT
    # Operator-wide default credentials: a token (COREWEAVE_API_TOKEN, for local runs) or a
    # Secret reference "namespace/name[:key]" used when a ManagedRunner names no Secret.
    default_token: SecretStr | None = None
    default_secret: str | None = None
    # Which namespaces may use those defaults (runner_operator.tenancy): comma-separated names
    # ("*" for every namespace) and/or a label selector on the Namespace. Neither: the namespaces
    # given to `run -n`, or none when watching the whole cluster.
    default_credentials_namespaces: str | None = None
    default_credentials_namespace_selector: str | None = None
    request_timeout: float = Field(default=10.0, gt=0)
    retry_budget: float = Field(default=10.0, ge=0)
    requests_per_second: float = Field(default=10.0, gt=0)
    request_burst: int = Field(default=20, ge=1)
    # Creating passes at once per credential; the rest wait their turn in order, so one team's
    # backlog never takes another's turns. A pass spends most of its time on Kubernetes writes (the
    # key's reservation, then the create's status): 20 left a tenth of a 10 req/s budget unused at
    # N = 3,000 (bench/RESULTS.md, "Creates do not wait for lists"). List pages go ahead of the
    # creates' requests (cloud/client.py HORIZON_SLOTS), however many wait.
    passes_per_credential: int = Field(default=40, ge=1)
    # Connections to the Kubernetes API for requests (watch streams get theirs on top).
    kube_connections: int = Field(default=32, ge=4)
    # Cadence: fast while something is in flight, slow (jittered) at steady state.
    fast_interval: float = Field(default=2.0, gt=0)
    resync_interval: float = Field(default=300.0, gt=0)
    deletion_timeout: float = Field(default=1800.0, gt=0)
    # How long a Secret read serves every pass that needs it (0: each pass reads). A rotated token
    # or env value is picked up within this many seconds.
    secret_cache_seconds: float = Field(default=10.0, ge=0)
    # How long the start waits for the API server to serve ManagedRunners before giving up.
    startup_timeout: float = Field(default=300.0, gt=0)
    json_logs: bool = False
    # debug, info, warning or error (`run -v` means debug).
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Leader election on a coordination.k8s.io/v1 Lease (runner_operator.leases): any number of
    # replicas, one acts. The namespace defaults to the pod's own; the timings to controller-runtime's.
    leader_election: bool = False
    leader_election_namespace: str | None = None
    leader_election_lease: str = "managed-runner-operator"
    leader_election_lease_duration: float = Field(default=15.0, gt=0)
    leader_election_renew_deadline: float = Field(default=10.0, gt=0)
    leader_election_retry_period: float = Field(default=2.0, gt=0)
    # This process's shard "I/N" (runner_operator.sharding; `run --shard I/N` sets it): it handles
    # the ManagedRunners of shard I only, holds that shard's Lease and spends 1/N of the budget.
    shard: str | None = None
    # glibc only (runner_operator.allocator): at most this many malloc arenas (0: glibc's default of
    # eight per core), free heap pages handed back every this many seconds (0: never), and blocks of
    # at least this many bytes on pages of their own (0: glibc's rising threshold).
    malloc_arenas: int = Field(default=2, ge=0)
    malloc_trim_seconds: float = Field(default=60.0, ge=0)
    malloc_mmap_threshold: int = Field(default=131072, ge=0)
    # ManagedRunners per page of the list taken at start and after a watch expires (0: one list of
    # all). A page is parsed whole (by kopf, and by the indexes' list at start), so at thousands of
    # objects one list would be the process's peak; bench/RESULTS.md measures 100 against 500.
    list_chunk_size: int = Field(default=100, ge=0)
    # Prometheus /metrics on this port (0 turns it off); bind failures are logged, never fatal.
    metrics_port: int = Field(default=9090, ge=0, le=65535)

    @field_validator("default_credentials_namespace_selector")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        if value:
            tenancy.parse_selector(value)  # a typo fails at start-up, not as every runner's condition
        return value or None

    @model_validator(mode="after")
    def _lease_timing(self) -> Settings:
        leases.Timing(  # the start fails with the reason, rather than a leader that can lose the Lease
            self.leader_election_lease_duration,
            self.leader_election_renew_deadline,
            self.leader_election_retry_period,
        )
        return self

    @field_validator("shard")
    @classmethod
    def _shard(cls, value: str | None) -> str | None:
        if value:
            sharding.Shard.parse(value)
        return value or None

    @model_validator(mode="after")
    def _shards_elect(self) -> Settings:
        if self.sharded().count > 1 and not self.leader_election:
            raise ValueError(
                "shards need leader election (RUNNER_OPERATOR_LEADER_ELECTION=true): each shard holds "
                "its own Lease, which is how a change of the shard count never has two processes act"
            )
        return self

    def sharded(self) -> sharding.Shard:
        """This process's shard (0/1 when unsharded)."""
        return sharding.Shard.parse(self.shard) if self.shard else sharding.Shard()

    @field_validator("api_endpoint")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from RUNNER_OPERATOR_* variables (plus COREWEAVE_API_ENDPOINT/TOKEN)."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for name in cls.model_fields:
            key = f"RUNNER_OPERATOR_{name.upper()}"
            if key in env:
                values[name] = env[key]
        if "api_endpoint" not in values and env.get("COREWEAVE_API_ENDPOINT"):
            values["api_endpoint"] = env["COREWEAVE_API_ENDPOINT"]
        if "default_token" not in values and env.get("COREWEAVE_API_TOKEN"):
            values["default_token"] = env["COREWEAVE_API_TOKEN"]
        return cls.model_validate(values)


def variable(field: str, env: Mapping[str, str] | None = None) -> str:
    """The environment variable that sets `field` (COREWEAVE_* where that one was used)."""
    env = os.environ if env is None else env
    name = f"RUNNER_OPERATOR_{field.upper()}"
    fallback = {"api_endpoint": "COREWEAVE_API_ENDPOINT", "default_token": "COREWEAVE_API_TOKEN"}.get(field)
    return fallback if fallback and name not in env and fallback in env else name


def describe(exc: ValidationError, env: Mapping[str, str] | None = None) -> str:
    """A bad setting as the variable to fix and why, never its value (it may be a token)."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        where = variable(field, env) if field in Settings.model_fields else "settings"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def load() -> Settings:
    """Settings for this process (kopf decorators need some values at import time)."""
    return Settings.from_env()
