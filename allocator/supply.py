"""Whether a node's devices could ever cover what the requests of all claims ask for at once.

A bound for the search (``allocator.search``), not a decision: each request is reduced to how many devices
it needs at least and which devices it might take (ignoring constraints, counters and taints, which only
take devices away). Distinct requests never share a device that is not multi-allocatable, so the requests
can be served only if every group of them might take enough different devices between them (Hall's
condition). A bipartite matching answers that for every group at once.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence

__all__ = ["falls_short"]


def falls_short(demands: Sequence[tuple[int, Collection[Hashable]]], shareable: Collection[Hashable]) -> bool:
    """Whether no assignment gives each demand ``(count, devices)`` ``count`` devices of its own from
    ``devices``. A ``shareable`` device serves any number of demands, so a demand that might take one is
    never short."""
    exclusive = [(count, devices) for count, devices in demands if not any(d in shareable for d in devices)]
    if any(count > len(devices) for count, devices in exclusive):
        return True
    slots = [devices for count, devices in exclusive for _ in range(count)]
    holder: dict[Hashable, int] = {}

    def place(slot: int, seen: set[Hashable]) -> bool:
        # An augmenting path: take a free device, or one whose holder can move to another device.
        for device in slots[slot]:
            if device in seen:
                continue
            seen.add(device)
            current = holder.get(device)
            if current is None or place(current, seen):
                holder[device] = slot
                return True
        return False

    return not all(place(slot, set()) for slot in range(len(slots)))
