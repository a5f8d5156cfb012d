"""Decide whether claims fit on a node from free-device counts, without the search.

The search (``allocator.search``) explores device combinations; for the common claim shapes a count
settles it: when every request is ``ExactCount`` with one alternative, there are no constraints, and no
device usable by one request is usable by another, the claims fit exactly when each request has at least
``count`` devices that pass the whole per-device funnel (``allocator.funnel.DeviceChecker``: pool, class
and request selectors, taints, not in use, counters and capacity). kube-scheduler's filter only needs
that answer; which devices to take is chosen later, on the nodes that get scored or bound. A count that
says "no" also spares the search its worst case: trying every combination before giving up.

Left to the search (``verdict`` is None): requests sharing devices, a CEL or derived-attribute error on
some device (the search decides whether it reaches that device), devices whose choice is not a plain
yes/no (shares of multi-allocatable devices, devices consuming counters, devices with binding
conditions, devices whose node selector the allocation result could not carry), and "no" on a node
with an invalid pool (the search reports that pool instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocator.diagnose import NoFit, too_few_free, too_few_matching
from allocator.funnel import DeviceChecker, NodeDevice, node_devices
from allocator.inventory import Inventory
from allocator.model import MAX_DEVICES_PER_CLAIM, Claim, DeviceRequest
from allocator.nodeselector import Node
from allocator.search import Allocator
from allocator.selectors import SelectorCache

__all__ = ["Verdict", "countable", "verdict"]

_SEARCH_DECIDES = frozenset({"cel-error", "capacity-error"})
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
            if alt.mode != "ExactCount" or alt.admin_access:
                return False
            if alt.capacity_requests or alt.derived_attributes:
                return False
            total += alt.count
        if total > MAX_DEVICES_PER_CLAIM:
            return False
    return True


def _plain(nd: NodeDevice) -> bool:
    """Taken whole or not at all (no shares, no counters, no binding conditions), and its allocation
    result can be written: the search rejects the whole pod when the node selector it would copy into
    the result has several terms (``allocator.results``)."""
    device = nd.device
    if device.allow_multiple_allocations or device.consumes_counters or device.binding_conditions:
        return False
    selector = (device if nd.slice.per_device_node_selection else nd.slice).node_selector
    return selector is None or len(selector.terms) == 1


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the claims fit; when they do not, why (the reason ``allocator.diagnose`` gives)."""

    fits: bool
    no_fit: NoFit | None = None


def verdict(
    inventory: Inventory, selectors: SelectorCache, node: Node, claims: Sequence[Claim]
) -> Verdict | None:
    """Whether ``claims`` (``countable``) fit together on ``node``, exactly as the search would find, or
    None when the search must decide. Raises what the search raises for the claims themselves
    (AllocatorError: fatal for the pod), so a fatal claim is never decided here."""
    Allocator(inventory, selectors).validate(claims)
    devices = list(node_devices(inventory, node))
    if not all(_plain(nd) for nd in devices):
        return None
    requests = [(claim, alt) for claim in claims for r in claim.requests for alt in r.alternatives]
    checker = DeviceChecker(inventory, selectors, node)
    taken: set[int] = set()
    short: tuple[Claim, DeviceRequest] | None = None
    for claim, alt in requests:
        usable = 0
        for nd in devices:
            if checker.in_use(alt, nd.device):
                continue
            rejection = checker.check(claim, alt, nd)
            if rejection is not None:
                if rejection.rule in _SEARCH_DECIDES:
                    return None
                continue
            if id(nd.device) in taken:
                return None  # two requests could use this device: which gets it is the search's job
            taken.add(id(nd.device))
            usable += 1
        if short is None and usable < alt.count:
            short = (claim, alt)
    if short is None:
        return Verdict(True)
    # With no fit, the search reports an invalid pool it passed over (NodeLocalError) instead.
    if any(nd.pool.invalid for nd in devices):
        return None
    no_fit = _short_of_devices(checker, node, devices, *short)
    return None if no_fit is None else Verdict(False, no_fit)


def _short_of_devices(
    checker: DeviceChecker, node: Node, devices: list[NodeDevice], claim: Claim, alt: DeviceRequest
) -> NoFit | None:
    """Why the first short request falls short (``diagnose``'s first reasons), or None when it is short
    only at counters / capacity (the full funnel words that)."""
    matching = tolerated = free = 0
    for nd in devices:
        rejection = checker.check(claim, alt, nd, last="tolerations")
        if rejection is None:
            matching += 1
            tolerated += 1
            free += not checker.in_use(alt, nd.device)
        elif rejection.stage == "tolerations":
            matching += 1
    if matching < alt.count:
        ignored = checker.inventory.ignored_slices(node)
        return too_few_matching(claim, alt.name, alt.class_name, matching, alt.count, ignored)
    if free < alt.count:
        return too_few_free(claim, alt.name, matching, tolerated, free, alt.count)
    return None
