"""What `runner-operator plan` reads from a cluster when a kubeconfig is reachable (blocking calls).

The live ManagedRunner of a manifest (its status says which runner it holds), every claim on the
manifest's runner ID, and a server-side dry run of the apply: the API server's own validation,
CEL rules included, with its own message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from runner_operator import claiming
from runner_operator.resource import GROUP, PLURAL, VERSION

FIELD_MANAGER = "runner-operator-plan"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class Cluster:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._api = api
        self.objects = client.CustomObjectsApi(api)
        self.namespace = namespace
        """the kubeconfig context's namespace: where a manifest without one would go."""
        self._listed: dict[str, list[dict[str, Any]]] = {}
        """the ManagedRunners this user may list, read once per plan (by the namespace asked for)."""

    def close(self) -> None:
        """Close the pooled TLS connections (left to the garbage collector, they warn when collected)."""
        self._api.close()  # type: ignore[no-untyped-call]

    def live(self, doc: Mapping[str, Any]) -> tuple[dict[str, Any] | None, tuple[claiming.Claim, ...]]:
        """The ManagedRunner the manifest names (None if absent) and every claim on its runner ID."""
        meta: Mapping[str, Any] = doc.get("metadata") or {}
        namespace = meta.get("namespace") or self.namespace
        found: dict[str, Any] | None
        try:
            found = _object(
                self.objects.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, str(meta.get("name"))
                )
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            found = None
        runner_id = str((doc.get("spec") or {}).get("runnerId"))
        entries = [claiming.claim(item) for item in self._managed_runners(namespace)]
        if found is None:
            entries.append(
                claiming.claim(
                    {**doc, "metadata": {**meta, "namespace": namespace, "uid": claiming.PLANNED_UID}}
                )
            )
        return found, tuple(entry for rid, entry in entries if rid == runner_id)

    def _managed_runners(self, namespace: str) -> list[dict[str, Any]]:
        """Every ManagedRunner, or those of `namespace` for a user who may list only there (tenancy)."""
        if "" not in self._listed and namespace not in self._listed:
            try:
                self._listed[""] = _object(self.objects.list_cluster_custom_object(GROUP, VERSION, PLURAL))[
                    "items"
                ]
            except client.ApiException as exc:
                if exc.status != 403:
                    raise
                self._listed[namespace] = _object(
                    self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
                )["items"]
        return self._listed[""] if "" in self._listed else self._listed[namespace]

    def dry_run(self, doc: Mapping[str, Any]) -> str | None:
        """The API server's refusal of applying `doc` (schema, CEL, immutable fields), or None."""
        meta: Mapping[str, Any] = doc.get("metadata") or {}
        namespace = meta.get("namespace") or self.namespace
        try:
            self.objects.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                str(meta.get("name")),
                dict(doc),
                dry_run="All",
                field_manager=FIELD_MANAGER,
                field_validation="Strict",
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except client.ApiException as exc:
            message = _message(exc)
            # A field of the wrong type or not in the schema: server-side apply answers 500 for it
            # ("failed to create typed patch object"), as `kubectl apply --server-side` shows.
            if exc.status in (400, 409, 422) or (exc.status == 500 and "typed patch" in message):
                return message
            raise
        return None


def connect(kubeconfig: Path | None) -> Cluster | None:
    """The cluster of `kubeconfig` (else KUBECONFIG or ~/.kube/config, else in-cluster), None if none.

    ConfigException when the kubeconfig given explicitly cannot be used.
    """
    settings = client.Configuration()
    path = str(kubeconfig) if kubeconfig is not None else None
    try:
        config.load_kube_config(config_file=path, client_configuration=settings)
        _, context = config.list_kube_config_contexts(config_file=path)
        namespace = str((context.get("context") or {}).get("namespace") or "default")
    except ConfigException:
        if kubeconfig is not None:
            raise
        try:
            config.load_incluster_config(client_configuration=settings)
        except ConfigException:
            return None
        namespace = _pod_namespace()
    return Cluster(client.ApiClient(configuration=settings), namespace)


def _pod_namespace() -> str:
    try:
        return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
    except OSError:
        return "default"


def _object(answer: object) -> dict[str, Any]:
    """The custom-objects API types its answers `object`; they are JSON objects."""
    if not isinstance(answer, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(answer).__name__}")
    return answer


def _message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)
