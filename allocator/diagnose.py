"""Why claims do not fit on a node: one line per node, and whether waiting could ever help.

Runs only after the search found no allocation. Per request (each ``firstAvailable`` alternative) it
counts the node's devices through the funnel of ``allocator.funnel`` (the search's own checks): in
usable pools, matching the class and request selectors, tolerated taints, not in use; and names the first
request that cannot be met. When every request has enough such devices, the full funnel names the request
that runs short at counters / capacity or constraints. A node whose devices could never match a request
(too few match the selectors at all) is *unresolvable*: freeing devices would not help, so kube-scheduler
should not try preemption there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocator.funnel import RequestFunnel, claim_funnels, request_funnel
from allocator.inventory import Inventory
from allocator.model import Claim
from allocator.nodeselector import Node
from allocator.selectors import SelectorCache

__all__ = ["NoFit", "RequestFunnel", "diagnose", "request_funnel", "too_few_free", "too_few_matching"]


@dataclass(frozen=True, slots=True)
class NoFit:
    """The reason a node failed and whether it can never fit (``unresolvable``)."""

    reason: str
    unresolvable: bool


def too_few_matching(
    claim: Claim, request: str, device_class: str, matching: int, needed: int, ignored: Sequence[str] = ()
) -> NoFit:
    """Fewer devices match the class and request selectors than needed: unresolvable. ``ignored``: why
    slices for the node were left out (a gate is off), since their devices count for nothing."""
    return NoFit(
        f"claim {claim.key}, request {request}: node has {matching} device(s) of class {device_class} "
        f"matching the selectors, {needed} needed" + (f" ({'; '.join(ignored)})" if ignored else ""),
        True,
    )


def too_few_free(claim: Claim, request: str, matching: int, tolerated: int, free: int, needed: int) -> NoFit:
    """Of the ``matching`` devices, ``tolerated`` pass the taints and ``free`` of those are not in use,
    fewer than needed; unresolvable when none is in use (freeing devices would not help)."""
    in_use = tolerated - free
    return NoFit(
        f"claim {claim.key}, request {request}: {free} of {matching} matching device(s) usable "
        f"({in_use} in use, {matching - tolerated} tainted), {needed} needed",
        in_use == 0,
    )


def diagnose(inventory: Inventory, selectors: SelectorCache, node: Node, claims: Sequence[Claim]) -> NoFit:
    """The one-line reason the claims do not fit on ``node`` (after the search said so)."""
    for claim in claims:
        for request in claim.requests:
            funnels = [
                request_funnel(inventory, selectors, node, claim, alt, last="not_in_use", examples=0)
                for alt in request.alternatives
            ]
            first = funnels[0]  # the reason names the first alternative
            if all(f.count("request_selectors") < f.needed for f in funnels):
                return too_few_matching(
                    claim,
                    first.request,
                    first.device_class,
                    first.count("request_selectors"),
                    first.needed,
                    inventory.ignored_slices(node),
                )
            if all(f.count("not_in_use") < f.needed for f in funnels):
                counts = (
                    first.count("request_selectors"),
                    first.count("tolerations"),
                    first.count("not_in_use"),
                )
                return too_few_free(claim, first.request, *counts, first.needed)
    for claim in claims:
        funnels = claim_funnels(inventory, selectors, node, claim, examples=1)
        by_request: dict[str, list[RequestFunnel]] = {}
        for f in funnels:
            by_request.setdefault(f.request.partition("/")[0], []).append(f)
        for alternatives in by_request.values():
            if not all(f.short for f in alternatives):
                continue
            f = alternatives[0]
            stage = f.stage(f.short)
            example = stage.examples[0] if stage.examples else None
            return NoFit(
                f"claim {claim.key}, request {f.request}: {stage.count} device(s) left after "
                f"{stage.title}, {f.needed} needed"
                + (f" ({example.device}: {example.message})" if example else ""),
                False,
            )
    return NoFit(
        "the claims cannot be satisfied together on this node (constraints, counters or capacity)", False
    )
