"""Devices of each DeviceClass on a node: how many, how many in use or tainted, how fragmented the rest is
(the utilisation summary of ``dra-extender simulate``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from allocator.devicerules import device_label
from allocator.funnel import class_matches, node_devices
from allocator.inventory import Inventory
from allocator.model import Device
from allocator.nodeselector import Node
from allocator.selectors import SelectorCache

__all__ = ["ClassUsage", "class_usage"]


@dataclass(frozen=True, slots=True)
class ClassUsage:
    """Devices of one DeviceClass on one node: how many, how many in use, and how fragmented the rest is.

    ``groups_free`` / ``groups_total``: aligned groups (NUMA nodes, or PCIe roots when no NUMA is
    published) whose devices of the class are all free. ``largest_free_group``: free devices of the
    class on the best single NUMA node (or root); 0 when the devices publish no topology."""

    node: str
    device_class: str
    total: int
    in_use: int
    tainted: int
    groups_total: int
    groups_free: int
    largest_free_group: int

    @property
    def free(self) -> int:
        return self.total - self.in_use


def class_usage(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    group_of: Mapping[str, object] | None = None,
    classes: Iterable[str] | None = None,
) -> list[ClassUsage]:
    """Per DeviceClass with at least one device on ``node`` (or the given ``classes``), its usage.

    ``group_of``: device label → aligned group key (``allocator.alignment.Topology.group``); without it
    the fragmentation columns are zero."""
    group_of = group_of or {}
    names = list(classes) if classes is not None else sorted(c.name for c in inventory.device_classes())
    devices = [nd for nd in node_devices(inventory, node) if nd.pool.usable]
    usage = []
    for name in names:
        members = [nd.device for nd in devices if class_matches(selectors, inventory, name, nd.device)]
        if not members:
            continue
        in_use = sum(1 for d in members if inventory.is_allocated(d.id))
        tainted = (
            sum(1 for d in members if any(t.blocks_allocation for t in inventory.taints(d)))
            if inventory.gates.DRADeviceTaints
            else 0
        )
        groups: dict[object, list[Device]] = defaultdict(list)
        for d in members:
            key = group_of.get(device_label(d))
            if key is not None:
                groups[key].append(d)
        free_sizes = {k: sum(1 for d in g if not inventory.is_allocated(d.id)) for k, g in groups.items()}
        usage.append(
            ClassUsage(
                node=node.name,
                device_class=name,
                total=len(members),
                in_use=in_use,
                tainted=tainted,
                groups_total=len(groups),
                groups_free=sum(1 for k, g in groups.items() if free_sizes[k] == len(g)),
                largest_free_group=max(free_sizes.values(), default=0),
            )
        )
    return usage
