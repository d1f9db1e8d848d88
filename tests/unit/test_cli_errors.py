"""Every user error of the CLI: exit status 1 and one line that says what to do, never a traceback.

Table-driven: each row is a command line (with its files and environment) and the words its one
line of stderr must contain. The API is the simulator, served from a thread like a real endpoint.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runner_operator import cli, schemacheck
from runner_operator.simulator.config import DEV_ADMIN_TOKEN, DEV_USER_TOKEN
from runner_operator.simulator.server import RunningServer, serve
from tests.testenv.localcluster import free_port
from tests.testenv.tools import tool

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = (ROOT / "examples" / "minimal.yaml").read_text()
VALIDATOR = schemacheck.VARIABLE


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    """The simulator on a thread of its own (the CLI runs its own event loop)."""
    loop = asyncio.new_event_loop()
    started: list[RunningServer] = []
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        started.append(loop.run_until_complete(serve()))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield started[0].url
    asyncio.run_coroutine_threadsafe(started[0].close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@dataclass(frozen=True)
class Case:
    argv: list[str]
    says: str
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    token: str | None = DEV_ADMIN_TOKEN
    """written to the file `token` and passed as --token-file (None: no --token-file)."""


def _unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}"


CASES: dict[str, Callable[[str], Case]] = {
    "plan-missing-file": lambda url: Case(
        ["plan", "-f", "nope.yaml", "--endpoint", url], "cannot read nope.yaml"
    ),
    "plan-bad-yaml": lambda url: Case(
        ["plan", "-f", "bad.yaml", "--endpoint", url],
        "bad.yaml is not valid YAML at line 3, column 1",
        files={"bad.yaml": "spec:\n  runnerId: [unclosed\n"},
    ),
    "plan-no-managedrunner": lambda url: Case(
        ["plan", "-f", "cm.yaml", "--endpoint", url],
        "no ManagedRunner in cm.yaml",
        files={"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
    ),
    "plan-spec-error": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "ManagedRunner dev: spec.zone",
        files={"r.yaml": MINIMAL.replace("  zone: us-east-04a", "  zone: 42")},
    ),
    "plan-missing-token-file": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url, "--token-file", "missing-token"],
        "cannot read the token file missing-token",
        files={"r.yaml": MINIMAL},
        token=None,
    ),
    "plan-empty-token-file": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "the token file token is empty",
        files={"r.yaml": MINIMAL},
        token="",
    ),
    "plan-no-token": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "no API token: pass --token-file FILE or set COREWEAVE_API_TOKEN",
        files={"r.yaml": MINIMAL},
        token=None,
    ),
    "plan-connection-refused": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", _unreachable()],
        "cannot reach the API at http://127.0.0.1:",
        files={"r.yaml": MINIMAL},
    ),
    "plan-401": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "rejected the token (401): check --token-file or COREWEAVE_API_TOKEN",
        files={"r.yaml": MINIMAL},
        token="CW-SECRET-wrong",
    ),
    "plan-403": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "it needs the SANDBOX_ADMIN role",
        files={"r.yaml": MINIMAL},
        token=DEV_USER_TOKEN,
    ),
    "plan-bad-setting": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "RUNNER_OPERATOR_REQUEST_TIMEOUT: Input should be a valid number",
        files={"r.yaml": MINIMAL},
        env={"RUNNER_OPERATOR_REQUEST_TIMEOUT": "soon"},
    ),
    "plan-crd-refuses": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        'the CRD refuses ManagedRunner sandboxes/dev: ManagedRunner.sandbox.coreweave.com "dev" is invalid:'
        ' spec.zone: Invalid value: "US-EAST-04A": zone must be lower-case',
        files={"r.yaml": MINIMAL.replace("  zone: us-east-04a", "  zone: US-EAST-04A")},
        env={VALIDATOR: tool("managed-runner-validate")},
    ),
    "plan-validator-not-found": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        f"{VALIDATOR}=no-such-validator is not an executable file",
        files={"r.yaml": MINIMAL},
        env={VALIDATOR: "no-such-validator"},
    ),
    "plan-validator-fails": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url],
        "failed (exit 1)",
        files={"r.yaml": MINIMAL},
        env={VALIDATOR: "false"},
    ),
    "plan-bad-kubeconfig": lambda url: Case(
        ["plan", "-f", "r.yaml", "--endpoint", url, "--kubeconfig", "no-such-kubeconfig"],
        "cannot use the kubeconfig",
        files={"r.yaml": MINIMAL},
    ),
    "export-unknown-runner": lambda url: Case(
        ["export", "-o", "out", "--endpoint", url, "no-such-runner"],
        "no runner no-such-runner visible to this token",
    ),
    "export-unwritable-dir": lambda url: Case(
        ["export", "-o", "file/sub", "--endpoint", url], "cannot use file", files={"file": "not a directory"}
    ),
    "run-bad-setting": lambda url: Case(
        ["run", "-A"],
        "RUNNER_OPERATOR_FAST_INTERVAL: Input should be greater than 0",
        env={"RUNNER_OPERATOR_FAST_INTERVAL": "0"},
    ),
    "run-bad-token-variable-is-not-echoed": lambda url: Case(
        ["run", "-A"],
        "RUNNER_OPERATOR_DEFAULT_CREDENTIALS_NAMESPACE_SELECTOR:",
        env={"RUNNER_OPERATOR_DEFAULT_CREDENTIALS_NAMESPACE_SELECTOR": "a in (b"},
    ),
    "run-bad-shard": lambda url: Case(["run", "-A", "--shard", "3/3"], "a shard is I/N with 0 <= I < N"),
    "run-shards-without-leader-election": lambda url: Case(
        ["run", "-A"],
        "shards need leader election (RUNNER_OPERATOR_LEADER_ELECTION=true)",
        env={"RUNNER_OPERATOR_SHARD": "1/3"},
    ),
    "unknown-flag": lambda url: Case(["plan", "--frobnicate"], "error:"),
}


@pytest.mark.parametrize("name", CASES)
def test_user_error_is_one_line_and_exit_1(
    name: str,
    api: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = CASES[name](api)
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("RUNNER_OPERATOR_", "COREWEAVE_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("PATH", os.defpath)  # no managed-runner-validate unless the row names one
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    for path, text in case.files.items():
        (tmp_path / path).write_text(text)
    argv = list(case.argv)
    if case.token is not None:
        (tmp_path / "token").write_text(case.token)
        if argv[0] in ("plan", "export") and "--frobnicate" not in argv:
            argv += ["--token-file", "token"]
    if argv[0] == "plan" and "--frobnicate" not in argv and "--kubeconfig" not in argv:
        argv.append("--offline")
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse
        status = int(exit_.code or 0)
    err = capsys.readouterr().err
    assert status == 1, err
    assert case.says in err, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]  # argparse's usage
    assert len(lines) == 1, err
    assert "CW-SECRET" not in err


def test_every_row_is_a_distinct_message(api: str) -> None:
    says = [CASES[name](api).says for name in CASES]
    assert len(says) == len(set(says))


@pytest.mark.parametrize("found", [True, False], ids=["validator", "no-validator"])
def test_offline_plan_says_whether_the_crds_rules_were_checked(
    found: bool,
    api: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A valid manifest is planned either way; without the validator stderr says what was not checked."""
    monkeypatch.setenv("PATH", os.defpath)
    monkeypatch.delenv(VALIDATOR, raising=False)
    if found:
        monkeypatch.setenv(VALIDATOR, tool("managed-runner-validate"))
    (tmp_path / "r.yaml").write_text(MINIMAL)
    (tmp_path / "token").write_text(DEV_ADMIN_TOKEN)
    argv = ["plan", "-f", str(tmp_path / "r.yaml"), "--offline", "--endpoint", api]
    status = cli.main([*argv, "--token-file", str(tmp_path / "token")])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "create" in captured.out.lower()
    note = "note: the CRD's rules were not checked: managed-runner-validate was not found"
    assert (note in captured.err) is not found, captured.err
