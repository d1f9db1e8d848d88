"""A thin handle on the cluster under test: API clients, kubectl, namespaces and SA kubeconfigs.

Works the same for the local control plane and for any cluster named by a kubeconfig.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config

from tests.testenv.localcluster import BIN_DIR, LocalCluster

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None], *, timeout: float = 30, interval: float = 0.2, what: str = ""
) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last value: {last!r}")


def json_object(value: object) -> dict[str, Any]:
    """A custom-objects API answer (the client types it `object`) as the JSON object it is."""
    assert isinstance(value, dict), f"expected a JSON object, got {type(value).__name__}: {value!r}"
    return value


@dataclass
class Kube:
    kubeconfig: Path
    cluster: LocalCluster | None = None
    api: client.ApiClient = field(init=False)
    _workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kube-")))

    def __post_init__(self) -> None:
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))

    def close(self) -> None:
        """Close the pooled TLS connections: left to the garbage collector, a socket warns (an error here)."""
        self.api.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    @property
    def apiext(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api)

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl (the one built with the test server if present) against this cluster."""
        binary = str(BIN_DIR / "kubectl") if (BIN_DIR / "kubectl").exists() else shutil.which("kubectl")
        assert binary, "kubectl not found: run tests/testenv/build.sh or install kubectl"
        proc = subprocess.run(
            [binary, "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def apply_crd(self, path: Path) -> str:
        """Server-side apply a CRD file and wait until it is Established; return its name."""
        doc = yaml.safe_load(path.read_text())
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        name: str = doc["metadata"]["name"]

        def established() -> bool:
            status = self.apiext.read_custom_resource_definition(name).status
            conditions = (status.conditions if status else None) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        wait_for(established, what=f"CRD {name} Established")
        return name

    def new_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        return name

    def sa_kubeconfig(self, namespace: str, sa: str, *, expiration: int = 3600) -> Path:
        """Create ServiceAccount `sa` (no controller does it here), mint a token, write a kubeconfig."""
        try:
            self.core.create_namespaced_service_account(
                namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa))
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration)
        )
        status = self.core.create_namespaced_service_account_token(sa, namespace, request).status
        assert status is not None
        assert status.token, f"no token minted for {namespace}/{sa}"
        token = status.token
        raw = yaml.safe_load(self.kubeconfig.read_text())
        current = next(c for c in raw["contexts"] if c["name"] == raw["current-context"])
        cluster = next(c for c in raw["clusters"] if c["name"] == current["context"]["cluster"])
        out = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": f"{namespace}-{sa}", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "sa",
                    "context": {
                        "cluster": cluster["name"],
                        "user": f"{namespace}-{sa}",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "sa",
        }
        path = self._workdir / f"{namespace}-{sa}.kubeconfig"
        path.write_text(yaml.safe_dump(out))
        path.chmod(0o600)
        return path

    def create_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        )
        self.core.create_namespaced_secret(namespace, body)

    def get(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        try:
            return json_object(
                self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
