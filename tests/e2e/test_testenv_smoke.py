"""Smoke tests proving the e2e tier talks to a real Kubernetes API server (issue 2)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from tests.e2e.kube import Kube, wait_for

DATA = Path(__file__).parent / "data"
GROUP, VERSION, PLURAL = "testenv.example.com", "v1", "widgets"


@pytest.fixture(scope="module")
def widgets(kube: Kube) -> str:
    return kube.apply_crd(DATA / "widgets-crd.yaml")


def test_server_reports_the_pinned_release(kube: Kube) -> None:
    if kube.cluster is None:
        pytest.skip("only the local control plane has a pinned version")
    version = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.37.2"
    assert version["serverVersion"]["minor"] == "37"
    assert version["clientVersion"]["gitVersion"] == "v1.37.2"


def test_status_subresource_watch_and_printer_columns(kube: Kube, widgets: str) -> None:
    ns = kube.new_namespace("smoke")
    seen: list[dict[str, Any]] = []
    ready = threading.Event()

    def watch_widgets() -> None:
        w = watch.Watch()
        ready.set()
        for event in w.stream(
            kube.custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, timeout_seconds=20
        ):
            seen.append(event)
            if event["object"].get("status", {}).get("phase") == "Done":
                w.stop()

    thread = threading.Thread(target=watch_widgets, daemon=True)
    thread.start()
    ready.wait(5)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
    }
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    # A status written through the main resource is ignored; the status subresource takes it.
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "w1", {"status": {"phase": "Nope"}}
    )
    assert "status" not in (kube.get(GROUP, VERSION, ns, PLURAL, "w1") or {})
    kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "w1", {"status": {"phase": "Done"}}
    )
    thread.join(20)
    types = [e["type"] for e in seen]
    assert types[0] == "ADDED"
    assert seen[-1]["type"] == "MODIFIED"
    assert seen[-1]["object"]["status"]["phase"] == "Done"
    table = kube.kubectl("get", "widgets", "-n", ns).stdout
    assert table.split("\n")[0].split() == ["NAME", "SIZE", "PHASE"]
    assert table.split("\n")[1].split()[:3] == ["w1", "3", "Done"]
    body = {**body, "metadata": {"name": "w2"}, "spec": {"size": 0}}
    with pytest.raises(client.ApiException) as bad:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    assert bad.value.status == 422


def test_finalizer_blocks_deletion_until_removed(kube: Kube, widgets: str) -> None:
    ns = kube.new_namespace("smoke")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": "held", "finalizers": ["testenv.example.com/hold"]},
        "spec": {"size": 1},
    }
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "held")
    held = kube.get(GROUP, VERSION, ns, PLURAL, "held")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "held", {"metadata": {"finalizers": None}}
    )
    wait_for(lambda: kube.get(GROUP, VERSION, ns, PLURAL, "held") is None, what="widget gone")


def test_rbac_denies_then_allows_a_service_account(kube: Kube, widgets: str) -> None:
    ns = kube.new_namespace("rbac")
    sa_config = kube.sa_kubeconfig(ns, "reader")
    denied = kube.kubectl("get", "widgets", "-n", ns, kubeconfig=sa_config, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert f"system:serviceaccount:{ns}:reader" in denied.stderr
    kube.rbac.create_namespaced_role(
        ns,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="widget-reader"),
            rules=[client.V1PolicyRule(api_groups=[GROUP], resources=["widgets"], verbs=["get", "list"])],
        ),
    )
    kube.rbac.create_namespaced_role_binding(
        ns,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="widget-reader"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="widget-reader"
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=ns)],
        ),
    )
    allowed = wait_for(
        lambda: kube.kubectl("get", "widgets", "-n", ns, kubeconfig=sa_config, check=False).returncode == 0,
        what="RBAC to allow",
    )
    assert allowed
    # Still no write access: the Role grants reads only.
    kube.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Widget",
            "metadata": {"name": "kept"},
            "spec": {"size": 1},
        },
    )
    write = kube.kubectl("delete", "widget", "kept", "-n", ns, kubeconfig=sa_config, check=False)
    assert write.returncode != 0
    assert "forbidden" in write.stderr.lower()
