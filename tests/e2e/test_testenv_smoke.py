"""Smoke tests proving the e2e tier talks to a real Kubernetes API server (issue 2) and that
namespace deletion and garbage collection are real (a kube-controller-manager runs)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, watch

from tests.e2e.kube import Kube, wait_for

DATA = Path(__file__).parent / "data"
GROUP, VERSION, PLURAL = "testenv.example.com", "v1", "widgets"
T = TypeVar("T")


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


# -- kube-controller-manager: namespace deletion and garbage collection are real -----------------

DELETE_TIMEOUT = 60.0


def _read_or_none(read: Callable[[], T]) -> T | None:
    try:
        return read()
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _configmap(kube: Kube, ns: str, name: str) -> client.V1ConfigMap | None:
    return _read_or_none(lambda: kube.core.read_namespaced_config_map(name, ns))


def _create_configmap(
    kube: Kube,
    ns: str,
    name: str,
    *,
    finalizers: list[str] | None = None,
    owner: client.V1ConfigMap | None = None,
) -> client.V1ConfigMap:
    owners = None
    if owner is not None:
        assert owner.metadata is not None
        owners = [
            client.V1OwnerReference(
                api_version="v1", kind="ConfigMap", name=owner.metadata.name, uid=owner.metadata.uid
            )
        ]
    meta = client.V1ObjectMeta(name=name, finalizers=finalizers, owner_references=owners)
    created: client.V1ConfigMap = kube.core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=meta, data={"k": "v"})
    )
    return created


def _gone(kube: Kube, ns: str) -> bool:
    return _read_or_none(lambda: kube.core.read_namespace(ns)) is None


def test_namespace_deletion_completes(kube: Kube, record_property: Callable[[str, object], None]) -> None:
    ns = kube.new_namespace("nsdel")
    _create_configmap(kube, ns, "settings")
    kube.create_secret(ns, "credentials", {"token": "x"})
    started = time.monotonic()
    kube.core.delete_namespace(ns)
    deadline = started + DELETE_TIMEOUT
    while not (gone := _gone(kube, ns)) and time.monotonic() < deadline:
        time.sleep(0.5)
    took = time.monotonic() - started
    assert gone, f"namespace {ns} is still there {took:.0f}s after its deletion"
    record_property("namespace_deletion_seconds", round(took, 2))
    print(f"namespace deletion took {took:.1f}s")


def test_finalizer_holds_a_terminating_namespace_until_removed(kube: Kube) -> None:
    ns = kube.new_namespace("nsfin")
    _create_configmap(kube, ns, "held", finalizers=["testenv.example.com/hold"])
    kube.create_secret(ns, "plain", {"token": "x"})
    kube.core.delete_namespace(ns)

    def finalizers_remaining() -> bool:
        status = kube.core.read_namespace(ns).status
        if status is None:
            return False
        conditions = {c.type: c.status for c in status.conditions or []}
        held = conditions.get("NamespaceFinalizersRemaining") == "True"
        return bool(status.phase == "Terminating" and held)

    # The namespace controller has been through the namespace: it deleted what it could and
    # reports the finalizer that holds the rest.
    wait_for(finalizers_remaining, timeout=DELETE_TIMEOUT, what="NamespaceFinalizersRemaining")
    wait_for(
        lambda: _read_or_none(lambda: kube.core.read_namespaced_secret("plain", ns)) is None,
        timeout=DELETE_TIMEOUT,
        what="the Secret deleted by the namespace controller",
    )
    time.sleep(3)
    held = _configmap(kube, ns, "held")
    assert held is not None
    assert held.metadata is not None
    assert held.metadata.deletion_timestamp is not None
    status = kube.core.read_namespace(ns).status
    assert status is not None
    assert status.phase == "Terminating"

    kube.core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(kube, ns), timeout=DELETE_TIMEOUT, interval=0.5, what=f"namespace {ns} deleted")


@pytest.mark.parametrize("propagation", ["Background", "Foreground", "Orphan"])
def test_garbage_collector_follows_owner_references(kube: Kube, propagation: str) -> None:
    ns = kube.new_namespace("gc")
    owner = _create_configmap(kube, ns, "owner")
    _create_configmap(kube, ns, "dependent", owner=owner)
    _create_configmap(kube, ns, "bystander")
    kube.core.delete_namespaced_config_map(
        "owner", ns, body=client.V1DeleteOptions(propagation_policy=propagation)
    )
    # Foreground and Orphan put a finalizer on the owner that only the garbage collector removes.
    wait_for(lambda: _configmap(kube, ns, "owner") is None, timeout=DELETE_TIMEOUT, what="owner deleted")
    if propagation == "Orphan":

        def orphaned() -> client.V1ObjectMeta | None:
            cm = _configmap(kube, ns, "dependent")
            meta = cm.metadata if cm is not None else None
            return meta if meta is not None and not meta.owner_references else None

        dependent = wait_for(
            orphaned, timeout=DELETE_TIMEOUT, what="the dependent orphaned (ownerReference removed)"
        )
        assert dependent.deletion_timestamp is None
    else:
        wait_for(
            lambda: _configmap(kube, ns, "dependent") is None,
            timeout=DELETE_TIMEOUT,
            what="the dependent garbage-collected",
        )
    assert _configmap(kube, ns, "bystander") is not None


def test_token_controller_fills_legacy_token_secrets(kube: Kube) -> None:
    ns = kube.new_namespace("satoken")
    kube.core.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="bot"))
    )
    kube.core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="bot-token", annotations={"kubernetes.io/service-account.name": "bot"}
            ),
            type="kubernetes.io/service-account-token",
        ),
    )

    def filled_token() -> str | None:
        data = kube.core.read_namespaced_secret("bot-token", ns).data
        encoded = data.get("token") if data else None
        return base64.b64decode(encoded).decode() if encoded else None

    token = wait_for(filled_token, timeout=DELETE_TIMEOUT, what="the token controller to fill the Secret")
    # The apiserver accepts the token: the controller signed it with the key it verifies with.
    review = client.AuthenticationV1Api(kube.api).create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
    )
    status = review.status
    assert status is not None
    assert status.authenticated, status
    assert status.user is not None
    assert status.user.username == f"system:serviceaccount:{ns}:bot"


def test_controller_manager_survives_an_apiserver_restart(kube: Kube) -> None:
    if kube.cluster is None:
        pytest.skip("needs the local control plane (restarts its kube-apiserver)")
    manager = kube.cluster.process("kube-controller-manager")
    kube.cluster.restart_apiserver()
    assert manager.poll() is None, "the controller manager exited when the apiserver went away"
    ns = kube.new_namespace("restart")
    owner = _create_configmap(kube, ns, "owner")
    _create_configmap(kube, ns, "dependent", owner=owner)
    kube.core.delete_namespaced_config_map("owner", ns)
    wait_for(
        lambda: _configmap(kube, ns, "dependent") is None,
        timeout=DELETE_TIMEOUT,
        what="garbage collection after the restart",
    )
    kube.core.delete_namespace(ns)
    wait_for(
        lambda: _gone(kube, ns),
        timeout=DELETE_TIMEOUT,
        interval=0.5,
        what="namespace deleted after the restart",
    )
    assert manager.poll() is None
