"""The command-line tools tests/testenv/build.sh builds (helm, promtool), found the same way everywhere."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.testenv.localcluster import BIN_DIR


def tool(name: str) -> str:
    """bin/<name> from build.sh, else one on PATH; without either, skip locally and fail in CI."""
    built = BIN_DIR / name
    if built.is_file():
        return str(built)
    found = shutil.which(name)
    if found:
        return found
    message = f"{name} not found: run tests/testenv/build.sh (scripts/setup)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message)
