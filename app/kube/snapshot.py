"""A read-only snapshot of a live cluster, for ``explain`` and ``simulate`` (``--kubeconfig``, ``--context``).

``take_snapshot(kubeconfig, context)`` lists, through ``app.kube.client``, every object of the kinds a
state directory holds: Namespaces, Nodes, Pods, and the ``resource.k8s.io`` kinds at the version the
server prefers among those ``to_v1`` reads (DeviceClasses, ResourceSlices, ResourceClaims,
ResourceClaimTemplates, DeviceTaintRules when served), in pages. Nothing is written and nothing is
watched. The objects then go through the state loader (``app.state.statedir.load_documents``: the same checks,
conversions and defaults as files), each kind under a source name like
``127.0.0.1:6443/apis/resource.k8s.io/v1/resourceclaims`` in messages.

Each kind is one list (paged with ``continue``, so consistent within the kind), not one snapshot across
kinds: a pod bound between two lists may show up with its claim not yet allocated, as kube-scheduler's
own informers can see it for a moment.

Errors: ``SnapshotError`` naming what failed (configuration, connection, a list answer, a required kind
not served, an object the loader refuses).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.kube.client import KubeAPIError, KubeClient, Resource, kubeconfig_paths
from app.kube.informers import CORE_KINDS, DRA_VERSIONS, REQUIRED_DRA_KINDS, discover_dra
from app.state.statedir import ClusterObjects, StateLoadError, load_documents

__all__ = ["PAGE_SIZE", "SnapshotError", "take_snapshot"]

PAGE_SIZE = 500
"""Objects per list page (kubectl's chunk size)."""


class SnapshotError(Exception):
    """The cluster cannot be read, or an object of it cannot be loaded."""


def take_snapshot(
    kubeconfig: Path | None, context: str | None = None, *, strict_fields: bool = False
) -> ClusterObjects:
    """List the cluster of ``kubeconfig`` (None: the files of ``$KUBECONFIG``, merged, else
    ``~/.kube/config``) at ``context`` (None: its current context) into ``ClusterObjects``. Raises
    SnapshotError."""
    try:
        documents = asyncio.run(_list_all(kubeconfig, context))
    except KubeAPIError as e:
        raise SnapshotError(f"reading the cluster: {e}") from e
    try:
        return load_documents(documents, strict_fields=strict_fields)
    except StateLoadError as e:
        raise SnapshotError(str(e)) from e


async def _list_all(kubeconfig: Path | None, context: str | None) -> list[tuple[Path, list[Any]]]:
    # As kubectl: without --kubeconfig and $KUBECONFIG, ~/.kube/config (never the in-cluster account).
    paths = kubeconfig_paths(kubeconfig) or (Path.home() / ".kube" / "config",)
    try:
        client = await KubeClient.connect(paths, context=context)
    except Exception as e:  # kubernetes-asyncio raises ConfigException, OSError, ValueError, ...
        raise SnapshotError(f"cannot load the Kubernetes client configuration: {e}") from e
    try:
        dra = await discover_dra(client)
        missing = [kind for kind in REQUIRED_DRA_KINDS if kind not in dra]
        if missing:
            served = "/".join(DRA_VERSIONS)
            raise SnapshotError(
                f"the API server does not serve {', '.join(missing)} (resource.k8s.io {served})"
            )
        host = client.host.split("://", 1)[-1]
        return [
            (Path(f"{host}{resource.path()}"), await _list(client, resource))
            for resource in (*CORE_KINDS.values(), *dra.values())
        ]
    finally:
        await client.close()


async def _list(client: KubeClient, resource: Resource) -> list[Any]:
    """Every object of ``resource``, with the ``apiVersion`` and ``kind`` list items lack."""
    items: list[Any] = []
    token: str | None = None
    while True:
        page = await client.list(resource, limit=PAGE_SIZE, continue_=token)
        for item in page.get("items") or ():
            if isinstance(item, dict):
                (item.get("metadata") or {}).pop("managedFields", None)  # bulky, never read
                items.append({"apiVersion": resource.api_version, "kind": resource.kind, **item})
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
