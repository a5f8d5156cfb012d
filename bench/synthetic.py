"""A synthetic cluster for benchmarks: N nodes x M GPUs, NICs on the GPUs' PCIe roots, several drivers.

Shapes follow the constructed fixtures (NVIDIA H100 nodes: ``gpu.nvidia.com`` devices ``gpu-<i>`` with
``type``, ``productName``, ``cudaComputeCapability`` (version), ``resource.kubernetes.io/pcieRoot`` and
``numaNode``, capacity ``memory``; DRANET NICs sharing the roots; a second accelerator driver on every
tenth node). Every node's GPUs are split over two NUMA nodes and two GPUs share a PCIe root; a few GPUs
carry a NoSchedule taint. Output: API-shaped dicts, deterministic for a seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["GPU_CLASS", "NIC_CLASS", "Shape", "cluster_objects", "gpu_pod", "node_name"]

GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
ACCEL_DRIVER = "gaudi.intel.com"
GPU_CLASS = "gpu.nvidia.com"
NIC_CLASS = "dra.net"
ACCEL_CLASS = "gaudi.intel.com"
NAMESPACE = "bench"


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


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def _attr(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def _gpu(node: int, index: int, per_node: int, tainted: bool) -> dict[str, Any]:
    numa = 0 if index < per_node // 2 else 1
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {
            "type": _attr("gpu"),
            "productName": _attr("NVIDIA H100 80GB HBM3"),
            "uuid": _attr(f"GPU-{node:05d}-{index:02d}"),
            "cudaComputeCapability": {"version": "9.0.0"},
            "resource.kubernetes.io/pcieRoot": _attr(f"pci0000:{index // 2:02x}"),
            "resource.kubernetes.io/numaNode": _attr(numa),
        },
        "capacity": {"memory": {"value": "80Gi"}},
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
            "resource.kubernetes.io/pcieRoot": _attr(f"pci0000:{root:02x}"),
            "resource.kubernetes.io/numaNode": _attr(0 if 2 * index < per_node_gpus // 2 else 1),
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


def _class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def cluster_objects(shape: Shape) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, object) pairs: DeviceClasses, a claim template, then per node a Node and its slices."""
    yield (
        "DeviceClass",
        _class(
            GPU_CLASS, f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'"
        ),
    )
    yield (
        "DeviceClass",
        _class(NIC_CLASS, f"device.driver == '{NIC_DRIVER}' && device.attributes['{NIC_DRIVER}'].rdma"),
    )
    yield "DeviceClass", _class(ACCEL_CLASS, f"device.driver == '{ACCEL_DRIVER}'")
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
            gpus.append(
                _gpu(n, i, shape.gpus, bool(shape.tainted_every) and gpu_index % shape.tainted_every == 0)
            )
        yield "ResourceSlice", _slice(f"{name}-gpu", GPU_DRIVER, name, gpus)
        if shape.nics:
            yield (
                "ResourceSlice",
                _slice(f"{name}-nic", NIC_DRIVER, name, [_nic(i, shape.gpus) for i in range(shape.nics)]),
            )
        if shape.accelerator_every and n % shape.accelerator_every == shape.accelerator_every - 1:
            accel = [{"name": f"accel-{i}", "attributes": {"model": _attr("Gaudi3")}} for i in range(4)]
            yield "ResourceSlice", _slice(f"{name}-accel", ACCEL_DRIVER, name, accel)


def gpu_pod(index: int, gpus: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pending pod and its (unallocated) ResourceClaim asking for ``gpus`` GPUs of one class."""
    name = f"pod-{index:06d}"
    uid = f"00000000-0000-4000-8000-{index:012d}"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{name}-gpu",
            "namespace": NAMESPACE,
            "uid": f"claim-{uid}",
            "resourceVersion": "1",
        },
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": gpus}}]
            }
        },
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
