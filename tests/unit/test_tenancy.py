"""Which namespaces may use the operator's default credential: the selector syntax and the scope rules."""

from __future__ import annotations

import pytest
from kopf._cogs.structs.references import NamespaceName, match_namespace

from runner_operator.settings import Settings
from runner_operator.tenancy import DefaultCredentialScope, parse_selector

LABELS = {"team": "payments", "env": "prod", "sandbox.coreweave.com/default-credentials": "yes"}

MATCHES: dict[str, tuple[str, bool]] = {
    "equal": ("team=payments", True),
    "double-equal": ("team==payments", True),
    "equal-other-value": ("team=search", False),
    "not-equal": ("team!=search", True),
    "not-equal-own-value": ("team!=payments", False),
    "not-equal-missing-key": ("owner!=x", True),
    "exists": ("env", True),
    "exists-missing": ("owner", False),
    "absent": ("!owner", True),
    "absent-present": ("!env", False),
    "in": ("env in (prod, staging)", True),
    "in-other": ("env in (dev)", False),
    "notin": ("env notin (dev,staging)", True),
    "notin-own": ("env notin (prod)", False),
    "prefixed-key": ("sandbox.coreweave.com/default-credentials=yes", True),
    "all-terms-must-match": ("team=payments,env in (prod),!owner", True),
    "one-term-fails": ("team=payments,env=dev", False),
    "empty-value-needs-the-key": ("owner=", False),
}


@pytest.mark.parametrize(("selector", "expected"), MATCHES.values(), ids=MATCHES.keys())
def test_selector_matches_as_kubernetes_does(selector: str, expected: bool) -> None:
    requirements = parse_selector(selector)
    assert all(r.matches(LABELS) for r in requirements) is expected


BAD = {
    "empty": "",
    "blank-terms": " , ",
    "bad-key": "Team Name=x",
    "bad-value": "team=a b",
    "empty-set": "env in ()",
    "unclosed-set": "env in (prod",
    "bad-set-value": "env in (prod, -x)",
    "bad-prefix": "-x.io/a=b",
}


@pytest.mark.parametrize("selector", BAD.values(), ids=BAD.keys())
def test_a_bad_selector_is_refused_with_the_term(selector: str) -> None:
    with pytest.raises(ValueError, match="selector"):
        parse_selector(selector)


def test_a_bad_selector_fails_at_start_up_naming_the_variable_value() -> None:
    env = {"RUNNER_OPERATOR_DEFAULT_CREDENTIALS_NAMESPACE_SELECTOR": "team in (a"}
    with pytest.raises(ValueError, match="default_credentials_namespace_selector"):
        Settings.from_env(env)


def test_nothing_configured_cluster_wide_allows_no_namespace() -> None:
    scope = DefaultCredentialScope.configure(None, None, watched=())
    assert not scope.allows("team-a")
    assert not scope.allows("team-a", {"any": "label"})
    assert scope.describe() == "no namespace"


def test_nothing_configured_allows_exactly_the_watched_namespaces() -> None:
    scope = DefaultCredentialScope.configure(None, "", watched=["team-a", "team-b"])
    assert scope.allows("team-a")
    assert scope.allows("team-b")
    assert not scope.allows("team-c")


def test_configured_namespaces_replace_the_watched_ones() -> None:
    scope = DefaultCredentialScope.configure(" team-b , platform ", None, watched=["team-a"])
    assert scope.allows("team-b")
    assert scope.allows("platform")
    assert not scope.allows("team-a")
    assert not scope.needs_labels("team-a")  # no selector: labels are never read


def test_star_allows_every_namespace_without_reading_labels() -> None:
    scope = DefaultCredentialScope.configure("*", "team=x", watched=())
    assert scope.allows("anything")
    assert not scope.needs_labels("anything")
    assert scope.describe() == "namespaces * and namespaces labelled team=x"


def test_configured_globs_allow_any_match() -> None:
    scope = DefaultCredentialScope.configure("team-*,platform", None, watched=["ignored"])
    assert scope.allows("team-a")
    assert scope.allows("platform")
    assert not scope.allows("ignored")
    assert not scope.allows("platform-2")


WATCHED = {
    "glob": ("e2e-*", "e2e-abc", True),
    "glob-other": ("e2e-*", "prod", False),
    "exclusion-after-glob": ("app-*, !*-pr-*", "app-pr-1", False),
    "exclusion-keeps-the-rest": ("app-*, !*-pr-*", "app-live", True),
    "leading-exclusion-starts-from-all": ("!kube-*", "team-a", True),
    "leading-exclusion": ("!kube-*", "kube-system", False),
    "re-include-only-what-the-first-matched": ("app-*, !*-pr-*, *pr-1", "other-pr-1", False),
    "re-include": ("app-*, !*-pr-*, *pr-1", "app-pr-1", True),
}


@pytest.mark.parametrize(("pattern", "namespace", "expected"), WATCHED.values(), ids=WATCHED.keys())
def test_watched_patterns_read_as_kopf_reads_them(pattern: str, namespace: str, expected: bool) -> None:
    """Unconfigured, the default serves exactly what `run -n PATTERN` watches."""
    assert DefaultCredentialScope.configure(None, None, watched=[pattern]).allows(namespace) is expected
    assert match_namespace(NamespaceName(namespace), pattern) is expected  # kopf itself agrees


def test_the_selector_decides_where_the_list_does_not() -> None:
    scope = DefaultCredentialScope.configure("platform", "team in (payments, search)", watched=())
    assert scope.allows("platform")
    assert not scope.needs_labels("platform")
    assert scope.needs_labels("team-a")
    assert scope.allows("team-a", {"team": "search"})
    assert not scope.allows("team-a", {"team": "ads"})
    assert not scope.allows("team-a", None)  # the Namespace is gone (or its labels unknown)
    assert scope.describe() == "namespaces platform and namespaces labelled team in (payments, search)"
