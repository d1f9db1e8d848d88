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


@pytest.mark.parametrize(
    ("argv", "configured", "expected"),
    [
        ([], "info", "info"),
        ([], "warning", "warning"),
        (["--log-level", "error"], "debug", "error"),
        (["-v"], "error", "debug"),
        (["-v", "--log-level", "warning"], "info", "debug"),
    ],
)
def test_log_level(argv: list[str], configured: str, expected: str) -> None:
    args = cli.build_parser().parse_args(["run", *argv])
    assert cli.log_level(args, configured) == expected


def test_a_bad_log_level_names_the_variable() -> None:
    from runner_operator.settings import Settings

    with pytest.raises(ValueError, match="log_level"):
        Settings.from_env({"RUNNER_OPERATOR_LOG_LEVEL": "verbose"})
