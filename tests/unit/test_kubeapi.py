"""KubeApi: plain JSON calls on the official client's ApiClient, failures as its ApiException.

The client's transport is replaced at `call_api` (what a request would have carried is recorded);
the real API server answers the same calls in the e2e tier (credentials, Secret protection).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runner_operator.kubeapi import KubeApi

ROOT = Path(__file__).resolve().parents[2]


class Response:
    def __init__(self, status: int, data: bytes) -> None:
        self.status = status
        self.reason = "answer"
        self.data = data
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers


class Transport:
    """Answers every call with one response and keeps what each request carried."""

    def __init__(self, status: int = 200, data: bytes = b"{}") -> None:
        self.answer = Response(status, data)
        self.sent: list[tuple[str, str, dict[str, str], Any]] = []

    def __call__(
        self, method: str, url: str, headers: dict[str, str], body: Any, *_: Any, **__: Any
    ) -> Response:
        self.sent.append((method, url, headers, body))
        return self.answer


def api(transport: Transport, monkeypatch: pytest.MonkeyPatch) -> KubeApi:
    configuration = client.Configuration(
        host="https://kube.example:6443", api_key={"BearerToken": "Bearer t0k"}
    )
    api_client = client.ApiClient(configuration=configuration)
    monkeypatch.setattr(api_client, "call_api", transport)
    return KubeApi(api_client)


def test_a_get_quotes_its_parameters_and_returns_the_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = Transport(data=b'{"data": {"token": "dA=="}}')
    found = api(transport, monkeypatch).get(
        "/api/v1/namespaces/{namespace}/secrets/{name}", {"namespace": "a b", "name": "x/y"}
    )
    assert found == {"data": {"token": "dA=="}}
    [(method, url, headers, body)] = transport.sent
    assert (method, url, body) == (
        "GET",
        "https://kube.example:6443/api/v1/namespaces/a%20b/secrets/x%2Fy",
        None,
    )
    assert headers["Accept"] == "application/json"
    assert headers["authorization"] == "Bearer t0k"


def test_a_patch_sends_its_body_with_its_content_type(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = Transport(data=b'{"metadata": {"finalizers": ["f"]}}')
    patch = {"metadata": {"finalizers": ["f"]}}
    api(transport, monkeypatch).patch(
        "/api/v1/namespaces/{name}", {"name": "n"}, patch, "application/merge-patch+json"
    )
    [(method, _, headers, body)] = transport.sent
    assert (method, headers["Content-Type"], body) == ("PATCH", "application/merge-patch+json", patch)


@pytest.mark.parametrize(
    ("status", "kind"), [(404, client.ApiException), (403, client.ApiException), (500, client.ApiException)]
)
def test_a_refusal_is_the_clients_api_exception_with_its_status(
    status: int, kind: type[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = Transport(status, json.dumps({"kind": "Status", "code": status}).encode())
    with pytest.raises(kind) as raised:
        api(transport, monkeypatch).get("/api/v1/namespaces/{name}", {"name": "n"})
    assert isinstance(raised.value, client.ApiException)
    assert raised.value.status == status


@pytest.mark.parametrize("data", [b"[1, 2]", b'"text"'])
def test_an_answer_that_is_not_a_json_object_is_refused(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(client.ApiException, match="not a JSON object"):
        api(Transport(200, data), monkeypatch).get("/api/v1/namespaces/{name}", {"name": "n"})


def test_an_empty_answer_is_an_empty_object(monkeypatch: pytest.MonkeyPatch) -> None:
    assert api(Transport(200, b""), monkeypatch).get("/api/v1/namespaces/{name}", {"name": "n"}) == {}


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://kube.example:6443"}}]
users: [{name: u, user: {token: t0k}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

PROBE = """
import sys
from runner_operator import credentials
credentials.kubernetes_secret_getter()
credentials.kubernetes_namespace_labels()
credentials.kubernetes_secret_guard()
print(sorted(m for m in sys.modules if m.startswith("kubernetes.client.api.")))
"""


def test_the_credential_calls_do_not_import_the_typed_core_api(tmp_path: Path) -> None:
    """What the module is for: the operator process never builds CoreV1Api's 240 models (in a fresh
    interpreter: this test session imports them elsewhere)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT / "operator")}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert "kubernetes.client.api.core_v1_api" not in done.stdout
