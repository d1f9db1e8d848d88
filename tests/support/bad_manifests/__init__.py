"""A corpus of ManagedRunner manifests the API server must reject at apply time, one case per YAML file.

Each `*.yaml` file in this directory is one case: a single ManagedRunner document (no namespace; the
tests use a fresh one per case) preceded by header comments:

    # <what is wrong, in words>.
    # category: <one of CATEGORIES>
    # expect: <substring of the API server's error for `kubectl apply --server-side`>
    # expect-create: <substring for `kubectl create`, when its wording differs>   (optional)
    # base: base/<file>.yaml        (optional: the valid manifest the case was derived from)
    # update: true                  (optional: create `base` first, then apply the case as a change)
    # known-gap: <why the CRD accepts it today>   (optional: an expected failure until the CRD is fixed)

`base/` holds copies of examples/minimal.yaml and examples/managedrunner.yaml without their namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DIR = Path(__file__).resolve().parent
CATEGORIES = frozenset(
    {
        "wrong-type",
        "out-of-range",
        "bad-enum",
        "bad-quantity",
        "bad-cidr",
        "bad-cron",
        "immutable-change",
        "missing-policy",
        "missing-required",
        "unknown-field",
        "oversized",
        "bad-format",
        "cross-field",
    }
)
KEYS = ("category", "expect", "expect-create", "base", "update", "known-gap")


@dataclass(frozen=True)
class Case:
    path: Path
    description: str
    headers: dict[str, list[str]]
    document: Any

    @property
    def name(self) -> str:
        return self.path.stem

    def header(self, key: str) -> str | None:
        values = self.headers.get(key, [])
        return values[0] if values else None

    @property
    def category(self) -> str:
        return self.header("category") or ""

    @property
    def expect(self) -> str:
        return self.header("expect") or ""

    @property
    def expect_create(self) -> str:
        return self.header("expect-create") or self.expect

    @property
    def base(self) -> Path | None:
        base = self.header("base")
        return DIR / base if base else None

    @property
    def update(self) -> bool:
        return self.header("update") == "true"

    @property
    def known_gap(self) -> str | None:
        return self.header("known-gap")

    @property
    def object_name(self) -> str:
        return str(self.document["metadata"]["name"])


def parse(path: Path) -> Case:
    text = path.read_text()
    headers: dict[str, list[str]] = {}
    description = ""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line[1:].strip()
        key, sep, value = body.partition(":")
        if sep and key in KEYS:
            headers.setdefault(key, []).append(value.strip())
        elif not description:
            description = body
    return Case(path, description, headers, yaml.safe_load(text))


def cases() -> list[Case]:
    return [parse(path) for path in sorted(DIR.glob("*.yaml"))]
