"""Optional node operations (KEP-5945, gate ``DRAOptionalNodeOperations``, alpha): a ResourceSlice's
``spec.skipNodeOperations`` tells the kubelet to skip NodePrepareResources / NodeUnprepareResources for its
devices, so only a kubelet that declares the feature may run pods with them.

Upstream's experimental allocator refuses such a device while the gate is off and, with it on, on a node
whose ``status.declaredFeatures`` lacks ``DRAOptionalNodeOperations``; the stable and incubating ones
(chosen when no gate of the experimental one is on) ignore the field, and their results do not carry it.
kube-scheduler's Filter applies the node check (with or without the gate) to claims already allocated
with such devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.features import FeatureGates
from allocator.model import ResourceSlice
from allocator.nodeselector import Node

__all__ = ["DECLARED_FEATURE", "allocatable_on", "requires_declared_feature"]

DECLARED_FEATURE = "DRAOptionalNodeOperations"
"""The node-declared feature name (component-helpers ``draoptionalnodeoperations``)."""


def allocatable_on(slice_: ResourceSlice, node: Node, gates: FeatureGates) -> bool:
    """Whether devices of ``slice_`` may be allocated for a pod on ``node``."""
    if not slice_.skip_node_operations or not gates.experimental_allocator:
        return True
    return gates.DRAOptionalNodeOperations and DECLARED_FEATURE in node.declared_features


def requires_declared_feature(allocation: Mapping[str, Any]) -> bool:
    """Whether an ``AllocationResult`` holds a device that skips node operations."""
    return any(r.get("skipNodeOperations") for r in (allocation.get("devices") or {}).get("results") or ())
