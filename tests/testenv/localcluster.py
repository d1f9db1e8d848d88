"""Runs a real etcd + kube-apiserver + kube-controller-manager on loopback, for tests and the demo.

The binaries come from `tests/testenv/build.sh`. Everything (certificates, keys, tokens, data,
logs, kubeconfigs) lives in one work directory; each process runs in its own process group so
`stop()` leaves nothing behind even when a test fails half-way.

The controller manager runs only the controllers that make sense without nodes or a kubelet
(`CONTROLLERS`): namespace deletion, garbage collection, the service-account token controller
and ClusterRole aggregation are real; nothing creates Pods, and Pods would stay Pending anyway.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BIN_DIR = Path(__file__).resolve().parent / "bin"
START_TIMEOUT = float(os.environ.get("TESTENV_START_TIMEOUT", "120"))
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
# Controllers that work without nodes, a kubelet or a cloud: namespace deletion, garbage
# collection of ownerReferences, and tokens for legacy service-account token Secrets (that one
# runs whenever --service-account-private-key-file is given, listed or not). Not `*`: the
# workload controllers would create Pods that stay Pending forever, the serviceaccount and
# root-ca-cert-publisher controllers would add objects to every namespace, and the rest cost
# informers, memory (85 -> 107 MiB RSS measured) and CPU on a small CI machine for nothing.
CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-token-controller",
    "clusterrole-aggregation-controller",  # the chart's roles aggregated into view/edit/admin
)
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"


def missing_binaries() -> list[str]:
    """The binaries build.sh should have produced but did not (an older bin/ lacks the newest)."""
    return [name for name in BINARIES if not (BIN_DIR / name).is_file()]


def binaries_present() -> bool:
    """True when build.sh has produced every binary the local cluster needs."""
    return not missing_binaries()


def free_port() -> int:
    """A loopback port that was free a moment ago (bind 0, read, close: racy but fine here)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalCluster:
    """etcd + kube-apiserver (RBAC, token auth, SA token signing) + kube-controller-manager."""

    workdir: Path
    etcd_port: int = 0
    api_port: int = 0
    controller_manager_port: int = 0
    admin_token: str = field(default_factory=lambda: secrets.token_hex(24))
    controller_manager_token: str = field(default_factory=lambda: secrets.token_hex(24))
    # Process per component, in start order (stop() goes in reverse; a restart keeps the slot).
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_in: float = 0.0
    # Seconds from spawn to ready per component (the latest start, after a restart).
    ready_in: dict[str, float] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.workdir / "controller-manager.kubeconfig"

    def start(self) -> LocalCluster:
        """Start etcd, the apiserver, then the controller manager; return once all are healthy."""
        missing = missing_binaries()
        if missing:
            raise RuntimeError(
                f"missing in {BIN_DIR}: {', '.join(missing)}; run tests/testenv/build.sh (scripts/setup)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        self.etcd_port = self.etcd_port or free_port()
        self.api_port = self.api_port or free_port()
        self.controller_manager_port = self.controller_manager_port or free_port()
        self._write_credentials()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        self.write_kubeconfig(self.kubeconfig, user="admin", token=self.admin_token)
        return self

    def stop(self) -> None:
        """SIGTERM each process group, then SIGKILL what is left: controller manager, apiserver, etcd."""
        for proc in reversed(self._procs.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._procs.clear()

    def restart_apiserver(self, while_down: Callable[[], None] | None = None) -> None:
        """Kill and start the apiserver again on the same port and data (breaks every watch).

        `while_down` runs between the two (e.g. to start a client while nothing answers). The
        controller manager keeps running and reconnects by itself, as in a real cluster.
        """
        api = self._procs["kube-apiserver"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(api.pid, signal.SIGKILL)
        api.wait(timeout=10)
        if while_down is not None:
            while_down()
        self._start_apiserver()

    def process(self, name: str) -> subprocess.Popen[bytes]:
        """The running process of one component: `etcd`, `kube-apiserver`, `kube-controller-manager`."""
        return self._procs[name]

    def rss_mib(self, name: str) -> float:
        """Resident memory of one component (`kube-controller-manager`, ...) in MiB, from /proc."""
        pid = self.process(name).pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for {name} (pid {pid})")

    def write_kubeconfig(self, path: Path, *, user: str, token: str, namespace: str | None = None) -> Path:
        """A kubeconfig with the cluster CA and a bearer token for `user`."""
        context: dict[str, str] = {"cluster": "testenv", "user": user}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testenv",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(self.ca_path.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "testenv", "context": context}],
            "current-context": "testenv",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # -- internals -------------------------------------------------------------------------

    def _write_credentials(self) -> None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "testenv-ca")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(ca_key, hashes.SHA256())
        )
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = serialization.Encoding.PEM
        self._write("ca.crt", ca_cert.public_bytes(pem))
        # One loopback serving certificate per server, signed by the CA the clients trust.
        for server in ("apiserver", "controller-manager"):
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"kube-{server}")]))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=7))
                .add_extension(
                    x509.SubjectAlternativeName(
                        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                    ),
                    critical=False,
                )
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256())
            )
            self._write(f"{server}.crt", cert.public_bytes(pem))
            self._write(
                f"{server}.key",
                key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            )
        self._write(
            "sa.key",
            sa_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        )
        self._write(
            "sa.pub",
            sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
        )
        # The controller manager gets its own user (visible in audit and RBAC errors) in group
        # system:masters: with --use-service-account-credentials=false every controller acts as
        # this one user, and namespace deletion / garbage collection must delete any resource,
        # which the bootstrap role system:kube-controller-manager does not allow.
        self._write(
            "tokens.csv",
            (
                f'{self.admin_token},admin,admin,"system:masters"\n'
                f"{self.controller_manager_token},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER},"
                '"system:masters"\n'
            ).encode(),
        )
        self.write_kubeconfig(
            self.controller_manager_kubeconfig,
            user=CONTROLLER_MANAGER_USER,
            token=self.controller_manager_token,
        )

    def _write(self, name: str, data: bytes) -> None:
        path = self.workdir / name
        path.write_bytes(data)
        path.chmod(0o600)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [str(BIN_DIR / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self._procs[name] = proc
        return proc

    def _log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _start_etcd(self) -> None:
        data = self.workdir / "etcd-data"
        data.mkdir(mode=0o700, exist_ok=True)
        url = f"http://127.0.0.1:{self.etcd_port}"
        proc = self._spawn(
            "etcd",
            [
                f"--data-dir={data}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{free_port()}",
                "--unsafe-no-fsync",
                "--log-level=error",
            ],
        )
        self._wait("etcd", proc, lambda: _http_ok(f"{url}/health"))

    def _start_apiserver(self) -> None:
        d = self.workdir
        proc = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={d / 'certs'}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none",
                "--v=0",
            ],
        )
        context = ssl.create_default_context(cafile=str(self.ca_path))
        self._wait(
            "kube-apiserver",
            proc,
            lambda: _http_ok(f"{self.server}/readyz", context=context, token=self.admin_token),
        )

    def _start_controller_manager(self) -> None:
        d = self.workdir
        proc = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.controller_manager_kubeconfig}",
                f"--controllers={','.join(CONTROLLERS)}",
                # Every controller uses the kubeconfig's identity: no per-controller
                # ServiceAccounts in kube-system, no token round trips at start.
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.controller_manager_port}",
                f"--tls-cert-file={d / 'controller-manager.crt'}",
                f"--tls-private-key-file={d / 'controller-manager.key'}",
                # The apiserver's signing key: legacy token Secrets it fills in verify there.
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={self.ca_path}",
                "--v=0",
            ],
        )
        context = ssl.create_default_context(cafile=str(self.ca_path))
        url = f"https://127.0.0.1:{self.controller_manager_port}/healthz?verbose"
        # /healthz answers 200 as soon as the server listens; each controller adds its own check
        # only once it has been started, so wait until every one of ours reports ok.
        expected = {f"[+]{name} ok" for name in CONTROLLERS}
        self._wait(
            "kube-controller-manager",
            proc,
            lambda: expected <= set(_http_text(url, context=context).splitlines()),
        )

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: object) -> None:
        assert callable(ready)
        began = time.monotonic()
        deadline = began + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self._log_tail(name)}")
            if ready():
                self.ready_in[name] = time.monotonic() - began
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {START_TIMEOUT:.0f}s:\n{self._log_tail(name)}")


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the unread answer's connection (a TLS socket that warns when collected)
        return False
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _http_text(url: str, *, context: ssl.SSLContext | None = None) -> str:
    """The body of a 200 answer, or "" (not up yet, an error status, a refused connection)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return str(response.read().decode()) if response.status == 200 else ""
    except urllib.error.HTTPError as exc:
        exc.close()
        return ""
    except (urllib.error.URLError, OSError, ValueError):
        return ""


def server_version(kubeconfig: Path) -> dict[str, str]:
    """The server's /version as kubectl reports it (used to prove the pinned release)."""
    out = subprocess.run(
        [str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig), "version", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    parsed: dict[str, dict[str, str]] = json.loads(out)
    return parsed["serverVersion"]
