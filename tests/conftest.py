"""Test-wide options: which Kubernetes cluster the e2e tier uses, and the e2e skip/fail policy.

Options must live in this top-level conftest. With `--kubeconfig` (or E2E_KUBECONFIG) the e2e
tier runs unchanged against that cluster (a kind cluster on a laptop); otherwise it starts the
local etcd + kube-apiserver built by tests/testenv/build.sh. In CI a missing control plane is a
failure, never a skip.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kubeconfig",
        default=os.environ.get("E2E_KUBECONFIG"),
        help="run the e2e tier against this cluster instead of the local test control plane",
    )
    parser.addoption("--no-e2e", action="store_true", help="deselect the e2e tier (unit tests only)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e = [item for item in items if "tests/e2e/" in item.nodeid]
    for item in e2e:
        item.add_marker(pytest.mark.e2e)
    if config.getoption("--no-e2e"):
        config.hook.pytest_deselected(items=e2e)
        items[:] = [item for item in items if item not in e2e]
        return
    # Run the slow, real-server tier last so unit failures show first.
    items[:] = [item for item in items if item not in e2e] + e2e
