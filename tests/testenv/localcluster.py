"""Runs a real etcd + kube-apiserver on loopback, the way envtest does, for tests and the demo.

The binaries come from `tests/testenv/build.sh`. Everything (certificates, keys, tokens, data,
logs, kubeconfig) lives in one work directory; both processes run in their own process group
so `stop()` leaves nothing behind even when a test fails half-way.
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
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BIN_DIR = Path(__file__).resolve().parent / "bin"
START_TIMEOUT = float(os.environ.get("TESTENV_START_TIMEOUT", "120"))


def binaries_present() -> bool:
    """True when build.sh has produced every binary the local cluster needs."""
    return all((BIN_DIR / name).is_file() for name in ("etcd", "kube-apiserver", "kubectl"))


def free_port() -> int:
    """A loopback port that was free a moment ago (bind 0, read, close: racy but fine here)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalCluster:
    """One etcd + one kube-apiserver with RBAC, token auth and service-account token signing."""

    workdir: Path
    etcd_port: int = 0
    api_port: int = 0
    admin_token: str = field(default_factory=lambda: secrets.token_hex(24))
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started_in: float = 0.0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        return self.workdir / "ca.crt"

    def start(self) -> LocalCluster:
        """Start etcd, then the apiserver; return once /readyz answers 200."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        self.etcd_port = self.etcd_port or free_port()
        self.api_port = self.api_port or free_port()
        self._write_credentials()
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        self.write_kubeconfig(self.kubeconfig, user="admin", token=self.admin_token)
        return self

    def stop(self) -> None:
        """SIGTERM each process group, then SIGKILL what is left; apiserver first, etcd last."""
        for proc in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._procs.clear()

    def restart_apiserver(self) -> None:
        """Kill and start the apiserver again on the same port and data (breaks every watch)."""
        api = self._procs.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(api.pid, signal.SIGKILL)
        api.wait(timeout=10)
        self._start_apiserver()

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
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
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
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = serialization.Encoding.PEM
        self._write("ca.crt", ca_cert.public_bytes(pem))
        self._write("apiserver.crt", cert.public_bytes(pem))
        self._write(
            "apiserver.key",
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
        self._write("tokens.csv", f'{self.admin_token},admin,admin,"system:masters"\n'.encode())

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
        self._procs.append(proc)
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

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: object) -> None:
        assert callable(ready)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self._log_tail(name)}")
            if ready():
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
    except (urllib.error.URLError, OSError, ValueError):
        return False


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
