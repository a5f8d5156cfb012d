"""Tiny builders of API-shaped objects for allocator tests (the upstream table test's style)."""

from __future__ import annotations

from typing import Any

from allocator.alignment import NUMA_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE
from allocator.cel.expr_engine import ExprEngine
from allocator.deviceuse import allocated_devices
from allocator.features import FeatureGates
from allocator.inventory import Inventory
from allocator.model import (
    Claim,
    parse_claim,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_slice,
)
from allocator.nodeselector import Node
from allocator.search import Allocator
from allocator.selectors import SelectorCache

DRIVER_A = "driver-a.example.com"
DRIVER_B = "driver-b.example.com"
CLASS_A = "class-a"
CLASS_B = "class-b"
NODE1 = Node("node-1", {"kubernetes.io/hostname": "node-1", "zone": "z1"})
NODE2 = Node("node-2", {"kubernetes.io/hostname": "node-2", "zone": "z2"})

_ENGINE = ExprEngine()

STABLE = FeatureGates(
    DRAConsumableCapacity=False,
    DRADeviceBindingConditions=False,
    DRAResourceClaimDeviceStatus=False,
    DRAFractionalCapacityRange=False,
    DRADerivedAttributes=False,
)
"""Gates under which kube-scheduler runs upstream's stable allocator (``FeatureGates.stable_allocator``)."""


def device(name: str, **attributes: Any) -> dict[str, Any]:
    """A device; keyword attributes become typed attribute values (int, bool, str)."""
    typed = {}
    for key, value in attributes.items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        typed[key.replace("__", "/")] = {kind: value}
    return {"name": name, "attributes": typed}


NUMA = NUMA_ATTRIBUTE.replace("/", "__")
"""``device()`` keyword of the standard NUMA node attribute."""
ROOT = PCIE_ROOT_ATTRIBUTE.replace("/", "__")
"""``device()`` keyword of the standard PCIe root attribute."""


def topology_gpu(i: int, *, numa: bool = True, root: bool = True) -> dict[str, Any]:
    """GPU ``gpu-<i>`` of the topology tests' node: NUMA node i // 4, PCIe root ``p<i // 2>``."""
    attrs: dict[str, Any] = {}
    if numa:
        attrs[NUMA] = i // 4
    if root:
        attrs[ROOT] = f"p{i // 2}"
    return device(f"gpu-{i}", **attrs)


def topology_nic(i: int) -> dict[str, Any]:
    """NIC ``nic-<i>`` of the topology tests' node: NUMA node i // 2, PCIe root ``p<i>``."""
    return device(f"nic-{i}", **{NUMA: i // 2, ROOT: f"p{i}"})


def slice_(
    name: str,
    driver: str,
    pool: str,
    devices: list[dict[str, Any]],
    *,
    node: str | None = "node-1",
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": devices,
    }
    if node is not None:
        body["nodeName"] = node
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def device_class(name: str, *expressions: str, config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = config
    return {"metadata": {"name": name}, "spec": spec}


def request(
    name: str, class_name: str = CLASS_A, count: int | None = None, mode: str | None = None, **fields: Any
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": class_name, **fields}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    return {"name": name, "exactly": exactly}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    namespace: str = "default",
) -> Claim:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return parse_claim(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"devices": devices},
        }
    )


def result(
    req: str, device_name: str, driver: str = DRIVER_A, pool: str = "node-1", **extra: Any
) -> dict[str, Any]:
    return {"request": req, "driver": driver, "pool": pool, "device": device_name, **extra}


def picked(allocations: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    """(request, device) of every result, per claim."""
    return [[(r["request"], r["device"]) for r in a["devices"]["results"]] for a in allocations]


PINNED_NODE1 = {
    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
}


class World:
    """An inventory plus a selector cache, filled from API-shaped dicts."""

    def __init__(
        self,
        *,
        slices: list[dict[str, Any]],
        classes: list[dict[str, Any]] | None = None,
        rules: list[dict[str, Any]] | None = None,
        gates: FeatureGates | None = None,
    ) -> None:
        self.selectors = SelectorCache(_ENGINE)
        # With the selector cache attached, class selectors run through the class-match index (as served).
        self.inventory = Inventory(gates or FeatureGates(), self.selectors)
        for obj in (
            classes
            if classes is not None
            else [
                device_class(CLASS_A, f'device.driver == "{DRIVER_A}"'),
                device_class(CLASS_B, f'device.driver == "{DRIVER_B}"'),
            ]
        ):
            self.inventory.upsert_class(parse_device_class(obj))
        for obj in slices:
            self.inventory.upsert_slice(parse_resource_slice(obj))
        for obj in rules or []:
            self.inventory.upsert_taint_rule(parse_device_taint_rule(obj))

    def allocated(self, claim_key: str, *results: dict[str, Any]) -> World:
        """Mark devices as allocated to another claim."""
        self.inventory.set_allocation(
            claim_key, allocated_devices({"devices": {"results": list(results)}}, "t")
        )
        return self

    def allocate(self, *claims: Claim, node: Node = NODE1) -> list[dict[str, Any]] | None:
        return Allocator(self.inventory, self.selectors).allocate(node, list(claims))
