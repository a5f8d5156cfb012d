"""Decide that claims fit on a node from free-device counts, without the search.

The search (``allocator.search``) explores device combinations; for the common claim shapes a count
settles it: when every request is ``ExactCount`` with one alternative, there are no constraints, and no
device usable by one request is usable by another, the claims fit exactly when each request has at least
``count`` devices that pass the whole per-device funnel (``allocator.explain.DeviceChecker``: pool, class
and request selectors, taints, not in use, counters and capacity). kube-scheduler's filter only needs
that answer; which devices to take is chosen later, on the nodes that get scored or bound.

Only "fits" is ever concluded here. Everything else goes to the search, which also words the reason
(``fits`` returns False): too few devices, requests sharing devices, a CEL or derived-attribute error
on some device (the search decides whether it reaches that device), and devices whose choice is not a
plain yes/no — shares of multi-allocatable devices, devices consuming counters, devices with binding
conditions.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.explain import DeviceChecker, node_devices
from allocator.inventory import Inventory
from allocator.model import MAX_DEVICES_PER_CLAIM, Claim, Device
from allocator.nodeselector import Node
from allocator.search import Allocator
from allocator.selectors import SelectorCache

__all__ = ["countable", "fits"]

_SEARCH_DECIDES = frozenset({"cel-error", "derived-attribute-error"})
"""Rejections whose outcome depends on whether the search gets to the device (it stops at a fit)."""


def countable(claims: Sequence[Claim]) -> bool:
    """Whether counts can decide ``claims``: every request ``exactly`` (no ``firstAvailable``), mode
    ``ExactCount``, no capacity requests, adminAccess or derived attributes, no constraints, and at
    most ``MAX_DEVICES_PER_CLAIM`` devices per claim (more is a validation error the search reports)."""
    for claim in claims:
        if claim.constraints:
            return False
        total = 0
        for request in claim.requests:
            if request.first_available or len(request.alternatives) != 1:
                return False
            alt = request.alternatives[0]
            if (
                alt.mode != "ExactCount"
                or alt.capacity_requests
                or alt.admin_access
                or alt.derived_attributes
            ):
                return False
            total += alt.count
        if total > MAX_DEVICES_PER_CLAIM:
            return False
    return True


def _plain(device: Device) -> bool:
    """Taken whole or not at all: no shares, no counters, no binding conditions."""
    return not (device.allow_multiple_allocations or device.consumes_counters or device.binding_conditions)


def fits(inventory: Inventory, selectors: SelectorCache, node: Node, claims: Sequence[Claim]) -> bool:
    """True when ``claims`` (``countable``) certainly fit together on ``node``; False when the search
    must decide (no fit, or counts cannot tell). Raises what the search raises for the claims
    themselves (AllocatorError: fatal for the pod), so a fatal claim is never reported as fitting."""
    Allocator(inventory, selectors).validate(claims)
    devices = list(node_devices(inventory, node))
    if not all(_plain(nd.device) for nd in devices):
        return False
    checker = DeviceChecker(inventory, selectors)
    taken: set[int] = set()
    for claim in claims:
        for request in claim.requests:
            alt = request.alternatives[0]
            usable = 0
            for nd in devices:
                if checker.in_use(alt, nd.device):
                    continue
                rejection = checker.check(claim, alt, nd)
                if rejection is not None:
                    if rejection.rule in _SEARCH_DECIDES:
                        return False
                    continue
                if id(nd.device) in taken:
                    return False  # two requests could use this device: which gets it is the search's job
                taken.add(id(nd.device))
                usable += 1
            if usable < alt.count:
                return False
    return True
