"""Which namespaces may use the operator-wide default credential.

The default token acts for the whole organisation: any ManagedRunner that may use it can adopt,
reconfigure or delete any runner the token sees. So it serves only the namespaces the operator's
configuration names (a list, or a Kubernetes label selector on the Namespace); every other
namespace names a Secret of its own. With neither set, an operator scoped to namespaces (`run -n`)
lets exactly those use it, and a cluster-wide one lets none: whoever installs cluster-wide says
which teams share the default credential.

Pure: the Namespace's labels are read by the caller (only when a selector needs them).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SET = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: `key`, `!key`, `key=v`, `key!=v`, `key in (..)`, `key notin (..)`."""

    key: str
    operator: str
    """exists, absent, in or notin (equality is `in` with one value, inequality `notin`)."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "absent":
            return self.key not in labels
        if self.operator == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """A Kubernetes label selector (the syntax of `kubectl get -l`); ValueError says what is wrong.

    Written here because neither the official client nor kopf exposes a matcher for it.
    """
    terms = [term.strip() for term in _split(text)]
    if not any(terms):
        raise ValueError("empty label selector")
    return tuple(_requirement(term) for term in terms)


def _split(text: str) -> Iterable[str]:
    """Split on commas outside parentheses (`a in (x,y),b` is two terms)."""
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def _requirement(term: str) -> Requirement:
    if found := _SET.match(term):
        values = frozenset(v.strip() for v in found["values"].split(","))
        if not values or not all(v and _VALUE.match(v) for v in values):
            raise ValueError(f"label selector term {term!r}: invalid value list")
        return Requirement(_key(found["key"], term), found["op"], values)
    if found := _EQUALITY.match(term):
        if not _VALUE.match(found["value"]):
            raise ValueError(f"label selector term {term!r}: invalid value {found['value']!r}")
        operator = "notin" if found["op"] == "!=" else "in"
        return Requirement(_key(found["key"], term), operator, frozenset({found["value"]}))
    if term.startswith("!"):
        return Requirement(_key(term[1:].strip(), term), "absent")
    return Requirement(_key(term, term), "exists")


def _key(key: str, term: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"label selector term {term!r}: invalid label key {key!r}")
    return key


@dataclass(frozen=True)
class DefaultCredentialScope:
    """The namespaces allowed to use the operator's default credential."""

    globs: tuple[str, ...] = ()
    """configured names or shell globs (`team-*`; `*` for every namespace): any one allows."""
    watched: tuple[str, ...] = ()
    """`run -n` patterns (kopf's syntax: comma-separated globs, `!` excludes), used when nothing
    is configured."""
    selector: tuple[Requirement, ...] = ()
    selector_text: str = ""

    @classmethod
    def configure(
        cls, namespaces: str | None, selector: str | None, watched: Iterable[str]
    ) -> DefaultCredentialScope:
        """From the settings (comma-separated names or globs; a label selector) and `run -n`."""
        globs = tuple(n.strip() for n in (namespaces or "").split(",") if n.strip())
        return cls(
            globs=globs,
            watched=() if globs or selector else tuple(watched),
            selector=parse_selector(selector) if selector else (),
            selector_text=selector or "",
        )

    def listed(self, namespace: str) -> bool:
        """Allowed by name alone (the configured globs, or else the watched patterns)."""
        if any(fnmatch.fnmatchcase(namespace, glob) for glob in self.globs):
            return True
        return any(_watched_by(namespace, pattern) for pattern in self.watched)

    def needs_labels(self, namespace: str) -> bool:
        """Whether deciding for this namespace needs its labels (read them only then)."""
        return bool(self.selector) and not self.listed(namespace)

    def allows(self, namespace: str, labels: Mapping[str, str] | None = None) -> bool:
        """Whether a ManagedRunner in `namespace` (with these Namespace labels) may use the default."""
        if self.listed(namespace):
            return True
        return bool(self.selector) and labels is not None and all(r.matches(labels) for r in self.selector)

    def describe(self) -> str:
        """Who may use it, for the operator's log (never for a resource's status: other teams' names)."""
        parts = [f"namespaces {', '.join(self.globs or self.watched)}"] if self.globs or self.watched else []
        if self.selector:
            parts.append(f"namespaces labelled {self.selector_text}")
        return " and ".join(parts) or "no namespace"


def _watched_by(namespace: str, pattern: str) -> bool:
    """kopf's namespace pattern: globs left to right; `!glob` excludes; a later glob re-includes only
    what the first one matched; a leading exclusion starts from every namespace."""
    globs = [glob.strip() for glob in pattern.split(",")]
    if globs[0].startswith("!"):
        globs.insert(0, "*")
    first = fnmatch.fnmatchcase(namespace, globs[0])
    matched = first
    for glob in globs[1:]:
        if glob.startswith("!"):
            matched = matched and not fnmatch.fnmatchcase(namespace, glob[1:])
        else:
            matched = matched or (first and fnmatch.fnmatchcase(namespace, glob))
    return matched
