"""`scripts/demo` stops everything it started on SIGINT, SIGTERM and SIGHUP (issue 17).

Each run starts the embedded default (control plane, simulator, operator, the example runner
Ready), then gets the signal; afterwards no process of its working directory may be left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.kube import wait_for
from tests.testenv.demo import WORKDIR

ROOT = Path(__file__).resolve().parents[2]


def started_by_the_demo() -> list[str]:
    """Command lines of live processes that use the demo's working directory, in their arguments
    (etcd, kube-apiserver, the simulator) or their environment (the operator's KUBECONFIG)."""
    found = []
    marker = str(WORKDIR).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in cmdline or marker in environ:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command[:200]}")
    return found


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_the_demo_stops_everything_it_started(stop: signal.Signals, tmp_path: Path) -> None:
    assert not started_by_the_demo(), "a demo is already running here"
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "tests.testenv.demo", "--timeout", "120"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: "Everything keeps running" in log.read_text(errors="replace") or demo.poll() is not None,
            timeout=240,
            what="the demo's example Ready",
        )
        assert demo.poll() is None, log.read_text(errors="replace")[-3000:]
        assert started_by_the_demo()
        demo.send_signal(stop)
        demo.wait(60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    time.sleep(1)
    assert started_by_the_demo() == [], log.read_text(errors="replace")[-2000:]
    assert "stopped" in log.read_text(errors="replace")
