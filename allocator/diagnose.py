"""Why claims do not fit on a node: one line per node, and whether waiting could ever help.

Runs only after the search found no allocation. Per request (each ``firstAvailable`` alternative) it
counts the node's devices through the same stages the search applies — in usable pools, matching the
class and request selectors, tolerated taints, not in use — and names the first request that cannot be
met. A node whose devices could never match a request (too few match the selectors at all) is
*unresolvable*: freeing devices would not help, so kube-scheduler should not try preemption there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocator.errors import CELError
from allocator.inventory import Inventory
from allocator.model import Claim, Device, DeviceRequest
from allocator.nodeselector import Node
from allocator.pools import device_on_node
from allocator.selectors import SelectorCache

__all__ = ["NoFit", "RequestFunnel", "diagnose", "request_funnel"]


@dataclass(frozen=True, slots=True)
class RequestFunnel:
    """Device counts for one request alternative on one node, stage by stage."""

    request: str
    device_class: str
    needed: int
    in_pools: int
    matching: int
    tolerated: int
    free: int


@dataclass(frozen=True, slots=True)
class NoFit:
    """The reason a node failed and whether it can never fit (``unresolvable``)."""

    reason: str
    unresolvable: bool


def _matches(
    selectors: SelectorCache, inventory: Inventory, claim: Claim, alt: DeviceRequest, device: Device
) -> bool:
    device_class = inventory.device_class(alt.class_name)
    if device_class is None:
        return False
    try:
        return all(
            selectors.matches(e, device, f"class {device_class.name}", i)
            for i, e in enumerate(device_class.selectors)
        ) and all(selectors.matches(e, device, f"claim {claim.key}", i) for i, e in enumerate(alt.selectors))
    except CELError:
        return False


def request_funnel(
    inventory: Inventory, selectors: SelectorCache, node: Node, claim: Claim, alt: DeviceRequest
) -> RequestFunnel:
    """Count the node's devices for one request alternative, stage by stage."""
    in_pools = matching = tolerated = free = 0
    for pool in inventory.pools_for(node):
        if not pool.usable:
            continue
        for slice_ in pool.slices:
            for device in slice_.devices:
                if slice_.per_device_node_selection and not device_on_node(device, node):
                    continue
                in_pools += 1
                if not _matches(selectors, inventory, claim, alt, device):
                    continue
                matching += 1
                blocking = [t for t in inventory.taints(device) if t.blocks_allocation]
                if inventory.gates.DRADeviceTaints and any(
                    not any(tol.tolerates(t) for tol in alt.tolerations) for t in blocking
                ):
                    continue
                tolerated += 1
                if (
                    alt.admin_access
                    or device.allow_multiple_allocations
                    or not (inventory.is_exclusively_allocated(device.id))
                ):
                    free += 1
    needed = alt.count if alt.mode == "ExactCount" else max(matching, 1)
    return RequestFunnel(alt.name, alt.class_name, needed, in_pools, matching, tolerated, free)


def diagnose(inventory: Inventory, selectors: SelectorCache, node: Node, claims: Sequence[Claim]) -> NoFit:
    """The one-line reason the claims do not fit on ``node`` (after the search said so)."""
    for claim in claims:
        for request in claim.requests:
            funnels = [request_funnel(inventory, selectors, node, claim, alt) for alt in request.alternatives]
            if all(f.matching < f.needed for f in funnels):
                f = funnels[0]
                return NoFit(
                    f"claim {claim.key}, request {f.request}: node has {f.matching} device(s) of "
                    f"class {f.device_class} matching the selectors, {f.needed} needed",
                    True,
                )
            if all(f.free < f.needed for f in funnels):
                f = funnels[0]
                tainted = f.matching - f.tolerated
                in_use = f.tolerated - f.free
                return NoFit(
                    f"claim {claim.key}, request {f.request}: {f.free} of {f.matching} matching "
                    f"device(s) usable ({in_use} in use, {tainted} tainted), {f.needed} needed",
                    in_use == 0,
                )
    return NoFit(
        "the claims cannot be satisfied together on this node (constraints, counters or capacity)", False
    )
