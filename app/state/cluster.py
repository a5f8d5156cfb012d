"""The extender's view of the cluster: API objects by kind plus the allocator's inventory.

Sources (a state directory now, Kubernetes watches later) call ``apply`` / ``remove`` per object; the
inventory is updated incrementally from the same calls. Objects are plain v1-shaped dicts; claims are
parsed into allocator ``Claim`` objects once per resourceVersion.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from allocator.deviceuse import allocated_devices
from allocator.errors import InvalidInputError, detached
from allocator.features import FeatureGates
from allocator.inventory import Inventory
from allocator.model import (
    Claim,
    parse_claim,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_slice,
)
from allocator.nodeselector import Node, parse_node_selector
from app.state.compact import SharedParts, kept_slice

__all__ = [
    "KINDS",
    "NAMESPACED_KINDS",
    "ClusterState",
    "is_pending",
    "node_from_api",
    "object_key",
    "object_version",
    "version_number",
]

log = logging.getLogger(__name__)

KINDS = (
    "Namespace",
    "Node",
    "Pod",
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "DeviceTaintRule",
    "PodGroup",
)
NAMESPACED_KINDS = frozenset({"Pod", "ResourceClaim", "ResourceClaimTemplate", "PodGroup"})


def object_key(kind: str, obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced kinds, ``name`` for cluster-scoped ones."""
    meta = obj.get("metadata") or {}
    if kind in NAMESPACED_KINDS:
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    return str(meta.get("name"))


def version_number(version: Any) -> int:
    """A resourceVersion as the integer the API server writes (as kube-scheduler's assume cache reads it);
    -1 when absent or not an integer, which compares older than every version."""
    try:
        return int(version)
    except (TypeError, ValueError):
        return -1


def object_version(obj: Mapping[str, Any] | None) -> int:
    """``version_number`` of ``obj``'s ``metadata.resourceVersion`` (None: no object, -1)."""
    return version_number(((obj or {}).get("metadata") or {}).get("resourceVersion"))


def is_pending(pod: Mapping[str, Any]) -> bool:
    """Not bound to a node (no ``spec.nodeName``) and not terminal."""
    if (pod.get("spec") or {}).get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def node_from_api(obj: Mapping[str, Any]) -> Node:
    """The name, labels and declared features of a core/v1 Node dict."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    declared = (obj.get("status") or {}).get("declaredFeatures") or ()
    return Node(
        str(meta.get("name") or ""),
        {str(k): str(v) for k, v in labels.items()},
        frozenset(map(str, declared)),
    )


MAX_PARSED_SPECS = 4_096
"""Claim specs whose parse ``ClusterState`` keeps for the next claim with that spec (one per template in
use; when full it starts over)."""


class ClusterState:
    """API objects by kind and key, and the inventory derived from them. Not thread-safe by itself.

    Objects are kept as ``app.state.compact`` says: a ResourceSlice's ``spec.devices`` lists only those
    publishing ``nodeAllocatableResources`` (the inventory holds every device parsed), and equal parts of
    claims and pods are one object. Stored objects are never edited in place.
    """

    def __init__(self, gates: FeatureGates | None = None) -> None:
        self.gates = gates or FeatureGates()
        self.inventory = Inventory(self.gates)
        self.objects: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in KINDS}
        self._claims: dict[str, tuple[str, Claim | InvalidInputError]] = {}
        self._by_spec: dict[int, tuple[object, Claim]] = {}
        """A claim parsed from each shared spec object (by its id, the object kept so the id stays its):
        the next claim of the template is parsed for its identity only. At most MAX_PARSED_SPECS."""
        self._shared = SharedParts()
        self.node_allocatable_slices: set[str] = set()
        """ResourceSlices with devices that publish ``nodeAllocatableResources``
        (``app.scheduling.nodeallocatable``):
        while there are none, filter skips the node-allocatable fit."""

    @classmethod
    def from_objects(
        cls, objects: Iterable[tuple[str, Mapping[str, Any]]], gates: FeatureGates | None = None
    ) -> ClusterState:
        """Build from (kind, object) pairs. Raises InvalidInputError for a malformed DRA object."""
        state = cls(gates)
        for kind, obj in objects:
            state.apply(kind, obj)
        return state

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Add or replace one object. Raises InvalidInputError if it cannot be parsed: the state is
        unchanged, except that a rejected ResourceSlice's previous revision is dropped
        (``Inventory.reject_slice``)."""
        key = object_key(kind, obj)
        if kind == "ResourceSlice":
            try:
                parsed = parse_resource_slice(obj, self.inventory.slice(key))
            except InvalidInputError as e:
                self.reject(kind, obj, str(e))
                raise
            self.inventory.upsert_slice(parsed)
            obj = kept_slice(obj)
            if obj["spec"]["devices"]:
                self.node_allocatable_slices.add(key)
            else:
                self.node_allocatable_slices.discard(key)
        elif kind == "DeviceClass":
            self.inventory.upsert_class(parse_device_class(obj))
        elif kind == "DeviceTaintRule":
            self.inventory.upsert_taint_rule(parse_device_taint_rule(obj))
        elif kind == "Node":
            self.inventory.upsert_node(node_from_api(obj))
        elif kind == "ResourceClaim":
            status = obj.get("status") or {}
            devices = allocated_devices(status.get("allocation"), f"ResourceClaim {key}")
            _check_claim_status(status, f"ResourceClaim {key}")
            self.inventory.set_allocation(key, devices)
        elif kind not in self.objects:
            raise InvalidInputError(f"unsupported kind {kind}")
        self.objects[kind][key] = self._shared.kept(kind, obj)

    def node_allocatable_slice_objects(self) -> list[dict[str, Any]]:
        """The kept ResourceSlices listed in ``node_allocatable_slices``: all a bind or a fit needs to find
        the devices that publish ``nodeAllocatableResources``, without a walk over every slice."""
        slices = self.objects["ResourceSlice"]
        return [slices[key] for key in self.node_allocatable_slices if key in slices]

    def reject(self, kind: str, obj: Mapping[str, Any], reason: str) -> None:
        """A new revision of ``obj`` that cannot be used (``reason``). For a ResourceSlice the previous
        revision goes too: it is gone from the API, and keeping its devices would allocate what the driver
        no longer publishes; the node says why it has none (``Inventory.reject_slice``). Other kinds keep
        their previous revision (forgetting a claim's allocation would free devices still in use)."""
        if kind != "ResourceSlice":
            return
        key = object_key(kind, obj)
        self.objects[kind].pop(key, None)
        node_name = (obj.get("spec") or {}).get("nodeName")
        self.inventory.reject_slice(key, node_name if isinstance(node_name, str) else "", reason)

    def remove(self, kind: str, key: str) -> None:
        """Delete one object by key (``namespace/name`` or ``name``); unknown keys are ignored."""
        if self.objects.get(kind, {}).pop(key, None) is None:
            if kind == "ResourceSlice":
                self.inventory.delete_slice(key)  # a rejected slice: its reason goes
            return
        if kind == "ResourceSlice":
            self.inventory.delete_slice(key)
            self.node_allocatable_slices.discard(key)
        elif kind == "DeviceClass":
            self.inventory.delete_class(key)
        elif kind == "DeviceTaintRule":
            self.inventory.delete_taint_rule(key)
        elif kind == "Node":
            self.inventory.delete_node(key)
        elif kind == "ResourceClaim":
            self.inventory.set_allocation(key, ())
            self._claims.pop(key, None)

    def keys(self, kind: str) -> list[str]:
        """Keys of the objects of ``kind``, rejected ResourceSlices included (``reject``)."""
        keys = list(self.objects[kind])
        return keys + self.inventory.rejected_slices() if kind == "ResourceSlice" else keys

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        return self.objects[kind].get(key)

    def parsed_claim(self, key: str) -> Claim:
        """The allocator view of a ResourceClaim, cached per resourceVersion. Raises InvalidInputError."""
        obj = self.objects["ResourceClaim"][key]
        version = str((obj.get("metadata") or {}).get("resourceVersion") or id(obj))
        cached = self._claims.get(key)
        if cached is None or cached[0] != version:
            spec = obj.get("spec")
            earlier = self._by_spec.get(id(spec))
            parsed: Claim | InvalidInputError
            try:
                claim = parse_claim(
                    obj, same_spec=earlier[1] if earlier is not None and earlier[0] is spec else None
                )
            except InvalidInputError as e:
                parsed = detached(e)  # raised again as often as kube-scheduler retries the pod
            else:
                parsed = claim
                if (earlier is None or earlier[0] is not spec) and isinstance(spec, Mapping):
                    if len(self._by_spec) >= MAX_PARSED_SPECS:
                        self._by_spec.clear()
                    self._by_spec[id(spec)] = (spec, claim)
            cached = (version, parsed)
            self._claims[key] = cached
        if isinstance(cached[1], InvalidInputError):
            raise detached(cached[1])
        return cached[1]

    def node(self, name: str) -> Node | None:
        return self.inventory.node(name)

    def pending_pods(self) -> list[dict[str, Any]]:
        """Pods without ``spec.nodeName`` that are not terminal, in scheduling order
        (creationTimestamp, then namespace/name)."""
        return sorted(
            filter(is_pending, self.objects["Pod"].values()),
            key=lambda p: (
                str((p.get("metadata") or {}).get("creationTimestamp") or ""),
                object_key("Pod", p),
            ),
        )


def _check_claim_status(status: Mapping[str, Any], where: str) -> None:
    """The parts of ``status`` the extender reads besides the results: the allocation's ``nodeSelector``
    and ``reservedFor`` entries. Raises InvalidInputError naming the field."""
    allocation = status.get("allocation")
    selector = allocation.get("nodeSelector") if isinstance(allocation, Mapping) else None
    if selector is not None:
        parse_node_selector(selector, f"{where}: status.allocation.nodeSelector")
    reserved = status.get("reservedFor")
    if reserved is None:
        return
    if not isinstance(reserved, list):
        raise InvalidInputError(f"{where}: status.reservedFor: must be a list")
    for i, entry in enumerate(reserved):
        # uid is required by the API but trimmed from some published dumps: only its type is checked.
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise InvalidInputError(f"{where}: status.reservedFor[{i}]: must be an object with a string name")
        if not isinstance(entry.get("uid", ""), str):
            raise InvalidInputError(f"{where}: status.reservedFor[{i}].uid: must be a string")
