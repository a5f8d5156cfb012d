"""What a claim holds and what a node offers, as the extender sees them (read-only, under the lock).

``claim_view``: a ResourceClaim with its allocation (``status.allocation``), ``status.devices``,
``status.reservedFor``, the nodes its allocation's ``nodeSelector`` admits and the devices the index counts
it as holding. ``node_devices_view``: every device visible from a node (attributes, capacity, taints and
whether a DeviceTaintRule set them, holders), the counters left per shared counter set, and per
DeviceClass the utilisation. Raise NotFound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.cel import Version
from allocator.classusage import class_usage
from allocator.funnel import (
    counters_left,
    node_devices,
    taint_source,
)
from allocator.nodeselector import Node, parse_node_selector
from allocator.quantity import format_like
from app.explain.models import (
    CapacityModel,
    ClaimView,
    ClassUsageModel,
    CounterConsumptionModel,
    CounterModel,
    CounterSetModel,
    DeviceInfo,
    DeviceStatusModel,
    NodeDevices,
    NotFound,
    PoolInfo,
    ResultDevice,
    TaintModel,
    optional_text,
)
from app.scheduling.service import SchedulingService
from app.state.podclaims import claim_names

__all__ = ["claim_view", "known_nodes", "node_devices_view"]


def known_nodes(service: SchedulingService) -> list[Node]:
    """The nodes of the state the inventory knows, sorted by name (call under the service lock)."""
    return [
        n for name in sorted(service.state.objects["Node"]) if (n := service.state.node(name)) is not None
    ]


def _json_value(value: Any) -> Any:
    if isinstance(value, Version):
        return value.text
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def _result_device(entry: Mapping[str, Any]) -> ResultDevice:
    return ResultDevice(
        request=str(entry.get("request") or ""),
        driver=str(entry.get("driver") or ""),
        pool=str(entry.get("pool") or ""),
        device=str(entry.get("device") or ""),
        adminAccess=entry.get("adminAccess") is True,
        shareID=entry.get("shareID"),
        consumedCapacity=entry.get("consumedCapacity"),
    )


def claim_view(service: SchedulingService, namespace: str, name: str) -> ClaimView:
    """The claim ``namespace/name`` with its allocation, status.devices, holders. Raises NotFound."""
    key = f"{namespace}/{name}"
    with service.lock:
        obj = service.state.get("ResourceClaim", key)
        if obj is None:
            raise NotFound(f"resourceclaim {key} not found")
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        allocation = status.get("allocation") or None
        available: list[str] = []
        if allocation:
            selector = allocation.get("nodeSelector")
            parsed = parse_node_selector(selector, f"ResourceClaim {key}: nodeSelector") if selector else None
            available = [n.name for n in known_nodes(service) if parsed is None or parsed.matches(n)]
        results = ((allocation or {}).get("devices") or {}).get("results") or []
        holds = sorted(
            "/".join(d)
            for d in {(r.get("driver"), r.get("pool"), r.get("device")) for r in results}
            if key in service.state.inventory.holders(d)
        )
        return ClaimView(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            resourceVersion=str(meta.get("resourceVersion") or ""),
            spec=dict(obj.get("spec") or {}),
            allocated=bool(allocation),
            results=[_result_device(r) for r in results],
            allocation=dict(allocation) if allocation else None,
            availableOn=available,
            reservedFor=list(status.get("reservedFor") or []),
            devices=[DeviceStatusModel.model_validate(d) for d in status.get("devices") or []],
            usedBy=_pods_using(service, namespace, name),
            holdsDevices=holds,
        )


def _pods_using(service: SchedulingService, namespace: str, name: str) -> list[str]:
    return [
        key
        for key, pod in sorted(service.state.objects["Pod"].items())
        if ((pod.get("metadata") or {}).get("namespace") or "default") == namespace
        and name in claim_names(pod)
    ]


def node_devices_view(service: SchedulingService, name: str) -> NodeDevices:
    """Every device visible from node ``name``: attributes, capacity, taints and their source, holders,
    counters left per pool, and per-class utilisation. Raises NotFound."""
    with service.lock:
        node = service.state.node(name)
        if node is None:
            raise NotFound(f"node {name} not found")
        inventory, topology = service.state.inventory, service.scoring.topology
        pools = []
        for pool in inventory.pools_for(node):
            left = counters_left(inventory, pool)
            pools.append(
                PoolInfo(
                    driver=pool.driver,
                    pool=pool.pool,
                    generation=pool.generation,
                    slices=[s.name for s in pool.slices],
                    usable=pool.usable,
                    incomplete=pool.incomplete,
                    invalid=pool.invalid,
                    counterSets=[
                        CounterSetModel(
                            name=set_name,
                            counters={
                                c: CounterModel(value=q.text, left=format_like(left[set_name][c], q))
                                for c, q in sorted(counters.items())
                            },
                        )
                        for set_name, counters in sorted(pool.counter_sets.items())
                    ],
                )
            )
        devices = []
        members = []
        for nd in node_devices(inventory, node):
            device = nd.device
            members.append(device)
            consumed = inventory.consumed_capacity(device.id)
            devices.append(
                DeviceInfo(
                    driver=device.driver,
                    pool=device.pool,
                    device=device.name,
                    slice=nd.slice.name,
                    attributes={k: _json_value(v) for k, v in sorted(device.attributes.items())},
                    capacity={
                        k: CapacityModel(
                            value=c.value.text,
                            consumed=format_like(consumed[k], c.value) if k in consumed else None,
                        )
                        for k, c in sorted(device.capacity.items())
                    },
                    taints=[
                        TaintModel(
                            key=t.key,
                            value=t.value,
                            effect=t.effect,
                            source=taint_source(t, nd.slice.name),
                            blocksAllocation=t.blocks_allocation,
                        )
                        for t in inventory.taints(device)
                    ],
                    allocatedTo=inventory.holders(device.id),
                    inUse=inventory.is_allocated(device.id),
                    allowMultipleAllocations=device.allow_multiple_allocations,
                    derivedAttributeErrors=inventory.derivation_errors_of(device),
                    consumesCounters=[
                        CounterConsumptionModel(
                            counterSet=c.counter_set,
                            counters={k: q.text for k, q in sorted(c.counters.items())},
                        )
                        for c in device.consumes_counters
                    ],
                    numaNode=optional_text(topology.numa(device)),
                    pcieRoot=sorted(map(str, topology.roots(device))),
                )
            )
        usage = class_usage(inventory, service.selectors, node, topology.groups(members))
        return NodeDevices(
            node=name,
            labels=dict(node.labels),
            pools=pools,
            devices=devices,
            usage=[
                ClassUsageModel(
                    deviceClass=u.device_class,
                    total=u.total,
                    inUse=u.in_use,
                    free=u.free,
                    tainted=u.tainted,
                    groups=u.groups_total,
                    wholeFreeGroups=u.groups_free,
                    largestFreeGroup=u.largest_free_group,
                )
                for u in usage
            ],
        )
