"""The randomized ownership soak (bench/soak.py), short: nothing leaked, duplicated or destroyed."""

from __future__ import annotations

import os
from pathlib import Path

from bench import soak
from tests.e2e.kube import Kube

SECONDS = float(os.environ.get("SOAK_SECONDS", "120"))


def test_soak_keeps_the_cloud_equal_to_the_resources(kube: Kube, crd: str, tmp_path: Path) -> None:
    restart = kube.cluster.restart_apiserver if kube.cluster is not None else None
    report = soak.run(
        kube.kubeconfig, seconds=SECONDS, runners=50, seed=14, work=tmp_path, restart_apiserver=restart
    )
    print(soak.render(report, 50))
    if not report["ok"]:
        for key in ("leaked", "destroyed", "duplicated", "not_deleted"):
            print(f"{key}: {report[key]}")
        for name, why in sorted(report["unsettled_why"].items()):
            print(f"not settled: {name}: {why}")
        for log in sorted(tmp_path.glob("operator-*.log")):
            problems = [line for line in log.read_text(errors="replace").splitlines() if "ERROR" in line]
            print(f"--- {log.name}: {len(problems)} error lines; last ones:", *problems[-15:], sep="\n")
    assert report["counts"].get("create", 0) >= 50
    assert report["ok"], report
