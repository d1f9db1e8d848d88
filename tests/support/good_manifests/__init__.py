"""The bad-manifest corpus's twin: ManagedRunners near a rejected case that the CRD (and the API) must accept.

Each `*.yaml` file is one ManagedRunner (no namespace) preceded by comments: what it shows, then
`# twin: <bad case>` naming the rejected case it sits next to. A CRD stricter than the contract
fails here; a CRD looser than it fails the bad corpus.

`# api-refuses: <substring>` (optional) marks a manifest the CRD accepts on purpose although the
simulator refuses it: a check the contract only marks [INFERRED], left to the API (the operator then
reports the API's refusal) rather than enforced at apply time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DIR = Path(__file__).resolve().parent


def api_refusal(path: Path) -> str | None:
    """The simulator's refusal an [INFERRED] check gives this manifest, if its header names one."""
    for line in path.read_text().splitlines():
        if line.startswith("# api-refuses:"):
            return line.split(":", 1)[1].strip()
    return None


def manifests() -> list[tuple[Path, dict[str, Any], str]]:
    """(file, document, its twin's name) for every good manifest."""
    out = []
    for path in sorted(DIR.glob("*.yaml")):
        text = path.read_text()
        twin = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# twin:"))
        out.append((path, yaml.safe_load(text), twin))
    return out
