"""The Argo CD health check for ManagedRunner: its Go harness and its argocd-cm install snippet.

`go test ./...` in argocd/healthcheck runs health.lua with gopher-lua the way Argo CD does (standard
libraries skipped, base/table/package and os.time/os.date only, `obj` global, one-second limit)
over every case of health_test.yaml, whose inputs are real objects from tests/e2e/test_gitops.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "argocd" / "healthcheck"
SCRIPT = (
    ROOT / "argocd" / "resource_customizations" / "sandbox.coreweave.com" / "ManagedRunner" / "health.lua"
)
PATCH = ROOT / "argocd" / "install" / "argocd-cm-patch.yaml"
KEY = "resource.customizations.health.sandbox.coreweave.com_ManagedRunner"
PATCH_HEADER = """\
# Installs the ManagedRunner health check into Argo CD (generated from
# argocd/resource_customizations/sandbox.coreweave.com/ManagedRunner/health.lua; do not edit by hand,
# run UPDATE_ARGOCD_TESTDATA=1 pytest tests/unit/test_argocd_health.py after changing the script):
#   kubectl -n argocd patch configmap argocd-cm --patch-file argocd/install/argocd-cm-patch.yaml
# The script needs no Lua standard libraries, so useOpenLibs stays off.
"""


def test_health_lua_passes_every_case_in_argo_cds_interpreter() -> None:
    go = shutil.which("go")
    if go is None:
        message = "Go is not installed: argocd/healthcheck runs health.lua in gopher-lua like Argo CD"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(message)
    proc = subprocess.run(
        [go, "test", "-count=1", "./..."],
        cwd=HARNESS,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"go test failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


def test_argocd_cm_patch_carries_the_current_script() -> None:
    script = SCRIPT.read_text()
    if os.environ.get("UPDATE_ARGOCD_TESTDATA") == "1":

        class Literal(str):
            pass

        yaml.add_representer(Literal, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|"))
        PATCH.write_text(PATCH_HEADER + yaml.dump({"data": {KEY: Literal(script)}}, width=200))
    patch = yaml.safe_load(PATCH.read_text())
    assert set(patch) == {"data"}
    assert set(patch["data"]) == {KEY}
    assert patch["data"][KEY] == script, f"{PATCH} is stale: regenerate it (see its header)"
