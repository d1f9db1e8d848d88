"""Fixtures for every unit test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner_operator.cloud import budget


@pytest.fixture(autouse=True)
def fresh_budgets() -> Iterator[None]:
    """Request budgets are shared per (endpoint, token) process-wide: each test starts with none."""
    budget.clear_registry()
    yield
    budget.clear_registry()
