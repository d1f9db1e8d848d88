"""The Helm chart, the plain manifests and the image's install steps, proved on the real API server.

RBAC is proved, not assumed: the operator runs with a token of the chart's ServiceAccount, with
the Deployment's own args and env, and passes the life-cycle tests; SubjectAccessReviews pin down
exactly what that ServiceAccount may do; and removing any one rule makes the operator report a
permission error naming that verb and resource. Namespaces here are `pkg-*`, never
`e2e-*`, so the session operator of the other e2e modules never touches them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from runner_operator import schemacheck
from tests.e2e import test_lifecycle as lifecycle
from tests.e2e.conftest import CRD_PATH, E2E_TIMINGS
from tests.e2e.deployed import DeployedOperator
from tests.e2e.harness import GROUP, PLURAL, VERSION, SimulatorThread, condition, manifest
from tests.e2e.kube import Kube, json_object, wait_for
from tests.support import chart
from tests.support.chart import ROOT, Grant
from tests.testenv.tools import tool

PERMISSION_TIMEOUT = 30
# How the API server words an RBAC denial for a ServiceAccount.
RBAC_DENIED = 'is forbidden: User "system:serviceaccount:'
FAST = {"fastInterval": 0.5, "resyncInterval": 5}
# The harness's retry budget (seconds) keeps failing passes short.
EXTRA_ENV = [{"name": "RUNNER_OPERATOR_RETRY_BUDGET", "value": "2"}]


def served(kube: Kube, plural: str) -> bool:
    return plural in kube.kubectl("api-resources", "--api-group=monitoring.coreos.com").stdout


def prometheus_operator_crd(kind: str) -> dict[str, Any]:
    """A schemaless stand-in for a Prometheus Operator CRD (ServiceMonitor, PrometheusRule)."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind, "plural": plural, "listKind": kind + "List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


# -- fixtures and helpers ------------------------------------------------------------------------


def _install(work: Path) -> list[str]:
    """The Dockerfile's steps in a clean virtual environment; returns the image's entry point.

    Same context (pyproject.toml, README.md, requirements.lock, operator/), wheel, pip-less venv,
    the locked dependencies with --require-hashes, then the wheel alone; only bytecode compilation
    is skipped, to save time.
    """
    context = work / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements.lock"):
        shutil.copy2(ROOT / name, context / name)
    shutil.copytree(
        ROOT / "operator", context / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    venv = work / "venv"

    def run(*args: str) -> None:
        proc = subprocess.run(args, cwd=context, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"

    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run(*pip, "wheel", "--no-deps", "--wheel-dir", str(work / "dist"), ".")
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    (wheel,) = (work / "dist").glob("*.whl")
    into = [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-compile"]
    run(*into, "--require-hashes", "-r", "requirements.lock")
    run(*into, "--no-deps", str(wheel))
    assert not (venv / "bin" / "pip").exists()
    return [str(venv / "bin" / "runner-operator"), "run"]


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[list[str]]]:
    """Builds the clean install in the background while the other tests of this module run."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="image")
    future = pool.submit(_install, tmp_path_factory.mktemp("image"))
    yield future
    pool.shutdown(wait=True)


def apply(kube: Kube, docs: list[dict[str, Any]], *extra: str) -> str:
    return kube.kubectl("apply", "--server-side", "-f", "-", *extra, input=chart.yaml_stream(docs)).stdout


def install(kube: Kube, docs: list[dict[str, Any]]) -> tuple[dict[str, Any], Path]:
    """Apply everything but the Deployment; return it and a kubeconfig for its ServiceAccount."""
    deployment = chart.one(docs, "Deployment")
    apply(kube, [d for d in docs if d["kind"] != "Deployment"])
    pod = deployment["spec"]["template"]["spec"]
    return deployment, kube.sa_kubeconfig(deployment["metadata"]["namespace"], pod["serviceAccountName"])


def purge(kube: Kube, namespace: str) -> None:
    """Release and delete every ManagedRunner left in `namespace` (the documented way out)."""
    listed = json_object(kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))
    for item in listed["items"]:
        name = item["metadata"]["name"]
        try:
            kube.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
            )
            kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def values(sim: SimulatorThread, **overrides: Any) -> dict[str, Any]:
    return {"apiEndpoint": sim.url, "config": FAST, "extraEnv": EXTRA_ENV, **overrides}


@pytest.fixture
def release(kube: Kube, sim: SimulatorThread) -> tuple[str, str]:
    """A release name and its namespace, holding the operator-wide default token Secret `api`."""
    namespace = kube.new_namespace("pkgop")
    kube.create_secret(namespace, "api", {"token": sim.token})
    return f"r{uuid.uuid4().hex[:6]}", namespace


@pytest.fixture
def pkg_ns(kube: Kube, sim: SimulatorThread) -> Iterator[str]:
    """A namespace for ManagedRunners with the token Secret `coreweave-api`; emptied afterwards."""
    name = kube.new_namespace("pkg")
    kube.create_secret(name, "coreweave-api", {"token": sim.token})
    yield name
    purge(kube, name)


# -- the manifests apply ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", chart.VALUE_SETS)
def test_rendered_manifests_apply_to_the_api_server(kube: Kube, crd: str, name: str) -> None:
    namespace = kube.new_namespace("pkgop")
    settings = dict(chart.VALUE_SETS[name])
    if settings.get("watchNamespaces"):
        settings["watchNamespaces"] = [kube.new_namespace("pkg") for _ in settings["watchNamespaces"]]
    if (settings.get("rbac") or {}).get("secretNamespaces"):
        settings["rbac"] = {"secretNamespaces": [kube.new_namespace("pkg")]}
    metrics = settings.get("metrics") or {}
    kinds = [
        k
        for k in ("ServiceMonitor", "PrometheusRule")
        if metrics.get(k[0].lower() + k[1:], {}).get("enabled")
    ]
    for kind in kinds:
        plural = kind.lower() + "s"
        kube.kubectl(
            "apply", "--server-side", "-f", "-", input=chart.yaml_stream([prometheus_operator_crd(kind)])
        )
        wait_for(functools.partial(served, kube, plural), what=f"{kind} API served")
    docs = chart.render_for_cluster(settings, release=f"r{uuid.uuid4().hex[:6]}", namespace=namespace)
    applied = apply(kube, docs).splitlines()
    assert len(applied) == len(docs), applied
    assert all(line.endswith(" serverside-applied") for line in applied), applied
    listed = kube.kubectl("get", "-f", "-", "-o", "name", input=chart.yaml_stream(docs)).stdout.split()
    assert sorted(n.split("/")[-1] for n in listed) == sorted(d["metadata"]["name"] for d in docs)


def test_plain_manifests_install_the_crd_and_the_operator(kube: Kube, crd: str) -> None:
    out = kube.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "deploy")).stdout
    for what in (
        "customresourcedefinition.apiextensions.k8s.io/managedrunners.sandbox.coreweave.com",
        "namespace/runner-operator",
        "serviceaccount/managed-runner-operator",
        "clusterrole.rbac.authorization.k8s.io/managed-runner-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/managed-runner-operator",
        "deployment.apps/managed-runner-operator",
    ):
        assert what in out, out
    sa = "--as=system:serviceaccount:runner-operator:managed-runner-operator"
    can = kube.kubectl("auth", "can-i", "patch", "managedrunners.sandbox.coreweave.com/status", sa, "-A")
    assert can.stdout.strip() == "yes"
    cannot = kube.kubectl("auth", "can-i", "list", "secrets", sa, "-A", check=False)
    assert (cannot.returncode, cannot.stdout.strip()) == (1, "no")


def test_helm_install_upgrade_and_uninstall(kube: Kube, crd: str, sim: SimulatorThread) -> None:
    namespace = kube.new_namespace("pkgop")
    watched = kube.new_namespace("pkg")
    name = f"h{uuid.uuid4().hex[:6]}"
    base = ["--kubeconfig", str(kube.kubeconfig), "--namespace", namespace]
    # The suite's CRD fixture owns the CRD here; test_helm_upgrade_from_the_previous_chart_upgrades_the_crd
    # is where the chart owns it.
    crds = {"enabled": False}
    first = chart.values_file(
        {"watchNamespaces": [watched], "credentials": {"token": sim.token}, "crds": crds}
    )
    second = chart.values_file(
        {
            "watchNamespaces": [watched],
            "credentials": {"token": sim.token},
            "metrics": {"enabled": True},
            "crds": crds,
        }
    )
    try:
        installed = chart.helm("install", name, str(chart.CHART), *base, "--values", str(first))
        assert "STATUS: deployed" in installed.stdout
        assert (
            f"kubectl -n {namespace} rollout status deployment/{name}-managed-runner-operator"
            in installed.stdout
        )
        token = kube.core.read_namespaced_secret(f"{name}-managed-runner-operator-api-token", namespace)
        assert token.data
        assert token.data["token"]
        kube.rbac.read_namespaced_role(f"{name}-managed-runner-operator", watched)

        upgraded = chart.helm("upgrade", name, str(chart.CHART), *base, "--values", str(second))
        assert "STATUS: deployed" in upgraded.stdout
        service = kube.core.read_namespaced_service(f"{name}-managed-runner-operator-metrics", namespace)
        assert service.spec
        assert service.spec.ports
        assert service.spec.ports[0].target_port == "metrics"
    finally:
        first.unlink()
        second.unlink()
    chart.helm("uninstall", name, *base)
    with pytest.raises(client.ApiException) as gone:
        kube.rbac.read_cluster_role(f"{name}-managed-runner-operator")
    assert gone.value.status == 404
    # Helm never deletes crds/: the ManagedRunners (and the runners they manage) survive an uninstall.
    meta = kube.apiext.read_custom_resource_definition(crd).metadata
    assert meta is not None
    assert meta.name == crd


PREVIOUS_CHART = ROOT / "tests" / "e2e" / "data" / "managed-runner-operator-0.1.0.tgz"
"""Chart 0.1.0 as released (`helm package` of main at 7cea3e4): its CRD was in crds/."""


def release_fields(crd: str) -> str:
    """An apply of the CRD's name alone: the manager that sends it stops owning every other field
    (fields another manager also owns stay; server-side apply docs, "Transferring ownership")."""
    return yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": crd},
        }
    )


def live_crd(kube: Kube, name: str) -> dict[str, Any]:
    return json_object(json.loads(kube.kubectl("get", "crd", name, "-o", "json").stdout))


def test_helm_upgrade_from_the_previous_chart_upgrades_the_crd(
    kube: Kube, crd: str, sim: SimulatorThread, tmp_path: Path
) -> None:
    """0.1.0 installed the CRD from crds/, which Helm never upgrades. From 0.2.0 the CRD is a template:
    the first upgrade takes the existing CRD over (`--take-ownership`, once), and every later
    upgrade changes it; `helm uninstall` leaves it (helm.sh/resource-policy: keep)."""
    namespace = kube.new_namespace("pkgop")
    watched = kube.new_namespace("pkg")
    name = f"u{uuid.uuid4().hex[:6]}"
    base = ["--kubeconfig", str(kube.kubeconfig), "--namespace", namespace]
    values = chart.values_file({"watchNamespaces": [watched], "credentials": {"token": sim.token}})
    with tarfile.open(PREVIOUS_CHART) as tar:
        member = tar.extractfile(f"managed-runner-operator/crds/{crd}.yaml")
        assert member is not None
        old_crd = member.read().decode()
    # A later release's CRD: the same chart with one more printer column.
    later = tmp_path / "later"
    shutil.copytree(chart.CHART, later)
    later_crd = later / "files" / f"{crd}.yaml"
    doc = yaml.safe_load(later_crd.read_text())
    column = {"name": "Upgraded", "type": "string", "jsonPath": ".status.phase", "priority": 1}
    doc["spec"]["versions"][0]["additionalPrinterColumns"].append(column)
    later_crd.write_text(yaml.safe_dump(doc))
    try:
        # The cluster as 0.1.0 left it: its CRD from crds/, then the release (Helm skips an existing
        # crds/ CRD).
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=old_crd)
        installed = chart.helm("install", name, str(PREVIOUS_CHART), *base, "--values", str(values))
        assert "STATUS: deployed" in installed.stdout
        assert "helm.sh/resource-policy" not in (live_crd(kube, crd)["metadata"].get("annotations") or {})

        # Without --take-ownership Helm refuses to manage an object it did not create, and changes nothing.
        refused = chart.helm("upgrade", name, str(chart.CHART), *base, "--values", str(values), check=False)
        assert refused.returncode != 0
        assert "invalid ownership metadata" in refused.stderr, refused.stderr

        # docs/install.md's one-time step: Helm takes the CRD over (forcing the fields this chart
        # changes, which kubectl applied the 0.1.0 way), then kubectl gives up the fields it still
        # shares, so that later upgrades do not conflict with it.
        taken = chart.helm(
            "upgrade",
            name,
            str(chart.CHART),
            *base,
            "--values",
            str(values),
            "--take-ownership",
            "--force-conflicts",
        )
        kube.kubectl(
            "apply", "--server-side", "--field-manager=kubectl", "-f", "-", input=release_fields(crd)
        )
        assert "STATUS: deployed" in taken.stdout
        meta = live_crd(kube, crd)["metadata"]
        assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
        assert meta["annotations"]["meta.helm.sh/release-name"] == name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        ours = yaml.safe_load((ROOT / "crds" / f"{crd}.yaml").read_text())
        version = live_crd(kube, crd)["spec"]["versions"][0]
        assert version["schema"] == ours["spec"]["versions"][0]["schema"]  # kubectl's release removed nothing

        later_upgrade = chart.helm("upgrade", name, str(later), *base, "--values", str(values))
        assert "STATUS: deployed" in later_upgrade.stdout
        columns = live_crd(kube, crd)["spec"]["versions"][0]["additionalPrinterColumns"]
        assert column in columns

        chart.helm("uninstall", name, *base)
        assert live_crd(kube, crd)["metadata"]["name"] == crd  # kept: every ManagedRunner survives
    finally:
        values.unlink()
        chart.helm("uninstall", name, *base, check=False)
        kube.apply_crd(CRD_PATH)  # the suite's CRD again, for the tests that follow
    assert column not in live_crd(kube, crd)["spec"]["versions"][0]["additionalPrinterColumns"]


# -- what the ServiceAccount may do ----------------------------------------------------------------

KINDS = [
    ("", "secrets", ""),
    ("", "configmaps", ""),
    ("", "pods", ""),
    ("", "pods", "exec"),
    ("", "services", ""),
    ("", "serviceaccounts", ""),
    ("", "serviceaccounts", "token"),
    ("", "namespaces", ""),
    ("", "events", ""),
    ("events.k8s.io", "events", ""),
    ("apps", "deployments", ""),
    ("coordination.k8s.io", "leases", ""),
    ("rbac.authorization.k8s.io", "roles", ""),
    ("rbac.authorization.k8s.io", "rolebindings", ""),
    ("rbac.authorization.k8s.io", "clusterroles", ""),
    ("apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("sandbox.coreweave.com", "managedrunners", ""),
    ("sandbox.coreweave.com", "managedrunners", "status"),
    ("kopf.dev", "clusterkopfpeerings", ""),
    ("kopf.dev", "kopfpeerings", ""),
]
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
CLUSTER_SCOPED = {"namespaces", "clusterroles", "customresourcedefinitions", "clusterkopfpeerings"}
DISCOVERY = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "", "watch"),
}
APPLICATION = {
    ("sandbox.coreweave.com", "managedrunners", "", "list"),
    ("sandbox.coreweave.com", "managedrunners", "", "watch"),
    ("sandbox.coreweave.com", "managedrunners", "", "patch"),
    ("sandbox.coreweave.com", "managedrunners", "status", "patch"),
    ("", "events", "", "create"),
    ("", "secrets", "", "get"),
    ("", "secrets", "", "patch"),
}
SECRETS = {("", "secrets", "", "get"), ("", "secrets", "", "patch")}


def decisions(kube: Kube, namespace: str, sa: str, where: str) -> set[tuple[str, str, str, str]]:
    """Every (group, resource, subresource, verb) of KINDS x VERBS the ServiceAccount may do in `where`."""
    authz = client.AuthorizationV1Api(kube.api)
    allowed = set()
    for group, resource, sub in KINDS:
        for verb in VERBS:
            attributes = {"group": group, "resource": resource, "subresource": sub, "verb": verb}
            if resource not in CLUSTER_SCOPED:
                attributes["namespace"] = where
            review = authz.create_subject_access_review(
                client.V1SubjectAccessReview.model_validate(
                    {
                        "apiVersion": "authorization.k8s.io/v1",
                        "kind": "SubjectAccessReview",
                        "spec": {
                            "user": f"system:serviceaccount:{namespace}:{sa}",
                            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                            "resourceAttributes": attributes,
                        },
                    }
                )
            )
            if review.status is not None and review.status.allowed:
                allowed.add((group, resource, sub, verb))
    return allowed


def test_service_account_may_do_exactly_what_the_operator_needs(
    kube: Kube, crd: str, sim: SimulatorThread, release: tuple[str, str]
) -> None:
    name, namespace = release
    other = kube.new_namespace("pkg")
    docs = chart.render_for_cluster(
        values(sim, credentials={"existingSecret": "api"}), release=name, namespace=namespace
    )
    deployment, _ = install(kube, docs)
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    # Cluster-wide by default: ManagedRunners, their status and Events anywhere; Secrets nowhere but
    # the default token's, by name.
    assert decisions(kube, namespace, sa, other) == DISCOVERY | APPLICATION - SECRETS
    as_sa = f"--as=system:serviceaccount:{namespace}:{sa}"
    assert kube.kubectl("auth", "can-i", "get", "secret/api", as_sa, "-n", namespace).stdout.strip() == "yes"
    assert (
        kube.kubectl("auth", "can-i", "get", "secret/x", as_sa, "-n", other, check=False).stdout.strip()
        == "no"
    )

    # The wider mode, opted in: Secrets anywhere; and the namespace selector's `get` on namespaces.
    name = f"r{uuid.uuid4().hex[:6]}"
    wide = values(
        sim,
        credentials={"existingSecret": "api", "namespaceSelector": "team=a"},
        rbac={"secretsInEveryNamespace": True},
    )
    deployment, _ = install(kube, chart.render_for_cluster(wide, release=name, namespace=namespace))
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert decisions(kube, namespace, sa, other) == DISCOVERY | APPLICATION | {("", "namespaces", "", "get")}

    # Secrets in listed namespaces only.
    name, listed = f"r{uuid.uuid4().hex[:6]}", kube.new_namespace("pkg")
    narrow = values(sim, credentials={"existingSecret": "api"}, rbac={"secretNamespaces": [listed]})
    deployment, _ = install(kube, chart.render_for_cluster(narrow, release=name, namespace=namespace))
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert decisions(kube, namespace, sa, listed) == DISCOVERY | APPLICATION
    assert decisions(kube, namespace, sa, other) == DISCOVERY | APPLICATION - SECRETS

    name, watched = f"r{uuid.uuid4().hex[:6]}", kube.new_namespace("pkg")
    docs = chart.render_for_cluster(
        values(sim, watchNamespaces=[watched], credentials={"existingSecret": "api"}),
        release=name,
        namespace=namespace,
    )
    deployment, _ = install(kube, docs)
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespaces = {("", "namespaces", "", "list"), ("", "namespaces", "", "watch")}
    # Namespaced: the same, but only in the watched namespace...
    assert decisions(kube, namespace, sa, watched) == DISCOVERY | namespaces | APPLICATION
    # ...and only discovery elsewhere; in its own namespace, `get` on the token Secret by name.
    assert decisions(kube, namespace, sa, other) == DISCOVERY | namespaces
    # In the release namespace, also leader election: create and list Leases; get and update its own.
    leases = {("coordination.k8s.io", "leases", "", v) for v in ("create", "list")}
    assert decisions(kube, namespace, sa, namespace) == DISCOVERY | namespaces | leases
    as_sa = f"--as=system:serviceaccount:{namespace}:{sa}"
    lease = deployment["metadata"]["name"]
    for verb in ("get", "update"):
        mine = kube.kubectl(
            "auth", "can-i", verb, f"leases.coordination.k8s.io/{lease}", as_sa, "-n", namespace
        )
        assert mine.stdout.strip() == "yes"
        other_lease = f"leases.coordination.k8s.io/{lease}-other"
        assert (
            kube.kubectl(
                "auth", "can-i", verb, other_lease, as_sa, "-n", namespace, check=False
            ).stdout.strip()
            == "no"
        )
    assert kube.kubectl("auth", "can-i", "get", "secret/api", as_sa, "-n", namespace).stdout.strip() == "yes"
    other_secret = kube.kubectl("auth", "can-i", "get", "secret/other", as_sa, "-n", namespace, check=False)
    assert other_secret.stdout.strip() == "no"


def test_namespace_editors_create_and_viewers_list_managed_runners(
    kube: Kube, crd: str, sim: SimulatorThread, release: tuple[str, str]
) -> None:
    """The chart's user roles join Kubernetes' `edit` and `view` (clusterrole-aggregation controller)."""
    name, namespace = release
    install(
        kube,
        chart.render_for_cluster(
            values(sim, credentials={"existingSecret": "api"}), release=name, namespace=namespace
        ),
    )
    team = kube.new_namespace("pkg")
    rbac = client.RbacAuthorizationV1Api(kube.api)
    for person, role in (("editor", "edit"), ("viewer", "view")):
        kube.kubectl(
            "create",
            "rolebinding",
            person,
            f"--clusterrole={role}",
            f"--serviceaccount={team}:{person}",
            "-n",
            team,
        )

    def aggregated() -> bool:
        rules = rbac.read_cluster_role("edit").rules or []
        return any("managedrunners" in (rule.resources or []) for rule in rules)

    wait_for(aggregated, timeout=30, what="the chart's roles aggregated into `edit`")
    with (
        Kube(kube.sa_kubeconfig(team, "editor")) as editor,
        Kube(kube.sa_kubeconfig(team, "viewer")) as viewer,
    ):
        body = manifest("by-an-editor")
        editor.custom.create_namespaced_custom_object(GROUP, VERSION, team, PLURAL, body)
        listed = json_object(viewer.custom.list_namespaced_custom_object(GROUP, VERSION, team, PLURAL))
        assert [item["metadata"]["name"] for item in listed["items"]] == ["by-an-editor"]
        with pytest.raises(client.ApiException) as refused:
            viewer.custom.create_namespaced_custom_object(
                GROUP, VERSION, team, PLURAL, manifest("by-a-viewer")
            )
        assert refused.value.status == 403
        editor.custom.delete_namespaced_custom_object(GROUP, VERSION, team, PLURAL, "by-an-editor")
    purge(kube, team)


# -- the operator under the chart's ServiceAccount ---------------------------------------------------


# The life-cycle tests of test_lifecycle.py, run against this operator.
LIFECYCLE = [
    lifecycle.test_create_reaches_ready_with_every_status_field,
    lifecycle.test_spec_and_policy_changes_roll_out_and_rotate_the_etag,
    lifecycle.test_drift_is_corrected_and_out_of_band_deletion_recreated,
    lifecycle.test_delete_waits_for_the_cloud_then_releases_the_finalizer,
    lifecycle.test_orphan_leaves_the_runner,
    lifecycle.test_adoption_and_runner_id_conflicts,
    lifecycle.test_second_runner_on_a_cluster_is_a_clear_conflict,
]


def _evidence(proof: Proof, kube: Kube) -> str | None:
    """What the operator reports for the missing grant (None: nothing yet)."""
    grant, ns, log = proof.grant, proof.namespace, proof.operator.output()
    if grant is None:
        ready = [condition(lifecycle.get(kube, ns, n), "Ready").get("status") for n in ("a", "b")]
        return "both Ready" if ready == ["True", "True"] else None
    if grant.resources == ("secrets",) and proof.mode == "namespaced":
        # `a` names its own Secret; `b` uses the chart's default token Secret.
        cond = condition(lifecycle.get(kube, ns, "b" if grant.resource_names else "a"), "Synced")
        return str(cond["message"]) if cond.get("reason") == "SecretAccessDenied" else None
    if grant.resources == ("secrets",):
        # Cluster-wide operators also handle each other's runners: read this one's own log.
        verb = "read" if "get" in grant.verbs else "patch"
        needles = [f"may not {verb} Secret {ns}/coreweave-api (403)"]
    else:
        needles = [f'cannot {v} resource "{r}"' for r in grant.resources for v in grant.verbs]
    return next((line for line in log.splitlines() if any(n in line for n in needles)), None)


@dataclass
class Proof:
    mode: str
    grant: Grant | None
    namespace: str
    operator: DeployedOperator
    found: str | None = None


def _prove(
    kube: Kube, sim: SimulatorThread, mode: str, removals: Sequence[str | None], logs: Path
) -> dict[str | None, str]:
    """Start one operator per removal side by side (each its own release and namespace), collect evidence."""
    proofs: list[Proof] = []
    try:
        for removed in removals:
            release = f"r{uuid.uuid4().hex[:6]}"
            namespace, ns = kube.new_namespace("pkgop"), kube.new_namespace("pkg")
            kube.create_secret(namespace, "api", {"token": sim.token})
            kube.create_secret(ns, "coreweave-api", {"token": sim.token})
            settings = values(sim, credentials={"existingSecret": "api"})
            if mode == "namespaced":
                settings["watchNamespaces"] = [ns]
            else:  # every cluster-wide rule, the opt-in Secrets one included; `b` uses the default token
                settings.update(chart.CLUSTER_PROOF_VALUES)
                settings["credentials"] = {**chart.CLUSTER_PROOF_VALUES["credentials"], "namespaces": [ns]}
            docs = chart.render_for_cluster(settings, release=release, namespace=namespace)
            grant = next((g for g in chart.grants(docs) if g.id == removed), None)
            assert (grant is None) == (removed is None), f"{removed} is not granted by the chart"
            if grant is not None:
                docs = chart.without(docs, grant)
            deployment, kubeconfig = install(kube, docs)
            proofs.append(Proof(mode, grant, ns, DeployedOperator(deployment, kubeconfig, logs)))
        for proof in proofs:
            proof.operator.start()
            lifecycle.create(kube, proof.namespace, manifest("a"))
            lifecycle.create(kube, proof.namespace, manifest("b", secret=None))
        deadline = time.monotonic() + PERMISSION_TIMEOUT
        while time.monotonic() < deadline and any(p.found is None for p in proofs):
            for proof in proofs:
                if proof.found is None:
                    proof.found = _evidence(proof, kube)
            time.sleep(0.3)
    finally:
        for proof in proofs:
            proof.operator.stop()
        for proof in proofs:
            purge(kube, proof.namespace)
    results: dict[str | None, str] = {}
    for proof, removed in zip(proofs, removals, strict=True):
        log = proof.operator.output()
        if proof.found is None:
            results[removed] = f"NOTHING within {PERMISSION_TIMEOUT}s; log tail:\n{log[-2500:]}"
        elif proof.grant is None and RBAC_DENIED in log:
            results[removed] = "FORBIDDEN: " + next(line for line in log.splitlines() if RBAC_DENIED in line)
        else:
            results[removed] = proof.found
    return results


@pytest.fixture(scope="module")
def proofs(
    kube: Kube, crd: str, sim: SimulatorThread, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str | None], str]:
    """Every removal, side by side per mode; the cluster-wide full grant is the life-cycle test's."""
    logs = tmp_path_factory.mktemp("rbac-proof")
    out: dict[tuple[str, str | None], str] = {}
    for mode, grants in (("namespaced", [None, *chart.NAMESPACED_GRANTS]), ("cluster", chart.CLUSTER_GRANTS)):
        for removed, found in _prove(kube, sim, mode, grants, logs).items():
            out[(mode, removed)] = found
    return out


CASES: list[tuple[str, str | None]] = [("namespaced", None)]
CASES += [("namespaced", g) for g in chart.NAMESPACED_GRANTS] + [("cluster", g) for g in chart.CLUSTER_GRANTS]


@pytest.mark.parametrize(("mode", "removed"), CASES, ids=[f"{m}-{g or 'all-granted'}" for m, g in CASES])
def test_removing_any_rule_shows_a_permission_error(
    proofs: dict[tuple[str, str | None], str], mode: str, removed: str | None
) -> None:
    """With every rule both runners get Ready; without any one, a 403 naming it shows up."""
    found = proofs[(mode, removed)]
    assert not found.startswith(("NOTHING", "FORBIDDEN")), found
    if removed is None:
        assert found == "both Ready"
    else:
        assert "403" in found or "forbidden" in found.lower(), found


@pytest.fixture
def own_sim() -> Iterator[SimulatorThread]:
    """A simulator of its own: the life-cycle tests use fixed request IDs, which test_lifecycle.py
    has already spent on the session simulator."""
    sim = SimulatorThread(E2E_TIMINGS).start()
    try:
        yield sim
    finally:
        sim.stop()


def test_operator_with_the_chart_service_account_passes_the_lifecycle(
    kube: Kube, crd: str, installed: Future[list[str]], own_sim: SimulatorThread, tmp_path: Path
) -> None:
    """Cluster-wide mode, the image's install, the Deployment's args and env, the chart's token."""
    sim = own_sim
    name, namespace = f"r{uuid.uuid4().hex[:6]}", kube.new_namespace("pkgop")
    kube.create_secret(namespace, "api", {"token": sim.token})
    ns = kube.new_namespace("pkg")
    kube.create_secret(ns, "coreweave-api", {"token": sim.token})
    # The least Secret access that works: Secrets of `ns`, the default token for `ns`.
    docs = chart.render_for_cluster(
        values(
            sim,
            credentials={"existingSecret": "api", "namespaces": [ns]},
            rbac={"secretNamespaces": [ns]},
            metrics={"enabled": True},
        ),
        release=name,
        namespace=namespace,
    )
    deployment, kubeconfig = install(kube, docs)
    operator = DeployedOperator(deployment, kubeconfig, tmp_path, entry=installed.result(600)).start()
    try:
        wait_for(lambda: operator.probe() == 200, timeout=60, what="the liveness probe answering 200")
        for step in LIFECYCLE:
            step(kube, ns, sim, operator)

        # The operator-wide default token (the chart's Secret), for a runner that names none.
        body = manifest("default-token", secret=None)
        lifecycle.create(kube, ns, body)
        lifecycle.wait_ready(kube, ns, "default-token")
        assert "managed_runner_operator_reconciles_total" in operator.metrics()
        assert operator.probe() == 200
    finally:
        operator.stop()
    log = operator.output()
    assert RBAC_DENIED not in log, [line for line in log.splitlines() if RBAC_DENIED in line][:5]
    assert sim.token not in log

    # The way out when the operator is gone before its resources (docs/install.md).
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "default-token")
    time.sleep(2)
    stuck = lifecycle.get(kube, ns, "default-token")
    assert stuck is not None
    assert stuck["metadata"]["deletionTimestamp"]
    command = chart.FINALIZER_WAY_OUT.replace("<name>", "default-token").replace("<namespace>", ns)
    args = command.split(" ", 1)[1].replace("'", "").split(" ")
    kube.kubectl(*args)
    lifecycle.wait_gone(kube, ns, "default-token")
    assert sim.runner(body["spec"]["runnerId"]) is not None, "the cloud runner is left for the user to delete"
    purge(kube, ns)


def test_the_installed_cli_checks_the_packaged_crd_offline(
    installed: Future[list[str]], tmp_path: Path
) -> None:
    """The wheel carries the CRD `plan` checks manifests against without a cluster (run outside the
    source tree, so nothing but the installed package can provide it)."""
    executable = installed.result()[0]
    text = (ROOT / "examples" / "minimal.yaml").read_text().replace("zone: us-east-04a", "zone: US-EAST-04A")
    (tmp_path / "r.yaml").write_text(text)
    (tmp_path / "token").write_text("CW-SECRET-never-sent")
    env = {"PATH": os.defpath, "HOME": str(tmp_path), schemacheck.VARIABLE: tool("managed-runner-validate")}
    argv = ["plan", "-f", "r.yaml", "--offline", "--token-file", "token", "--endpoint", "http://127.0.0.1:9"]
    proc = subprocess.run(
        [executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the CRD refuses ManagedRunner sandboxes/dev: " in proc.stderr, proc.stderr
    assert "zone must be lower-case" in proc.stderr, proc.stderr
