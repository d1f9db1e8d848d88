"""The chart README is helm-docs' output for values.yaml and README.md.gotmpl, and documents every value."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.testenv.tools import tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "managed-runner-operator"


def generated() -> str:
    proc = subprocess.run(
        [
            tool("helm-docs"),
            "--chart-search-root",
            ".",
            "--sort-values-order",
            "file",
            "--skip-version-footer",
            "--dry-run",
        ],
        cwd=CHART,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout


def test_the_chart_readme_is_current() -> None:
    assert (CHART / "README.md").read_text().strip() == generated().strip(), (
        "helm/managed-runner-operator/README.md is stale: run scripts/chart-docs"
    )


def test_every_value_has_a_description() -> None:
    rows = re.findall(r"^\| (\S+) \| \w+ \| .*? \| (.*) \|$", (CHART / "README.md").read_text(), re.M)
    assert len(rows) > 60
    undocumented = [key for key, text in rows if not text.strip()]
    assert undocumented == [], f"add a `# --` comment above these keys in values.yaml: {undocumented}"
