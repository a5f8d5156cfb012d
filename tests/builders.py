"""Tiny builders of complete API objects (with ``apiVersion``/``kind``), as a state directory holds them.

Shared by the app tests; keep them generic (no test's expectations baked in). Every builder returns a fresh
plain dict that can be dumped to YAML/JSON or fed to ``ClusterState.from_objects``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

RESOURCE_V1 = "resource.k8s.io/v1"
CREATED = "2026-01-01T00:00:00Z"

Obj = dict[str, Any]


def node(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    """A core/v1 Node with the ``kubernetes.io/hostname`` label plus ``labels``."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
    }


def device_class(name: str, expression: str | None = None) -> Obj:
    """A DeviceClass with one CEL selector (none when ``expression`` is None)."""
    spec: Obj = {}
    if expression is not None:
        spec["selectors"] = [{"cel": {"expression": expression}}]
    return {"apiVersion": RESOURCE_V1, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _attribute(value: Any) -> Obj:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def device(
    name: str, attributes: Mapping[str, Any] | None = None, capacity: Mapping[str, str] | None = None
) -> Obj:
    """A device; attribute values typed from Python (bool, int, else string), capacity as quantities."""
    result: Obj = {"name": name}
    if attributes:
        result["attributes"] = {key: _attribute(value) for key, value in attributes.items()}
    if capacity:
        result["capacity"] = {key: {"value": value} for key, value in capacity.items()}
    return result


def resource_slice(name: str, driver: str, node: str, devices: Iterable[Obj]) -> Obj:
    """A node-local ResourceSlice: pool named after the node, generation 1, one slice in the pool."""
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": list(devices),
        },
    }


def request(name: str, class_name: str, count: int = 1) -> Obj:
    """An ``exactly`` ExactCount device request."""
    return {
        "name": name,
        "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count},
    }


def claim(ns: str, name: str, requests: Iterable[Obj]) -> Obj:
    """An unallocated ResourceClaim with ``requests``."""
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-claim-{ns}-{name}"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def claim_template(ns: str, name: str, requests: Iterable[Obj]) -> Obj:
    """A ResourceClaimTemplate whose claims have ``requests``."""
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def made_for(obj: Obj, pod_name: str) -> Obj:
    """``obj``, a ResourceClaim, made for pod ``pod_name`` of its namespace (``pod``'s default uid), as the
    resourceclaim controller makes one from the pod's template: only that pod can use it."""
    ns = obj["metadata"]["namespace"]
    uid = f"uid-pod-{ns}-{pod_name}"
    reference = {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid, "controller": True}
    obj["metadata"]["ownerReferences"] = [reference]
    return obj


def pod(
    ns: str,
    name: str,
    claims: Iterable[str] = (),
    uid: str | None = None,
    *,
    templates: Mapping[str, str] | None = None,
    created: str = CREATED,
) -> Obj:
    """A pending core/v1 Pod with one container using every pod claim.

    ``claims``: ResourceClaim names, each referenced by a pod claim of the same name
    (``resourceClaimName``). ``templates``: pod claim name → ResourceClaimTemplate name.
    """
    pod_claims = [{"name": c, "resourceClaimName": c} for c in claims]
    pod_claims += [{"name": c, "resourceClaimTemplateName": t} for c, t in (templates or {}).items()]
    spec: Obj = {"containers": [{"name": "main", "image": "registry.example/app:1"}]}
    if pod_claims:
        spec["resourceClaims"] = pod_claims
        spec["containers"][0]["resources"] = {"claims": [{"name": c["name"]} for c in pod_claims]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid or f"uid-pod-{ns}-{name}",
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def write_state(root: Path, objects: Iterable[Obj]) -> Path:
    """A state directory ``root/state`` holding ``objects`` in one ``cluster.yaml``."""
    directory = root / "state"
    directory.mkdir()
    (directory / "cluster.yaml").write_text(yaml.safe_dump_all(list(objects)))
    return directory
