"""The Helm chart, the plain manifests and the Dockerfile, checked without a cluster.

`helm lint` and `helm template` for the default and several non-default value sets, the schema
rejecting bad values with a readable message, hardened pod defaults, RBAC that never grants more
than the operator needs, and deploy/ kept identical to the chart's output. Regenerate deploy/
with `python -m tests.unit.test_chart` after a chart change.
"""

from __future__ import annotations

import base64
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import chart
from tests.support.chart import ROOT, VALUE_SETS, find, one, render

# Bad values and the message a user sees.
INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "typo-at-top-level": ({"replicas": 2}, "additional properties 'replicas' not allowed"),
    "replicas-without-leader-election": (
        {"replicaCount": 2, "leaderElection": {"enabled": False}},
        "replicaCount > 1 needs leaderElection.enabled",
    ),
    "lease-timings": (
        {"leaderElection": {"renewDeadline": 20}},
        "leaseDuration > renewDeadline > retryPeriod",
    ),
    "namespace-pattern": ({"watchNamespaces": ["team-*"]}, "at '/watchNamespaces/0'"),
    "pull-policy": ({"image": {"pullPolicy": "Sometimes"}}, "value must be one of 'Always', 'IfNotPresent'"),
    "endpoint-without-scheme": ({"apiEndpoint": "api.coreweave.com"}, "at '/apiEndpoint'"),
    "zero-interval": ({"config": {"fastInterval": 0}}, "at '/config/fastInterval'"),
    "port-range": ({"metrics": {"port": 70000}}, "at '/metrics/port'"),
    "bad-digest": ({"image": {"digest": "latest"}}, "at '/image/digest'"),
    "typo-in-group": ({"credentials": {"secret": "x"}}, "additional properties 'secret' not allowed"),
    "token-and-existing-secret": (
        {"credentials": {"existingSecret": "a", "token": "b"}},
        "credentials: set existingSecret or token, not both",
    ),
    "service-monitor-without-service": (
        {"metrics": {"serviceMonitor": {"enabled": True}}},
        "metrics.serviceMonitor.enabled needs metrics.enabled: true",
    ),
    "shards-without-election": (
        {"shards": 3, "leaderElection": {"enabled": False}},
        "shards > 1 needs leaderElection.enabled",
    ),
    "port-clash": ({"metrics": {"port": 8080}}, "metrics.port and health.port must differ"),
    "rules-without-endpoint": (
        {"metrics": {"port": 0, "prometheusRule": {"enabled": True}}},
        "metrics.prometheusRule.enabled needs a metrics.port",
    ),
    "error-ratio-above-one": (
        {"metrics": {"prometheusRule": {"apiErrorRatio": 5}}},
        "at '/metrics/prometheusRule/apiErrorRatio'",
    ),
}

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate"}
# The only writes the operator may make: the finalizer (a patch of the resource), status, Events.
ALLOWED_WRITES = {
    ("leases", "create"),  # leader election: its own Lease (get/update by name only)
    ("leases", "update"),
    ("managedrunners", "patch"),
    ("managedrunners/status", "patch"),
    ("events", "create"),
    ("secrets", "patch"),  # the in-use finalizer on credentials Secrets, nothing else
}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_helm_lint_is_clean(name: str) -> None:
    path = chart.values_file(VALUE_SETS[name])
    try:
        result = chart.helm("lint", "--strict", str(chart.CHART), "--values", str(path), check=False)
    finally:
        path.unlink()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("name", VALUE_SETS)
def test_template_renders_valid_unique_objects(name: str) -> None:
    result = chart.template(VALUE_SETS[name])
    assert chart.helm_noise_removed(result.stderr) == "", result.stderr
    docs = chart.documents(result.stdout)
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys)), keys
    for doc in docs:
        assert doc["apiVersion"]
        assert doc["kind"]
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "managed-runner-operator"
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= {d["kind"] for d in docs}


@pytest.mark.parametrize("name", INVALID)
def test_invalid_values_are_rejected_with_a_clear_message(name: str) -> None:
    values, message = INVALID[name]
    result = chart.template(values, check=False)
    assert result.returncode != 0, f"{name} was accepted"
    assert message in result.stderr, result.stderr


CRD_FILE = "managedrunners.sandbox.coreweave.com.yaml"
CHART_CRD = chart.CHART / "files" / CRD_FILE
PACKAGE_CRD = ROOT / "operator" / "runner_operator" / "data" / CRD_FILE


def test_the_chart_crd_is_the_crds_file() -> None:
    """A copy (no symlink: the chart directory works copied alone), kept identical by this test."""
    assert not [p for p in chart.CHART.rglob("*") if p.is_symlink()]
    assert not (chart.CHART / "crds").exists(), "crds/ is installed once and never upgraded by Helm"
    assert CHART_CRD.read_bytes() == (ROOT / "crds" / CRD_FILE).read_bytes(), (
        "the chart's CRD is stale: run `python -m tests.unit.test_chart`"
    )


def test_the_package_crd_is_the_crds_file() -> None:
    """`plan` checks manifests offline against the CRD the package carries: the same file."""
    assert PACKAGE_CRD.read_bytes() == (ROOT / "crds" / CRD_FILE).read_bytes(), (
        "the package's CRD is stale: run `python -m tests.unit.test_chart`"
    )


def test_the_crd_is_a_template_kept_on_uninstall(tmp_path: Path) -> None:
    source = yaml.safe_load((ROOT / "crds" / CRD_FILE).read_text())
    crd = one(render(), "CustomResourceDefinition")
    assert crd["spec"] == source["spec"]
    assert crd["metadata"]["name"] == source["metadata"]["name"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    unkept = one(render({"crds": {"keep": False}}), "CustomResourceDefinition")
    assert "helm.sh/resource-policy" not in (unkept["metadata"].get("annotations") or {})
    assert not find(render({"crds": {"enabled": False}}), "CustomResourceDefinition")
    chart.helm("package", str(chart.CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("*.tgz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        member = tar.extractfile(f"managed-runner-operator/files/{CRD_FILE}")
        assert member is not None
        assert member.read() == CHART_CRD.read_bytes()
    assert not [n for n in names if n.startswith("managed-runner-operator/crds/")]


def test_pod_is_hardened_and_elects_a_leader() -> None:
    deployment = one(render(), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["RUNNER_OPERATOR_LEADER_ELECTION"]["value"] == "true"
    assert env["RUNNER_OPERATOR_LEADER_ELECTION_NAMESPACE"]["value"] == "runner-operator"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert not find(render(), "PodDisruptionBudget")  # one replica: a PDB would block every drain
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsNonRoot"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"]
    assert container["resources"]["limits"]["memory"]
    health = next(p for p in container["ports"] if p["name"] == "health")
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["args"] == [
        "--all-namespaces",
        f"--liveness=http://0.0.0.0:{health['containerPort']}/healthz",
    ]
    assert "command" not in container  # the image's entry point, `runner-operator run`
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/tmp"}


def test_replicas_get_a_disruption_budget_and_without_election_recreate() -> None:
    docs = render({"replicaCount": 3})
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert (
        pdb["spec"]["selector"]["matchLabels"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    )
    single = render({"leaderElection": {"enabled": False}})
    deployment = one(single, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not {n for n in env if "LEADER" in n}
    assert not [r for r in find(single, "Role") if "leases" in str(r["rules"])]


def test_shards_are_deployments_of_their_own_with_a_lease_each() -> None:
    docs = render({"shards": 3, "replicaCount": 2}, namespace="ops")
    deployments = find(docs, "Deployment")
    names = [d["metadata"]["name"] for d in deployments]
    assert names == [f"runner-operator-managed-runner-operator-shard-{i}" for i in range(3)]
    selectors = [d["spec"]["selector"]["matchLabels"] for d in deployments]
    for i, (deployment, selector) in enumerate(zip(deployments, selectors, strict=True)):
        assert selector["sandbox.coreweave.com/shard"] == str(i)
        pod = deployment["spec"]["template"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RUNNER_OPERATOR_SHARD"] == f"{i}/3"
        assert env["RUNNER_OPERATOR_LEADER_ELECTION"] == "true"
    # No selector matches another shard's pods; each shard keeps one pod through a drain.
    assert len({tuple(sorted(s.items())) for s in selectors}) == 3
    pdbs = find(docs, "PodDisruptionBudget")
    assert [p["spec"]["selector"]["matchLabels"] for p in pdbs] == selectors
    (role,) = [r for r in find(docs, "Role") if r["metadata"]["name"].endswith("-leader-election")]
    named = next(rule for rule in role["rules"] if "resourceNames" in rule)
    base = "runner-operator-managed-runner-operator"
    assert named["resourceNames"] == [base] + [f"{base}-shard-{i}" for i in range(3)]
    one_shard = one(render(), "Deployment")
    assert one_shard["metadata"]["name"] == base  # one shard: the Deployment and Lease as before
    env = {e["name"]: e.get("value") for e in one_shard["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RUNNER_OPERATOR_SHARD"] == "0/1"


def own_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Roles for ManagedRunners and Secrets (not the leader-election one)."""
    return [r for r in find(docs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]


def test_namespaced_mode_grants_nothing_cluster_wide_but_discovery() -> None:
    docs = render(VALUE_SETS["namespaced"], namespace="ops")
    (cluster_role,) = [r for r in find(docs, "ClusterRole") if not chart.user_role(r)]
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in cluster_role["rules"]} == {
        (("customresourcedefinitions",), ("list", "watch")),
        (("namespaces",), ("list", "watch")),
    }
    roles = own_roles(docs)
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ops", "team-a", "team-b"]
    bindings = [
        b for b in find(docs, "RoleBinding") if not b["metadata"]["name"].endswith("-leader-election")
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["ops", "team-a", "team-b"]
    token_role = next(r for r in roles if r["metadata"]["namespace"] == "ops")
    assert token_role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["cw-api"], "verbs": ["get"]}
    ]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["--namespace=team-a", "--namespace=team-b"]


def test_token_secret_readable_through_a_watched_namespace_needs_no_extra_role() -> None:
    docs = render({"watchNamespaces": ["ops"], "credentials": {"existingSecret": "cw-api"}}, namespace="ops")
    assert [r["metadata"]["namespace"] for r in own_roles(docs)] == ["ops"]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_rbac_never_lists_secrets_nor_writes_beyond_status_finalizer_and_events(name: str) -> None:
    docs = render(VALUE_SETS[name])
    for role in find(docs, "ClusterRole") + find(docs, "Role"):
        if chart.user_role(role):
            continue  # for people: see test_user_roles_aggregate_into_view_edit_and_admin
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            for resource in rule["resources"]:
                if resource == "secrets":
                    assert rule["verbs"] in (["get"], ["patch"]), rule
                    assert rule["verbs"] == ["get"] or "resourceNames" not in rule, rule
                for verb in rule["verbs"]:
                    if verb in WRITE_VERBS:
                        assert (resource, verb) in ALLOWED_WRITES, (role["metadata"]["name"], rule)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (chart.CLUSTER_PROOF_VALUES, chart.CLUSTER_GRANTS),
        (chart.NAMESPACED_PROOF_VALUES, chart.NAMESPACED_GRANTS),
    ],
    ids=["cluster", "namespaced"],
)
def test_every_rule_is_one_the_e2e_suite_removes(values: dict[str, Any], expected: list[str]) -> None:
    """tests/e2e/test_packaging.py proves each of these necessary; a new rule must be added there too."""
    assert [g.id for g in chart.grants(render(values, namespace="ops"))] == expected


def test_default_token_comes_from_one_named_secret() -> None:
    existing = one(render(VALUE_SETS["existing-secret"], namespace="ops"), "Deployment")
    env = {e["name"]: e.get("value") for e in existing["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RUNNER_OPERATOR_DEFAULT_SECRET"] == "ops/coreweave-api:apiToken"
    assert "COREWEAVE_API_TOKEN" not in env
    assert not find(render(VALUE_SETS["existing-secret"]), "Secret")

    created = render(VALUE_SETS["token-created"], namespace="ops")
    (secret,) = find(created, "Secret")
    assert base64.b64decode(secret["data"]["token"]).decode() == "CW-SECRET-example"
    env = {
        e["name"]: e.get("value")
        for e in one(created, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["RUNNER_OPERATOR_DEFAULT_SECRET"] == f"ops/{secret['metadata']['name']}:token"
    assert "CW-SECRET-example" not in yaml.safe_dump(one(created, "Deployment"))

    neither = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "RUNNER_OPERATOR_DEFAULT_SECRET" not in {e["name"] for e in neither}


def test_metrics_service_and_monitor_point_at_the_metrics_port() -> None:
    docs = render({"metrics": {"enabled": True, "port": 9191, "serviceMonitor": {"enabled": True}}})
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RUNNER_OPERATOR_METRICS_PORT"] == "9191"
    assert {"name": "metrics", "containerPort": 9191, "protocol": "TCP"} in container["ports"]
    service = one(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()

    off = render({"metrics": {"port": 0}})
    container = one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in container["env"]}["RUNNER_OPERATOR_METRICS_PORT"] == "0"
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert not find(render(), "Service")


def test_notes_tell_the_user_how_to_check_the_install() -> None:
    result = chart.helm(
        "install",
        "mro",
        str(chart.CHART),
        "--namespace",
        "ops",
        "--dry-run=client",
        "--set",
        "credentials.existingSecret=cw",
    )
    notes = result.stdout[result.stdout.index("NOTES:") :]
    assert "kubectl -n ops rollout status deployment/mro-managed-runner-operator" in notes
    assert "kubectl auth can-i" in notes
    assert "Secret ops/cw" in notes
    assert "`helm upgrade` upgrades it, and `helm uninstall` keeps it" in notes


def test_every_operator_setting_is_a_chart_value() -> None:
    """Each RUNNER_OPERATOR_* setting is set by a value of its own, not only through extraEnv."""
    from runner_operator.settings import Settings, variable

    values = {
        "credentials": {"existingSecret": "api", "namespaces": ["a"], "namespaceSelector": "x=y"},
        "metrics": {"enabled": True},
    }
    container = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    names = [env["name"] for env in container["env"]]
    assert len(names) == len(set(names))
    expected = {variable(field, {}) for field in Settings.model_fields} - {"RUNNER_OPERATOR_DEFAULT_TOKEN"}
    assert expected - set(names) == set()


def test_scheduling_and_extension_knobs() -> None:
    docs = render(chart.VALUE_SETS["tuned"])
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--log-level=debug" in container["args"]
    assert {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True} in container["volumeMounts"]
    assert {"name": "ca", "configMap": {"name": "corp-ca"}} in pod["volumes"]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    retry = next(e for e in container["env"] if e["name"] == "RUNNER_OPERATOR_RETRY_BUDGET")
    assert retry["value"] == "5"
    custom = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert one(render({"strategy": custom}), "Deployment")["spec"]["strategy"] == custom
    relabel = [{"action": "replace", "targetLabel": "team", "replacement": "platform"}]
    monitored = render(
        {
            "metrics": {
                "enabled": True,
                "serviceMonitor": {"enabled": True, "relabelings": relabel, "metricRelabelings": relabel},
            }
        }
    )
    endpoint = one(monitored, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["relabelings"] == relabel
    assert endpoint["metricRelabelings"] == relabel


# -- plain manifests --------------------------------------------------------------------------

# The CRD comes from ../crds in deploy/kustomization.yaml, as for users who apply it themselves.
PLAIN_VALUES = {"credentials": {"existingSecret": "coreweave-api"}, "crds": {"enabled": False}}
PLAIN_HEADER = """\
# Generated from helm/managed-runner-operator by `python -m tests.unit.test_chart` (a test keeps them
# identical): the chart's default values plus credentials.existingSecret=coreweave-api and
# crds.enabled=false (kustomization.yaml takes the CRD from crds/), release
# "managed-runner-operator" in namespace "runner-operator". Install with
#   kubectl apply --server-side -k deploy/
"""


def plain_manifests() -> str:
    """deploy/operator.yaml as the chart renders it, without Helm's own labels."""
    out = chart.template(PLAIN_VALUES, release="managed-runner-operator", namespace="runner-operator").stdout
    lines = [
        line.replace("app.kubernetes.io/managed-by: Helm", "app.kubernetes.io/managed-by: kustomize")
        for line in out.splitlines()
        if not re.match(r"^\s*(helm\.sh/chart:|# Source: )", line)
    ]
    return PLAIN_HEADER + "\n".join(lines).strip() + "\n"


def test_plain_manifests_are_the_chart_output() -> None:
    path = ROOT / "deploy" / "operator.yaml"
    assert path.read_text() == plain_manifests(), "deploy/ is stale: run `python -m tests.unit.test_chart`"
    kustomization = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../crds", "namespace.yaml", "operator.yaml"]
    namespace = yaml.safe_load((ROOT / "deploy" / "namespace.yaml").read_text())
    assert namespace["metadata"]["name"] == "runner-operator"


# -- the image ----------------------------------------------------------------------------------


def _stages(dockerfile: str) -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_builds_a_wheel_and_runs_it_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    build, final = _stages(text)
    assert re.match(r"FROM \$\{PYTHON_IMAGE\} AS build", build[0])
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.\d+-slim", text, re.M)
    build_text = "\n".join(build)
    assert "pip wheel --no-deps --wheel-dir /dist ." in build_text
    assert "python -m venv --without-pip /opt/venv" in build_text
    locked = "pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes -r requirements.lock"
    wheel = "pip --python /opt/venv/bin/python install --no-cache-dir --no-deps /dist/*.whl"
    assert build_text.index(locked) < build_text.index(wheel)  # nothing unlocked gets in
    assert "COPY pyproject.toml README.md requirements.lock ./" in build
    final_text = "\n".join(final)
    assert final[0] == "FROM ${PYTHON_IMAGE}"
    assert "COPY --from=build /opt/venv /opt/venv" in final
    for forbidden in ("pip install", "pip wheel", "apt-get", "gcc", "build-essential", "COPY operator"):
        assert forbidden not in final_text, forbidden
    user = next(line for line in final if line.startswith("USER "))
    assert re.fullmatch(r"USER [1-9]\d*:[1-9]\d*", user), user
    assert 'ENTRYPOINT ["runner-operator", "run"]' in final
    assert "PYTHONDONTWRITEBYTECODE=1" in final_text
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert f"USER {pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == user


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {line for line in lines if line.startswith("!")} == {
        "!pyproject.toml",
        "!README.md",
        "!requirements.lock",
        "!operator/",
    }


def test_install_guide_has_every_section_and_the_finalizer_way_out() -> None:
    text = (ROOT / "docs" / "install.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    for wanted in ("Install", "Credentials", "Upgrade", "Uninstall"):
        assert any(h.startswith(wanted) for h in headings), (wanted, headings)
    assert chart.FINALIZER_WAY_OUT in text
    assert "kubectl apply --server-side -k crds/" in text


if __name__ == "__main__":
    CHART_CRD.write_bytes((ROOT / "crds" / CRD_FILE).read_bytes())
    PACKAGE_CRD.write_bytes((ROOT / "crds" / CRD_FILE).read_bytes())
    (ROOT / "deploy" / "operator.yaml").write_text(plain_manifests())
    sys.exit(0)


def test_user_roles_aggregate_into_view_edit_and_admin() -> None:
    docs = render()
    roles = {r["metadata"]["name"]: r for r in find(docs, "ClusterRole") if chart.user_role(r)}
    verbs = {}
    for name, role in roles.items():
        kind = name.rsplit("-", 1)[1]
        assert role["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{kind}"] == "true"
        (runners, status) = role["rules"]
        assert runners["resources"] == ["managedrunners"]
        assert status == {
            "apiGroups": ["sandbox.coreweave.com"],
            "resources": ["managedrunners/status"],
            "verbs": ["get", "list", "watch"],
        }
        verbs[kind] = set(runners["verbs"])
    assert verbs["view"] == {"get", "list", "watch"}
    assert (
        verbs["edit"]
        == verbs["admin"]
        == verbs["view"] | {"create", "update", "patch", "delete", "deletecollection"}
    )
    bound = {b["roleRef"]["name"] for b in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding")}
    assert not bound & set(roles), "user roles are never bound to the operator"
    assert not [r for r in find(render(VALUE_SETS["no-user-roles"]), "ClusterRole") if chart.user_role(r)]
