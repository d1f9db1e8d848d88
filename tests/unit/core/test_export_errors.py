"""`runner-operator export` refuses runner IDs it cannot find, before writing anything."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runner_operator import cli
from runner_operator.simulator.config import DEV_ADMIN_TOKEN
from runner_operator.simulator.server import RunningServer


async def test_export_of_a_runner_that_does_not_exist_is_an_error(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COREWEAVE_API_TOKEN", DEV_ADMIN_TOKEN)
    out = tmp_path / "out"
    argv = ["export", "--endpoint", server.url, "-o", str(out), "no-such-runner"]
    status = await asyncio.to_thread(cli.main, argv)
    assert status == 1
    assert capsys.readouterr().err == (
        "runner-operator export: no runner no-such-runner visible to this token: nothing written\n"
    )
    assert not out.exists()
