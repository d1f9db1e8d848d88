"""The operator's default credential serves only the namespaces allowed to use it (docs/safety.md).

A namespace that may not use it gets DefaultCredentialsNotAllowed before any read of the default
Secret and so before any API call: it cannot create, adopt, update or delete through it. Its own
Secret always works. A label selector reads the Namespace, shared like Secret reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import SecretStr

from runner_operator import handlers, resource
from runner_operator.credentials import TokenRegistry
from runner_operator.outcomes import CredentialsProblem
from runner_operator.reasons import Reason
from runner_operator.settings import Settings
from runner_operator.tenancy import DefaultCredentialScope
from tests.clock import FakeClock
from tests.unit.builders import body

DEFAULT_SECRET = ("operator", "api")


class Reads:
    """Secrets and Namespace labels, counting what was read."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, str]] = {
            DEFAULT_SECRET: {"token": "CW-DEFAULT"},
            ("team-a", "own"): {"token": "CW-TEAM-A"},
        }
        self.labels: dict[str, dict[str, str]] = {"team-a": {"team": "a"}, "team-b": {"team": "b"}}
        self.secret_reads: list[tuple[str, str]] = []
        self.label_reads: list[str] = []

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self.secret_reads.append((namespace, name))
        return self.secrets.get((namespace, name))

    def namespace(self, namespace: str) -> Mapping[str, str] | None:
        self.label_reads.append(namespace)
        return self.labels.get(namespace)


def in_namespace(namespace: str, **kw: Any) -> resource.ManagedRunnerResource:
    raw = body("r1", **kw)
    raw["metadata"]["namespace"] = namespace
    return resource.ManagedRunnerResource.from_body(raw)


def registry(reads: Reads, scope: DefaultCredentialScope, **settings: Any) -> TokenRegistry:
    settings.setdefault("default_secret", "operator/api")
    return TokenRegistry(
        Settings(**settings),
        reads.secret,
        clock=FakeClock(100.0),
        scope=scope,
        namespace_labels=reads.namespace,
    )


async def test_a_namespace_outside_the_list_is_refused_before_the_default_secret_is_read() -> None:
    reads = Reads()
    tokens = registry(reads, DefaultCredentialScope.configure("team-a", None, watched=()))
    with pytest.raises(CredentialsProblem) as refused:
        await tokens.resolve(in_namespace("team-b"))
    assert refused.value.reason == Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED
    assert "team-b may not use the operator's default credentials" in refused.value.message
    assert "team-a" not in refused.value.message  # nothing about who may
    assert DEFAULT_SECRET not in reads.secret_reads
    allowed = await tokens.resolve(in_namespace("team-a"))
    assert allowed.token.get_secret_value() == "CW-DEFAULT"


async def test_the_default_token_from_the_environment_is_refused_alike() -> None:
    reads = Reads()
    tokens = registry(
        reads,
        DefaultCredentialScope.configure(None, None, watched=()),
        default_secret=None,
        default_token=SecretStr("CW-ENV"),
    )
    with pytest.raises(CredentialsProblem) as refused:
        await tokens.resolve(in_namespace("team-a"))
    assert refused.value.reason == Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED
    assert "CW-ENV" not in str(refused.value)


async def test_a_namespaces_own_secret_works_wherever_the_default_is_refused() -> None:
    reads = Reads()
    tokens = registry(reads, DefaultCredentialScope.configure(None, None, watched=()))
    own = in_namespace("team-a", credentials={"secretRef": {"name": "own"}})
    assert (await tokens.resolve(own)).token.get_secret_value() == "CW-TEAM-A"
    assert reads.label_reads == []


async def test_the_selector_reads_the_namespace_once_per_window_and_decides_by_its_labels() -> None:
    reads = Reads()
    tokens = registry(reads, DefaultCredentialScope.configure(None, "team=a", watched=()))
    for _ in range(3):
        assert (await tokens.resolve(in_namespace("team-a"))).token.get_secret_value() == "CW-DEFAULT"
    assert reads.label_reads == ["team-a"]
    with pytest.raises(CredentialsProblem, match="team-b may not use"):
        await tokens.resolve(in_namespace("team-b"))
    reads.labels["team-b"] = {"team": "a"}  # relabelled: seen once the shared read is fresh again
    with pytest.raises(CredentialsProblem):
        await tokens.resolve(in_namespace("team-b"))
    assert (await tokens.resolve(in_namespace("team-b"), fresh=True)).token.get_secret_value() == "CW-DEFAULT"


async def test_a_namespace_that_cannot_be_read_is_not_allowed() -> None:
    reads = Reads()
    tokens = registry(reads, DefaultCredentialScope.configure(None, "team=a", watched=()))
    with pytest.raises(CredentialsProblem) as refused:
        await tokens.resolve(in_namespace("gone"))
    assert refused.value.reason == Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED


async def test_without_a_label_reader_the_selector_fails_closed() -> None:
    reads = Reads()
    tokens = TokenRegistry(
        Settings(default_secret="operator/api"),
        reads.secret,
        scope=DefaultCredentialScope.configure(None, "team=a", watched=()),
    )
    with pytest.raises(CredentialsProblem) as refused:
        await tokens.resolve(in_namespace("team-a"))
    assert refused.value.reason == Reason.DEFAULT_CREDENTIALS_NOT_ALLOWED


def claims(*entries: tuple[int, str, str, str]) -> dict[str, Any]:
    return {"r1": list(entries)}


def claimed_by(res: resource.ManagedRunnerResource, index: dict[str, Any]) -> str | None:
    return handlers._claimed_by(res.spec.runner_id, res.namespace, res.uid, index)


def test_a_claim_from_another_namespace_is_reported_without_its_name() -> None:
    mine = in_namespace("team-a")
    other = (0, "2026-01-01T00:00:00Z", "team-b/theirs", "u-other")
    assert claimed_by(mine, claims(other, (1, "2026-02-01T00:00:00Z", "team-a/r", mine.uid))) == (
        "in another namespace"  # "claimed by ManagedRunner in another namespace"
    )
    same = (0, "2026-01-01T00:00:00Z", "team-a/first", "u-other")
    assert claimed_by(mine, claims(same)) == "team-a/first"
