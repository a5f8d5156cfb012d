"""A synthetic cluster for benchmarks: N nodes x M GPUs, NICs on the GPUs' PCIe roots, several drivers.

Shapes follow the constructed fixtures (NVIDIA H100 nodes: ``gpu.nvidia.com`` devices ``gpu-<i>`` with
``type``, ``productName``, ``cudaComputeCapability`` (version), ``resource.kubernetes.io/pcieRoot`` and
``numaNode``, capacity ``memory``; DRANET NICs sharing the roots; a second accelerator driver on every
tenth node). Every node's GPUs are split over two NUMA nodes and two GPUs share a PCIe root; a few GPUs
carry a NoSchedule taint. Output: API-shaped dicts, deterministic for a seed.

Options for the other benchmarks: ``Shape.layout = "mixed"`` publishes a mixed fleet's GPU attributes
instead (for CEL costs, see ``Shape``); ``node_objects`` gives the nodes and slices without the classes;
``request`` and ``gpu_pod(..., requests=, constraints=)`` build claims with selectors, several requests
(GPUs and NICs) and ``matchAttribute`` constraints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "GPU_CLASS",
    "GPU_DRIVER",
    "MIXED_DRIVER",
    "NAMESPACE",
    "NIC_CLASS",
    "NIC_DRIVER",
    "NUMA",
    "PCIE_ROOT",
    "Shape",
    "cluster_objects",
    "device_class",
    "gpu_pod",
    "node_name",
    "node_objects",
    "request",
]

GPU_DRIVER = "gpu.nvidia.com"
MIXED_DRIVER = "gpu.example.com"
"""The driver publishing the GPUs of the ``"mixed"`` layout."""
NIC_DRIVER = "dra.net"
ACCEL_DRIVER = "gaudi.intel.com"
GPU_CLASS = "gpu.nvidia.com"
NIC_CLASS = "dra.net"
ACCEL_CLASS = "gaudi.intel.com"
NAMESPACE = "bench"
NUMA = "resource.kubernetes.io/numaNode"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


@dataclass(frozen=True, slots=True)
class Shape:
    """How big the cluster is: ``nodes`` x ``gpus`` per node, ``nics`` per GPU node (0..gpus/2)."""

    nodes: int
    gpus: int
    nics: int = 4
    tainted_every: int = 97
    """Every n-th GPU (cluster-wide) carries a NoSchedule taint; 0 for none."""
    accelerator_every: int = 10
    """Every n-th node publishes 4 devices of a second accelerator driver; 0 for none."""
    layout: Literal["nvidia", "mixed"] = "nvidia"
    """GPU attributes: ``"nvidia"`` as the module docstring says (driver ``GPU_DRIVER``, what the classes
    of ``cluster_objects`` select), or ``"mixed"``: a mixed fleet under ``MIXED_DRIVER`` with ``model``
    (H100, every fourth A100), ``driverVersion`` (a version, 550-552.x), ``numa`` (index // 4), ``uuid`` and
    capacity ``memory`` (40Gi and 80Gi alternating), for CEL selectors on strings, quantities and versions."""

    @property
    def gpu_driver(self) -> str:
        return MIXED_DRIVER if self.layout == "mixed" else GPU_DRIVER


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def _attr(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def _gpu(shape: Shape, node: int, index: int, tainted: bool) -> dict[str, Any]:
    """GPU ``index`` of ``node``: NUMA node 0 for the first half, PCIe root ``index // 2``."""
    uuid = _attr(f"GPU-{node:05d}-{index:02d}")
    memory = "80Gi"
    if shape.layout == "mixed":
        attributes = {
            "model": _attr("H100" if (node + index) % 4 else "A100"),
            "driverVersion": {"version": f"{550 + index % 3}.{node % 10}.0"},
            "numa": _attr(index // 4),
            "uuid": uuid,
        }
        memory = "80Gi" if index % 2 else "40Gi"
    else:
        attributes = {
            "type": _attr("gpu"),
            "productName": _attr("NVIDIA H100 80GB HBM3"),
            "uuid": uuid,
            "cudaComputeCapability": {"version": "9.0.0"},
            PCIE_ROOT: _attr(f"pci0000:{index // 2:02x}"),
            NUMA: _attr(0 if index < shape.gpus // 2 else 1),
        }
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }
    if tainted:
        device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    return device


def _nic(index: int, per_node_gpus: int) -> dict[str, Any]:
    root = index  # NIC i sits on PCIe root i, shared with GPUs 2i and 2i+1
    return {
        "name": f"nic-{index}",
        "attributes": {
            "rdma": _attr(True),
            "ifName": _attr(f"ib{index}"),
            PCIE_ROOT: _attr(f"pci0000:{root:02x}"),
            NUMA: _attr(0 if 2 * index < per_node_gpus // 2 else 1),
        },
    }


def _slice(name: str, driver: str, node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(name: str, expression: str) -> dict[str, Any]:
    """A DeviceClass selecting the devices on which the CEL ``expression`` is true."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def cluster_objects(shape: Shape) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, object) pairs: DeviceClasses, a claim template, then ``node_objects``."""
    yield (
        "DeviceClass",
        device_class(
            GPU_CLASS, f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'"
        ),
    )
    yield (
        "DeviceClass",
        device_class(NIC_CLASS, f"device.driver == '{NIC_DRIVER}' && device.attributes['{NIC_DRIVER}'].rdma"),
    )
    yield "DeviceClass", device_class(ACCEL_CLASS, f"device.driver == '{ACCEL_DRIVER}'")
    yield (
        "ResourceClaimTemplate",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}
                }
            },
        },
    )
    yield from node_objects(shape)


def node_objects(shape: Shape) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, object) pairs: per node a Node, its GPU slice and (as ``shape`` says) NIC and accelerator
    slices; one pool per slice, named after the node."""
    gpu_index = 0
    for n in range(shape.nodes):
        name = node_name(n)
        yield (
            "Node",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            },
        )
        gpus = []
        for i in range(shape.gpus):
            gpu_index += 1
            gpus.append(_gpu(shape, n, i, bool(shape.tainted_every) and gpu_index % shape.tainted_every == 0))
        yield "ResourceSlice", _slice(f"{name}-gpu", shape.gpu_driver, name, gpus)
        if shape.nics:
            yield (
                "ResourceSlice",
                _slice(f"{name}-nic", NIC_DRIVER, name, [_nic(i, shape.gpus) for i in range(shape.nics)]),
            )
        if shape.accelerator_every and n % shape.accelerator_every == shape.accelerator_every - 1:
            accel = [{"name": f"accel-{i}", "attributes": {"model": _attr("Gaudi3")}} for i in range(4)]
            yield "ResourceSlice", _slice(f"{name}-accel", ACCEL_DRIVER, name, accel)


def request(
    name: str, device_class: str = GPU_CLASS, count: int = 1, selectors: Sequence[str] = ()
) -> dict[str, Any]:
    """One request of a claim: exactly ``count`` devices of ``device_class``, each matching every CEL
    expression of ``selectors``."""
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def gpu_pod(
    index: int,
    gpus: int = 1,
    *,
    requests: Sequence[dict[str, Any]] | None = None,
    constraints: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pending pod ``pod-<index>`` and its (unallocated) ResourceClaim ``pod-<index>-gpu``, asking for
    ``gpus`` GPUs of one class, or for ``requests`` instead (see ``request``); every attribute named in
    ``constraints`` must have one value over the devices of all requests (``matchAttribute``)."""
    name = f"pod-{index:06d}"
    uid = f"00000000-0000-4000-8000-{index:012d}"
    devices: dict[str, Any] = {
        "requests": list(requests) if requests is not None else [request("gpu", GPU_CLASS, gpus)]
    }
    if constraints:
        devices["constraints"] = [{"matchAttribute": attribute} for attribute in constraints]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{name}-gpu",
            "namespace": NAMESPACE,
            "uid": f"claim-{uid}",
            "resourceVersion": "1",
        },
        "spec": {"devices": devices},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "creationTimestamp": f"2026-01-01T00:00:{index % 60:02d}Z",
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/app:1",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
        },
        "status": {"phase": "Pending"},
    }
    return pod, claim
