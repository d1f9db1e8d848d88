"""The lock files (scripts/lock) match pyproject.toml and pin every file by hash.

requirements.lock is what the image installs, requirements-dev.lock what scripts/setup (and so CI)
installs, both with pip's --require-hashes. A dependency added to pyproject.toml without running
scripts/lock fails here, before a build would install something unlocked.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(name: str) -> dict[str, tuple[Version, list[str]]]:
    """package -> (pinned version, its hashes), from a `uv pip compile --generate-hashes` file."""
    found: dict[str, tuple[Version, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", (ROOT / name).read_text()):
        head = re.match(r"([A-Za-z0-9_.\-\[\]]+)==(\S+)", block)
        if head:
            found[canonicalize_name(head[1].split("[")[0])] = (
                Version(head[2]),
                re.findall(r"--hash=sha256:([0-9a-f]{64})", block),
            )
    return found


LOCKS = {
    "requirements.lock": PROJECT["dependencies"],
    "requirements-dev.lock": [
        *PROJECT["dependencies"],
        *PROJECT["optional-dependencies"]["test"],
        *PROJECT["optional-dependencies"]["lint"],
    ],
}


@pytest.mark.parametrize("lock", LOCKS)
def test_every_declared_dependency_is_pinned_within_its_range(lock: str) -> None:
    pinned = pins(lock)
    for text in LOCKS[lock]:
        wanted = Requirement(text)
        name = canonicalize_name(wanted.name)
        assert name in pinned, f"{lock} lacks {wanted.name}: run scripts/lock"
        assert pinned[name][0] in wanted.specifier, f"{lock} pins {name} {pinned[name][0]}, outside {wanted}"


@pytest.mark.parametrize("lock", LOCKS)
def test_every_pin_carries_hashes(lock: str) -> None:
    pinned = pins(lock)
    assert len(pinned) > len(LOCKS[lock])  # the transitive dependencies are locked too
    assert all(hashes for _, hashes in pinned.values()), [n for n, (_, h) in pinned.items() if not h]


def test_the_image_lock_is_the_dev_locks_runtime_part() -> None:
    """Tests run against exactly the versions the image ships."""
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {n: v for n, (v, _) in runtime.items()} == {n: dev[n][0] for n in runtime}
