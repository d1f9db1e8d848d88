"""The simulated RunnerManagementService: the six API operations plus test-control methods.

Transport-free: takes decoded JSON and query values, returns wire JSON or raises ApiError.
Everything is synchronous and runs on one event loop, so each call is atomic.
Runners belong to an organisation (the caller's, see `organization_of`) and are invisible to
every other one (contract A.29); clusters are physical, so one runner per cluster holds globally.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from copy import deepcopy
from dataclasses import replace
from typing import Any

from runner_operator.simulator import errors, schema, validation
from runner_operator.simulator.config import DEFAULT_ORGANIZATION, SimulatorConfig, Timings
from runner_operator.simulator.errors import ApiError, Violation
from runner_operator.simulator.faults import API_PREFIX, FaultPlan, RateLimiter, RequestLog, Scripted
from runner_operator.simulator.lifecycle import DELETING, FAILED, Runner
from runner_operator.simulator.persistence import StateFile

ROOT = "managed_runner"
DEFAULT_GROUP = "default"
DEFAULT_CHANNEL = "RELEASE_CHANNEL_STABLE"
MASK_REQUIRED = "an explicit update mask is required"
SPEC_PATHS = frozenset(f for f in schema.SPEC.fields if f != "allow_privileged_profile_annotations")
IMMUTABLE_PATHS = frozenset({"identity", "identity.runner_id", "identity.zone", "identity.cluster_id"})
OUTPUT_PATHS = frozenset(
    {"etag", "identity.cluster_name"} | {k for k, f in schema.MANAGED_RUNNER.fields.items() if f.output_only}
)
LEGACY_PATHS = frozenset({"profile_bindings", "spec.allow_privileged_profile_annotations"})
ORG = DEFAULT_ORGANIZATION

Key = tuple[str, str]
"""(organization, runner ID or request ID): IDs are unique per organisation only."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Simulator:
    """In-memory control plane; state is derived lazily from the (injectable) clock."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config or SimulatorConfig()
        self.timings: Timings = replace(self.config.timings)
        self.releases: dict[str, str] = dict(self.config.releases)
        self.faults = FaultPlan()
        self.log = RequestLog()
        self.limiter = RateLimiter()
        if self.config.latency:
            self.faults.set_latency("*", self.config.latency)
        self._base_clock = self.config.clock or time.time
        self._offset = 0.0
        self.organizations: dict[str, str] = dict(self.config.organizations)
        self._runners: dict[Key, Runner] = {}
        self._order: list[Key] = []  # sorted, so one organisation's runners are a contiguous page run
        self._clusters: dict[str, Key] = {}  # cluster ID -> runner, across organisations
        self._requests: dict[Key, tuple[str, str, dict[str, Any]]] = {}  # -> (body, runner ID, first)
        self._state = StateFile(self.config.state_file) if self.config.state_file else None
        if self._state is not None:
            self._load(self._state.load())

    # == clock ===========================================================================

    def now(self) -> float:
        return self._base_clock() + self._offset

    def advance_clock(self, seconds: float) -> float:
        """Move simulated time forward (time travel); returns the new now."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._offset += seconds
        self._saved()
        return self.now()

    def advance(self, now: float | None = None) -> None:
        """Apply every transition due by `now` to every runner (reads do this lazily anyway)."""
        for key in list(self._order):
            self._live(key, now)

    # == organisations ===================================================================

    def organization_of(self, token: str | None) -> str:
        """The organisation a bearer token acts in; unmapped tokens share the default one."""
        return self.organizations.get(token or "", ORG)

    def set_organizations(self, tokens: Mapping[str, str], *, merge: bool = False) -> dict[str, str]:
        """Replace (or with merge=True extend) the token -> organisation map; mapped tokens are admins."""
        checked: dict[str, str] = {}
        for token, organization in tokens.items():
            if not isinstance(token, str) or not token or not isinstance(organization, str):
                raise ValueError("tokens must map non-empty token strings to organisation names")
            checked[token] = organization
        if not merge:
            self.organizations.clear()
        self.organizations.update(checked)
        return dict(self.organizations)

    def organization_counts(self) -> dict[str, int]:
        """Stored runners per organisation (every organisation that has one)."""
        counts: dict[str, int] = {}
        for organization, _ in self._order:
            counts[organization] = counts.get(organization, 0) + 1
        return counts

    # == API operations ==================================================================

    def create(
        self, body: Any, request_id: str | None = None, *, copy: bool = True, organization: str = ORG
    ) -> dict[str, Any]:
        if not request_id and self.config.require_request_id:
            raise errors.invalid_field("request_id", "missing idempotency token")
        decoded = self._decode(body)
        self._refuse_legacy(decoded)
        decoded.pop("etag", None)
        identity = decoded.setdefault("identity", {})
        problems = validation.check_identity(identity, f"{ROOT}.identity", self.config.reject_uppercase_zone)
        if identity.get("zone"):
            identity["zone"] = identity["zone"].lower()
        identity.setdefault("runner_group_id", DEFAULT_GROUP)
        spec = decoded.setdefault("spec", {})
        spec.setdefault("release_channel", DEFAULT_CHANNEL)
        problems += validation.check_spec(spec, f"{ROOT}.spec")
        if "policy" in decoded:
            problems += validation.check_policy(decoded["policy"], f"{ROOT}.policy")
        if problems:
            raise errors.invalid(problems)
        fingerprint = _canonical(decoded)
        request_key = (organization, request_id or "")
        if request_id and request_key in self._requests:
            seen, runner_id, first = self._requests[request_key]
            if seen != fingerprint:
                raise errors.invalid_field(
                    "request_id", "this request ID was already used with a different request body"
                )
            live = self._live((organization, runner_id))
            return live.render(self.releases, copy) if live else deepcopy(first)
        runner_id, cluster_id = identity["runner_id"], identity["cluster_id"]
        if self.config.known_clusters_only and cluster_id not in self.config.cluster_names:
            raise ApiError(5, f"cluster {cluster_id!r} not found")
        if self._live((organization, runner_id)) is not None:
            raise errors.already_exists(runner_id, f"managed runner {runner_id!r} already exists")
        holder = self._clusters.get(cluster_id)
        if holder is not None and self._live(holder) is not None:
            if holder[0] != organization:  # never name another organisation's runner
                raise ApiError(
                    6, f"cluster {cluster_id!r} already has a managed runner of another organization"
                )
            raise errors.already_exists(
                holder[1], f"cluster {cluster_id!r} already has managed runner {holder[1]!r}"
            )
        runner = self._new_runner(decoded, organization)
        result = runner.render(self.releases)
        if request_id:
            self._requests[request_key] = (fingerprint, runner_id, deepcopy(result))
        self._saved()
        return result

    def get(self, runner_id: str, *, copy: bool = True, organization: str = ORG) -> dict[str, Any]:
        """The runner; copy=False shares cached sub-trees (serialise the result at once)."""
        return self._require(runner_id, organization).render(self.releases, copy)

    def list_runners(
        self,
        page_size: str | int | None = None,
        page_token: str | None = None,
        cluster_id: str | None = None,
        *,
        copy: bool = True,
        organization: str = ORG,
    ) -> dict[str, Any]:
        size = self._page_size(page_size)
        after = self._decode_token(page_token, cluster_id) if page_token else ""
        start = bisect.bisect_right(self._order, (organization, after))
        page: list[Runner] = []
        more = False
        for key in list(self._order[start:]):
            if key[0] != organization:
                break
            runner = self._live(key)
            if runner is None or (cluster_id and runner.cluster_id != cluster_id):
                continue
            if len(page) == size:
                more = True
                break
            page.append(runner)
        out: dict[str, Any] = {"managedRunners": [r.render(self.releases, copy) for r in page]}
        if more:
            out["nextPageToken"] = self._encode_token(page[-1].runner_id, cluster_id)
        return out

    def update(
        self,
        runner_id: str,
        body: Any,
        update_mask: str | Iterable[str] | None,
        *,
        copy: bool = True,
        organization: str = ORG,
    ) -> dict[str, Any]:
        paths = self._parse_mask(update_mask)
        decoded = self._decode(body)
        self._refuse_legacy(decoded)
        runner = self._require(runner_id, organization)
        body_id = decoded.get("identity", {}).get("runner_id")
        if self.config.reject_id_mismatch and body_id and body_id != runner_id:
            raise errors.invalid_field(
                f"{ROOT}.identity.runner_id", "does not match the runner ID in the path"
            )
        if runner.install_status == DELETING:
            raise errors.precondition(
                f"managed runner {runner_id!r} is being deleted",
                "STATE",
                f"managedRunners/{runner_id}",
                "the runner is DELETING and can no longer be updated",
            )
        if "policy" in paths:
            etag = decoded.get("etag")
            if etag != runner.etag and (etag or self.config.require_etag):
                raise errors.stale_etag(
                    "etag is missing" if not etag else "the policy changed since the etag was read"
                )
        return self._apply(runner, decoded, paths).render(self.releases, copy)

    def delete(
        self, runner_id: str, allow_missing: bool = False, *, organization: str = ORG
    ) -> dict[str, Any]:
        runner = self._live((organization, runner_id))
        if runner is None:
            if allow_missing:
                return {}
            raise errors.not_found(runner_id)
        if runner.install_status != DELETING:
            runner.start_deletion(self.now(), self.timings)
            self._saved()
        return {}

    def apply_available_update(
        self, runner_id: str, *, copy: bool = True, organization: str = ORG
    ) -> dict[str, Any]:
        runner = self._require(runner_id, organization)
        if not runner.update_available(self.releases):
            raise errors.precondition(
                f"managed runner {runner_id!r} has no update available",
                "STATE",
                f"managedRunners/{runner_id}",
                "update_available is false",
            )
        now = self.now()
        runner.channel_version = self.releases[runner.channel]
        runner.start_rollout(now, self.timings)
        runner.update_time = now
        runner.touch_spec()
        self._saved()
        return runner.render(self.releases, copy)

    # == test control ====================================================================

    def set_timings(self, **seconds: float) -> Timings:
        for name, value in seconds.items():
            if name not in Timings.__dataclass_fields__:
                raise ValueError(f"unknown timing {name!r}")
            if value < 0:
                raise ValueError(f"{name} must not be negative")
            setattr(self.timings, name, float(value))
        return self.timings

    def fail_next(
        self,
        endpoint: str = "*",
        status: int = 503,
        times: int = 1,
        retry_after: float | None = None,
        message: str | None = None,
        code: int | None = None,
    ) -> None:
        """The next `times` HTTP calls of `endpoint` fail with `status` (429 adds Retry-After)."""
        self.faults.add(endpoint, Scripted("error", times, status, code, message, retry_after))

    def drop_next(self, endpoint: str = "*", times: int = 1) -> None:
        """Close the connection without a response on the next `times` calls."""
        self.faults.add(endpoint, Scripted("drop", times))

    def lose_next(self, endpoint: str = "*", times: int = 1) -> None:
        """Serve the next `times` calls, then drop the connection before the response is written."""
        self.faults.add(endpoint, Scripted("lose", times))

    def hang_next(self, endpoint: str = "*", times: int = 1, seconds: float = 30.0) -> None:
        """Hold the next `times` calls for `seconds` (longer than the client timeout), then 504."""
        self.faults.add(endpoint, Scripted("hang", times, 504, seconds=seconds))

    def set_error_rate(
        self,
        endpoint: str = "*",
        rate: float = 0.1,
        status: int = 503,
        seed: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.faults.set_rate(endpoint, rate, status, seed, retry_after)

    def set_latency(self, endpoint: str = "*", seconds: float = 0.0) -> None:
        self.faults.set_latency(endpoint, seconds)

    def set_bare404(self, prefix: str = API_PREFIX, enabled: bool = True) -> None:
        """Answer API paths under `prefix` with a plain-text 404, as a proxy or wrong base path does."""
        self.faults.set_bare404(prefix, enabled)

    def clear_faults(self) -> None:
        """Drop every scripted fault, error rate, latency and bare-404 prefix."""
        self.faults.clear()

    def fail_install(
        self,
        runner_id: str,
        reason: str = "RUNNER_INSTALL_ERROR_REASON_INSTALL_FAILED",
        message: str = "injected install failure",
        immediately: bool = True,
        *,
        organization: str = ORG,
    ) -> dict[str, Any]:
        """Install fails now (or, with immediately=False, when the pending install would finish)."""
        runner = self._require(runner_id, organization)
        if immediately:
            runner.fail(self.now(), reason, message)
        else:
            runner.fail_install = True
        self._saved()
        return runner.render(self.releases)

    def recover_install(self, runner_id: str, *, organization: str = ORG) -> dict[str, Any]:
        runner = self._require(runner_id, organization)
        runner.fail_install = False
        if runner.install_status == FAILED:
            runner.recover(self.now(), self.timings)
        self._saved()
        return runner.render(self.releases)

    def disconnect(self, runner_id: str, *, organization: str = ORG) -> dict[str, Any]:
        runner = self._require(runner_id, organization)
        runner.disconnect(self.now(), self.timings)
        self._saved()
        return runner.render(self.releases)

    def reconnect(self, runner_id: str, *, organization: str = ORG) -> dict[str, Any]:
        runner = self._require(runner_id, organization)
        runner.reconnect(self.now())
        self._saved()
        return runner.render(self.releases)

    def publish_release(self, channel: str = DEFAULT_CHANNEL, version: str | None = None) -> str:
        """A new version appears on `channel`; installed runners on it report updateAvailable."""
        if channel not in schema.RELEASE_CHANNEL.names[1:]:
            raise ValueError(f"unknown release channel {channel!r}")
        if version is None:
            current = self.releases.get(channel, "0.0.0")
            head, _, patch = current.rpartition(".")
            version = f"{head}.{int(patch) + 1}" if patch.isdigit() else f"{current}.1"
        self.releases[channel] = version
        self._saved()
        return version

    def edit_out_of_band(
        self, runner_id: str, changes: dict[str, Any], *, organization: str = ORG
    ) -> dict[str, Any]:
        """Change displayName / identity.runnerGroupId / spec / policy behind the operator's back."""
        runner = self._require(runner_id, organization)
        decoded = self._decode(changes)
        paths: set[str] = set()
        for key, value in changes.items():
            name = schema.MANAGED_RUNNER.lookup.get(key, key)
            if name == "identity" and isinstance(value, dict):
                paths.update(f"identity.{schema.IDENTITY.lookup.get(k, k)}" for k in value)
            else:
                paths.add(name)
        unsupported = paths - {"display_name", "identity.runner_group_id", "spec", "policy"}
        if unsupported:
            raise ValueError(f"cannot edit {sorted(unsupported)} out of band")
        return self._apply(runner, decoded, paths).render(self.releases)

    def delete_out_of_band(
        self, runner_id: str, immediately: bool = True, *, organization: str = ORG
    ) -> None:
        """Remove a runner without the API (immediately=False: start a normal decommission)."""
        runner = self._require(runner_id, organization)
        if immediately:
            self._forget(runner)
        else:
            runner.start_deletion(self.now(), self.timings)
        self._saved()

    def create_out_of_band(
        self, body: dict[str, Any], installed: bool = True, *, organization: str = ORG
    ) -> dict[str, Any]:
        """Create a runner as if someone else did; installed=True makes it READY and CONNECTED now."""
        result = self.create(
            body, request_id=f"out-of-band-{secrets.token_hex(8)}", organization=organization
        )
        runner = self._runners[(organization, result["identity"]["runnerId"])]
        if installed:
            now = self.now()
            runner.install_status, runner.next_at = "PROVISIONING", now
            self._after(runner, runner.advance(now, self.timings))
            self._saved()
        return runner.render(self.releases)

    def reset(self) -> None:
        """Forget every runner, request ID, fault, log entry, timing, release and organisation change."""
        self._runners.clear()
        self._order.clear()
        self._clusters.clear()
        self._requests.clear()
        self.faults.clear()
        self.log.clear()
        self.timings = replace(self.config.timings)
        self.releases = dict(self.config.releases)
        self.organizations = dict(self.config.organizations)
        self._offset = 0.0
        self._saved()

    def runner_ids(self, organization: str = ORG) -> list[str]:
        """IDs of the organisation's runners, sorted."""
        self.advance()
        return [runner_id for owner, runner_id in self._order if owner == organization]

    def __len__(self) -> int:
        return len(self._runners)

    # == internals =======================================================================

    def _decode(self, body: Any) -> dict[str, Any]:
        if body is None:
            body = {}
        decoder = schema.Decoder(lenient=self.config.lenient)
        decoded = decoder.message(schema.MANAGED_RUNNER, body, ROOT)
        if decoder.violations:
            raise errors.invalid(decoder.violations)
        return decoded

    def _refuse_legacy(self, decoded: dict[str, Any]) -> None:
        problems = validation.check_legacy(decoded, ROOT)
        if problems:
            raise errors.invalid(problems, validation.LEGACY_MESSAGE)

    def _parse_mask(self, update_mask: str | Iterable[str] | None) -> set[str]:
        raw = [update_mask] if isinstance(update_mask, str) else list(update_mask or [])
        parts = [p.strip() for item in raw for p in item.split(",") if p.strip()]
        if not parts or "*" in parts:
            raise errors.invalid_field("update_mask", MASK_REQUIRED)
        problems: list[Violation] = []
        paths: set[str] = set()
        for part in parts:
            path = ".".join(schema.camel_to_snake(segment) for segment in part.split("."))
            reason = self._mask_problem(path)
            if reason:
                problems.append(Violation("update_mask", f"{part!r}: {reason}"))
            paths.add(path)
        if problems:
            raise errors.invalid(problems)
        return paths

    @staticmethod
    def _mask_problem(path: str) -> str | None:
        if path in ("display_name", "identity.runner_group_id", "policy", "spec"):
            return None
        if path in IMMUTABLE_PATHS:
            return "field is immutable"
        if path in OUTPUT_PATHS:
            return "field is output only"
        if path in LEGACY_PATHS:
            return validation.LEGACY_MESSAGE
        head, _, rest = path.partition(".")
        if head == "policy":
            return "policy sub-paths are not supported; replace the whole policy with path 'policy'"
        if head == "spec":
            field, _, deeper = rest.partition(".")
            if field in SPEC_PATHS:
                return "only top-level spec fields can be updated" if deeper else None
        return "unknown field path"

    def _apply(self, runner: Runner, decoded: dict[str, Any], paths: set[str]) -> Runner:
        """Write the masked fields (absent = reset), validate the result, then bump revisions."""
        spec = deepcopy(runner.spec)
        policy = runner.policy
        display_name, group = runner.display_name, runner.group
        for path in paths:
            if path == "display_name":
                display_name = decoded.get("display_name", "")
            elif path == "identity.runner_group_id":
                group = decoded.get("identity", {}).get("runner_group_id") or DEFAULT_GROUP
            elif path == "policy":
                policy = decoded.get("policy")
            elif path == "spec":
                spec = deepcopy(decoded.get("spec", {}))
            elif path.startswith("spec."):
                field = path[len("spec.") :]
                value = decoded.get("spec", {}).get(field)
                if value is None:
                    spec.pop(field, None)
                else:
                    spec[field] = deepcopy(value)
        spec.setdefault("release_channel", DEFAULT_CHANNEL)
        problems: list[Violation] = []
        spec_changed = spec != runner.spec
        policy_changed = policy != runner.policy
        if spec_changed:
            problems += validation.check_spec(spec, f"{ROOT}.spec")
        if policy_changed and policy is not None:
            problems += validation.check_policy(policy, f"{ROOT}.policy")
        if problems:
            raise errors.invalid(problems)
        now = self.now()
        changed = (
            spec_changed or policy_changed or display_name != runner.display_name or group != runner.group
        )
        if spec_changed:
            runner.spec = spec
            runner.touch_spec()
            runner.start_rollout(now, self.timings)
        if policy_changed:
            runner.policy = policy
            runner.touch_policy()
            runner.etag = self._etag()
        runner.display_name, runner.group = display_name, group
        if changed:
            runner.update_time = now
            self._saved()
        return runner

    def _new_runner(self, decoded: dict[str, Any], organization: str) -> Runner:
        identity = decoded["identity"]
        now = self.now()
        spec = decoded["spec"]
        runner = Runner(
            runner_id=identity["runner_id"],
            group=identity["runner_group_id"],
            zone=identity["zone"],
            cluster_id=identity["cluster_id"],
            cluster_name=self._cluster_name(identity["cluster_id"]),
            display_name=decoded.get("display_name", ""),
            spec=spec,
            policy=decoded.get("policy"),
            etag=self._etag(),
            create_time=now,
            update_time=now,
            channel_version=self.releases.get(spec["release_channel"], "unknown"),
            next_at=now + self.timings.install_seconds,
            organization=organization,
        )
        self._runners[runner.key] = runner
        bisect.insort(self._order, runner.key)
        self._clusters[runner.cluster_id] = runner.key
        return runner

    def _cluster_name(self, cluster_id: str) -> str:
        name = self.config.cluster_names.get(cluster_id)
        return name or f"cks-{cluster_id.split('-')[0][:8].lower()}"

    @staticmethod
    def _etag() -> str:
        return secrets.token_hex(8)

    def _require(self, runner_id: str, organization: str) -> Runner:
        """The live runner; another organisation's runner is NOT_FOUND exactly like an unknown one."""
        runner = self._live((organization, runner_id))
        if runner is None:
            raise errors.not_found(runner_id)
        return runner

    def _live(self, key: Key, now: float | None = None) -> Runner | None:
        """The runner with all due transitions applied, or None if absent or gone."""
        runner = self._runners.get(key)
        if runner is None:
            return None
        events = runner.advance(self.now() if now is None else now, self.timings)
        if events:
            return self._after(runner, events)
        return runner

    def _after(self, runner: Runner, events: list[str]) -> Runner | None:
        if "gone" in events:
            self._forget(runner)
            return None
        if "connected" in events and runner.policy is None:
            decoded = self._decode({"policy": self.config.default_policy})
            runner.policy = decoded.get("policy", {})
            runner.touch_policy()
            runner.etag = self._etag()
        return runner

    def _forget(self, runner: Runner) -> None:
        key = runner.key
        self._runners.pop(key, None)
        index = bisect.bisect_left(self._order, key)
        if index < len(self._order) and self._order[index] == key:
            del self._order[index]
        if self._clusters.get(runner.cluster_id) == key:
            del self._clusters[runner.cluster_id]

    def _page_size(self, raw: str | int | None) -> int:
        if raw is None or raw == "":
            return self.config.default_page_size
        try:
            size = int(raw)
        except (TypeError, ValueError):
            raise errors.invalid_field("page_size", "must be an integer") from None
        if size < 0:
            raise errors.invalid_field("page_size", "must not be negative")
        return min(size or self.config.default_page_size, self.config.max_page_size)

    @staticmethod
    def _encode_token(after: str, cluster_id: str | None) -> str:
        payload = json.dumps({"v": 1, "after": after, "clusterId": cluster_id or ""}, separators=(",", ":"))
        return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")

    @staticmethod
    def _decode_token(token: str, cluster_id: str | None) -> str:
        try:
            padded = token + "=" * (-len(token) % 4)
            data = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
            after = data["after"]
            if data.get("v") != 1 or not isinstance(after, str) or not after:
                raise ValueError(token)
        except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
            raise errors.invalid_field("page_token", "invalid page token") from None
        if data.get("clusterId", "") != (cluster_id or ""):
            raise errors.invalid_field("page_token", "the page token belongs to a different query")
        return after

    # -- persistence ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Runners carry their organisation; requests are [organization, request ID, body, runner, first]."""
        return {
            "version": 2,
            "offset": self._offset,
            "releases": self.releases,
            "runners": [self._runners[key].to_state() for key in self._order],
            "requests": [[org, request_id, *v] for (org, request_id), v in self._requests.items()],
        }

    def _load(self, data: dict[str, Any] | None) -> None:
        """Version 1 snapshots (no organisations) load into the default organisation."""
        if not data:
            return
        self._offset = float(data.get("offset", 0.0))
        self.releases.update(data.get("releases", {}))
        for item in data.get("runners", []):
            runner = Runner.from_state(item)
            self._runners[runner.key] = runner
            self._clusters[runner.cluster_id] = runner.key
        self._order = sorted(self._runners)
        requests = data.get("requests", {})
        if isinstance(requests, dict):  # version 1: {request ID: [body, runner, first]}
            self._requests = {(ORG, k): (v[0], v[1], v[2]) for k, v in requests.items()}
        else:
            self._requests = {(v[0], v[1]): (v[2], v[3], v[4]) for v in requests}

    def _saved(self) -> None:
        if self._state is not None:
            self._state.save(self.snapshot())
