"""The one warning pyproject.toml lets through covers CPython's TLS-socket leak and nothing wider.

python/cpython#113280: wrapping a socket whose peer reset it before the handshake raises, and the
half-built `ssl.SSLSocket` keeps its file descriptor until the garbage collector warns about it.
The e2e tier provokes exactly that when it SIGKILLs kube-apiserver under its clients.
"""

from __future__ import annotations

import contextlib
import gc
import re
import socket
import ssl
import tomllib
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ignored_socket_warning() -> re.Pattern[str]:
    """The message pattern of the ResourceWarning filter, compiled as `warnings` compiles it."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        filters: list[str] = tomllib.load(f)["tool"]["pytest"]["ini_options"]["filterwarnings"]
    (line,) = [f for f in filters if f.endswith(":ResourceWarning")]
    action, message, _category = line.split(":")
    assert action == "ignore"
    return re.compile(message, re.IGNORECASE)


def warnings_of_a_reset_before_the_handshake() -> list[str]:
    """Wrap a client socket whose pending connection the server dropped; collect what warns."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        listener.close()  # the kernel resets the connection still waiting to be accepted
        with contextlib.suppress(OSError):
            context.wrap_socket(client)
        client.close()
        gc.collect()
    return [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]


def test_the_leaked_socket_of_a_reset_handshake_is_what_the_filter_ignores() -> None:
    leaked = warnings_of_a_reset_before_the_handshake()
    pattern = ignored_socket_warning()
    # Python 3.11 (this project's CI) leaks one socket here; a Python with the fix leaks none.
    assert all(pattern.match(message) for message in leaked), leaked
    assert all("SSLSocket" in message and "raddr=" not in message for message in leaked), leaked


def test_a_leaked_connected_socket_still_fails_the_run() -> None:
    pattern = ignored_socket_warning()
    never_connected = "unclosed <ssl.SSLSocket fd=24, family=2, type=1, proto=6, laddr=('127.0.0.1', 38446)>"
    connected = (
        "unclosed <ssl.SSLSocket fd=7, family=2, type=1, proto=6, "
        "laddr=('127.0.0.1', 50203), raddr=('127.0.0.1', 6443)>"
    )
    plain = "unclosed <socket.socket fd=5, family=2, type=1, proto=0, laddr=('127.0.0.1', 35666)>"
    assert pattern.match(never_connected)
    assert not pattern.match(connected)
    assert not pattern.match(plain)
    assert not pattern.match("unclosed file <_io.TextIOWrapper name='x' mode='r' encoding='UTF-8'>")
