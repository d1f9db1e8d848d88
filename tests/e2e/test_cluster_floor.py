"""bench/cluster_floor.py, short: it makes the writes it says, and the CRD keeps every status it writes."""

from __future__ import annotations

from typing import Any

from bench import cluster_floor
from runner_operator.resource import GROUP, PLURAL, VERSION
from tests.e2e.kube import Kube, json_object

RUNNERS = 10


def test_the_floor_makes_the_operators_writes_and_the_crd_keeps_them(kube: Kube, crd: str) -> None:
    pids = (
        {name: kube.cluster.process(name).pid for name in ("kube-apiserver", "etcd")}
        if kube.cluster is not None
        else {}
    )
    phases, ns = cluster_floor.measure(kube.api, kube.kubeconfig, pids, RUNNERS, threads=2)
    try:
        creates, writes = phases["driver's creates"], phases["the operator's writes"]
        # At least: the server counts every client's requests, and other tests' may overlap.
        assert creates["requests"].get("POST/managedrunners", 0) >= RUNNERS
        assert writes["requests"].get("PATCH/managedrunners/status", 0) >= 4 * RUNNERS
        assert writes["requests"].get("POST/events", 0) >= 2 * RUNNERS
        assert writes["requests"].get("PATCH/managedrunners", 0) >= RUNNERS
        assert all(seconds >= 0 for seconds in writes["cpu"].values())
        listed = _listed(kube, ns)
        assert len(listed) == RUNNERS
        for item in listed:
            # Every field of the last status is in the CRD's schema (none pruned), as the operator's are.
            assert _shape(item["status"]) == _shape(cluster_floor.statuses(item)[-1])
            assert item["status"]["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
            assert item["metadata"]["finalizers"] == [cluster_floor.FINALIZER]
    finally:
        for item in _listed(kube, ns):
            release = {"metadata": {"finalizers": None}}
            kube.custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, item["metadata"]["name"], release
            )
        kube.core.delete_namespace(ns)


def _listed(kube: Kube, ns: str) -> list[dict[str, Any]]:
    listed = json_object(kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL))
    items: list[dict[str, Any]] = listed["items"]
    return items


def _shape(value: object) -> object:
    """The keys of a JSON value, all the way down (values left out)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return None
