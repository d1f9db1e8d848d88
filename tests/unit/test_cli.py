"""The CLI's own surface (the commands themselves are exercised end to end in tests/e2e)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from runner_operator import cli

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out == f"runner-operator {declared}\n"
