"""Nodes with device topology for the placement scenarios (``make bench-placement`` and
``tests/e2e/test_placement.py``): per node 8 GPUs over 2 NUMA nodes and 4 PCIe roots and one NIC on each
root, published by two drivers as ``examples/cluster`` publishes them (NVIDIA's GPU driver and DRANET, the
standard ``resource.kubernetes.io/numaNode`` / ``pcieRoot`` attributes); claim templates asking for GPUs,
with a NIC and a ``matchAttribute`` constraint or without; and where a claim's devices sit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from e2e.workload import Scenario

NUMA = "resource.kubernetes.io/numaNode"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
GPUS, NICS = 8, 4
ROOTS = ("pci0000:15", "pci0000:48", "pci0000:97", "pci0000:c7")
"""examples/cluster's roots: GPUs 2r and 2r+1 and NIC r on root r; NUMA node 0 holds roots 0 and 1."""

SLICE_ORDERS = ("numa", "interleaved")
"""How a node's GPU slice lists its devices: ``numa`` as drivers enumerate them (gpu-0..gpu-7, NUMA node 0
first, as examples/cluster); ``interleaved`` alternates the NUMA nodes (gpu-0, gpu-4, gpu-1, gpu-5, ...),
as a driver listing devices in another order than the topology would."""


def gpu_numa(index: int) -> int:
    return index // (GPUS // 2)


def gpu_root(index: int) -> int:
    return index // (GPUS // NICS)


def nic_driver(sc: Scenario) -> str:
    return sc.driver.replace(".gpu.", ".nic.")


def nic_class(sc: Scenario) -> str:
    return f"{sc.name}-nic"


def _attributes(root: int) -> dict[str, Any]:
    return {PCIE_ROOT: {"string": ROOTS[root]}, NUMA: {"int": root * 2 // NICS}}


def gpu_order(order: str) -> list[int]:
    """GPU indices in the slice's order (``SLICE_ORDERS``)."""
    if order == "numa":
        return list(range(GPUS))
    if order == "interleaved":
        half = GPUS // 2
        return [i // 2 + (i % 2) * half for i in range(GPUS)]
    raise ValueError(f"slice order: one of {', '.join(SLICE_ORDERS)}, got {order!r}")


def node_slices(sc: Scenario, node: str, order: str = "numa") -> list[dict[str, Any]]:
    """The node's GPU slice (devices ``gpu-<i>`` in ``order``) and NIC slice (``nic-<r>`` on root r)."""
    gpus = [
        {"name": f"gpu-{i}", "attributes": {"index": {"int": i}, **_attributes(gpu_root(i))}}
        for i in gpu_order(order)
    ]
    nics = [{"name": f"nic-{r}", "attributes": _attributes(r)} for r in range(NICS)]
    return [
        _slice(f"{node}-gpus", sc.driver, node, gpus),
        _slice(f"{node}-nics", nic_driver(sc), node, nics),
    ]


def _slice(name: str, driver: str, node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def add_topology_nodes(sc: Scenario, count: int, order: str = "numa") -> list[str]:
    """``count`` nodes of this module's shape, and the NIC driver's DeviceClass (once per scenario)."""
    if nic_class(sc) not in sc.device_classes:
        sc.add_device_class(nic_class(sc), driver=nic_driver(sc))
    return sc.add_nodes(count, 0, slices=lambda node: node_slices(sc, node, order))


@dataclass(frozen=True)
class Shape:
    """What a claim template asks for: ``gpus`` GPUs, ``nics`` NICs, all on one value of ``constraint``
    (``NUMA``, ``PCIE_ROOT``; None: no constraint)."""

    gpus: int
    nics: int = 0
    constraint: str | None = None


def add_shape_template(sc: Scenario, name: str, shape: Shape) -> None:
    requests = [{"name": "gpus", "exactly": {"deviceClassName": sc.device_class, "count": shape.gpus}}]
    if shape.nics:
        requests.append({"name": "nics", "exactly": {"deviceClassName": nic_class(sc), "count": shape.nics}})
    devices: dict[str, Any] = {"requests": requests}
    if shape.constraint:
        devices["constraints"] = [{"matchAttribute": shape.constraint}]
    sc.kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": sc.namespace},
            "spec": {"spec": {"devices": devices}},
        }
    )


@dataclass(frozen=True)
class Held:
    """The devices one claim holds on its node: GPU and NIC indices."""

    node: str
    gpus: tuple[int, ...]
    nics: tuple[int, ...]

    @property
    def numa_nodes(self) -> set[int]:
        return {gpu_numa(g) for g in self.gpus}

    @property
    def roots(self) -> set[int]:
        return {gpu_root(g) for g in self.gpus}


def held(claim: dict[str, Any]) -> Held | None:
    """What an allocated claim of this module's devices holds (None: not allocated)."""
    allocation = claim.get("status", {}).get("allocation")
    if not allocation:
        return None
    gpus: list[int] = []
    nics: list[int] = []
    pools = set()
    for result in allocation["devices"]["results"]:
        kind, _, index = result["device"].partition("-")
        (gpus if kind == "gpu" else nics).append(int(index))
        pools.add(result["pool"])
    (node,) = pools
    return Held(node, tuple(sorted(gpus)), tuple(sorted(nics)))


def claim_owner(claim: dict[str, Any]) -> str | None:
    """The pod a template's claim was generated for."""
    for owner in claim["metadata"].get("ownerReferences", []):
        if owner["kind"] == "Pod":
            return str(owner["name"])
    return None
