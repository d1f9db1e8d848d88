"""Session fixtures for the e2e tier: the cluster (local control plane or --kubeconfig)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner_operator.simulator.config import Timings
from tests.e2e.harness import OperatorProcess, SimulatorThread
from tests.e2e.kube import Kube
from tests.testenv import localcluster


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    external = request.config.getoption("--kubeconfig")
    if external:
        with Kube(Path(external)) as given:
            yield given
        return
    if not localcluster.binaries_present():
        message = "no Kubernetes control plane: run tests/testenv/build.sh (or pass --kubeconfig)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(message)
    cluster = localcluster.LocalCluster(tmp_path_factory.mktemp("k8s"))
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        pytest.fail(f"the local control plane did not start: {exc}", pytrace=False)
    try:
        with Kube(cluster.kubeconfig, cluster=cluster) as local:
            yield local
    finally:
        cluster.stop()


CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "managedrunners.sandbox.coreweave.com.yaml"
E2E_TIMINGS = Timings(
    install_seconds=0.5, provision_seconds=1.0, rollout_seconds=1.0, delete_seconds=1.5, heartbeat_seconds=1.0
)


@pytest.fixture(scope="session")
def crd(kube: Kube) -> str:
    return kube.apply_crd(CRD_PATH)


@pytest.fixture(scope="session")
def sim() -> Iterator[SimulatorThread]:
    simulator = SimulatorThread(E2E_TIMINGS).start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def own_sim() -> Iterator[SimulatorThread]:
    """A simulator of one test's own, so its request log holds only that test's operators' calls."""
    simulator = SimulatorThread(E2E_TIMINGS).start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="session")
def operator(
    kube: Kube, crd: str, sim: SimulatorThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for every namespace named e2e-*; tests that kill an operator start their own."""
    proc = OperatorProcess(kube.kubeconfig, ["e2e-*"], sim.url, tmp_path_factory.mktemp("operator")).start()
    try:
        yield proc
    finally:
        proc.stop()
        OUTPUTS.append(proc.output())


OUTPUTS: list[str] = []


@pytest.fixture
def ns(kube: Kube, sim: SimulatorThread) -> str:
    """A fresh namespace with the API token Secret `coreweave-api`."""
    name = kube.new_namespace("e2e")
    kube.create_secret(name, "coreweave-api", {"token": sim.token})
    return name
