"""pyproject.toml keeps its lists in step: the pure core is both no-I/O-checked and coverage-gated."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "runner_operator"


def config() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def contract(name: str) -> dict[str, Any]:
    contracts: list[dict[str, Any]] = config()["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"] == name)


def test_the_coverage_gate_measures_exactly_the_pure_core() -> None:
    pure = set(contract("The planning core does no I/O")["source_modules"])
    assert set(config()["tool"]["coverage"]["run"]["source_pkgs"]) == pure


def test_only_the_cli_and_the_handlers_may_know_kopf() -> None:
    """Every other module of the layers contract (which is exhaustive) is in the kopf-free list."""
    layers = contract("Handlers on top, pure core at the bottom")
    assert layers["exhaustive"] is True
    named = {m.strip() for layer in layers["layers"] for m in layer.split("|")}
    kopf_free = set(contract("Only the handler layer and the CLI know kopf")["source_modules"])
    assert {f"runner_operator.{m}" for m in named - {"cli", "handlers"}} == kopf_free


def test_every_setting_is_in_the_readme_table() -> None:
    """Each RUNNER_OPERATOR_* variable is documented (a `/ _SUFFIX` cell documents a sibling)."""
    from runner_operator.settings import Settings

    readme = (ROOT / "README.md").read_text()
    missing = []
    for name in Settings.model_fields:
        variable = f"RUNNER_OPERATOR_{name.upper()}"
        if f"`{variable}`" in readme:
            continue
        siblings = [f"`_{variable[len(prefix) + 1 :]}`" for prefix in _prefixes(variable)]
        if not any(s in readme for s in siblings):
            missing.append(variable)
    assert not missing, f"README's environment table lacks {missing}"


def _prefixes(variable: str) -> list[str]:
    parts = variable.split("_")
    return ["_".join(parts[:i]) for i in range(2, len(parts))]
