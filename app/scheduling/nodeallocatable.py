"""Node-allocatable resources through DRA (gate ``DRANodeAllocatableResources``, alpha, off).

A device may publish ``nodeAllocatableResources``: per node resource (cpu, memory, ephemeral-storage,
hugepages-*) a ``mapping`` (the device *is* that resource: ``deviceMultiplier`` per allocated device, or
``consumedCapacity[capacityKey]`` times ``capacityMultiplier``) and/or an ``overhead`` (``perPod`` plus
``perContainer`` per container referencing the claim). As upstream's DynamicResources plugin
(``nodeallocatabledynamicresources.go``):

* per claim of the pod with such a device, a ``NodeAllocatableResourceClaimStatus``: the claim name, the
  pod's containers (init containers first) referencing it, mapped quantities and overheads summed over
  its devices, sorted by resource name; statuses sorted by claim name;
* the pod's demand is its requests (containers summed, init containers as the peak, sidecars added,
  pod-level requests where set, ``overhead``) plus every status (mapping, ``perPod``, ``perContainer`` times
  containers); it must fit the node's ``status.allocatable`` minus what the node's other pods request
  (theirs counted the same way from ``status.nodeAllocatableResourceClaimStatuses``): ``Insufficient
  cpu``, unresolvable when the demand exceeds the node's allocatable outright;
* a claim with a *mapped* device is not shared: once reserved for another consumer it fails every node;
* the statuses go to ``pod.status.nodeAllocatableResourceClaimStatuses`` at bind, before the binding
  (upstream's PreBind).

The extender's filter runs after kube-scheduler's NodeResourcesFit, which sees only container requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from allocator.errors import InvalidInputError
from allocator.quantity import QuantityError, format_quantity, parse_quantity

__all__ = [
    "ClaimUse",
    "claim_statuses",
    "has_node_allocatable",
    "insufficient",
    "is_mapped",
    "node_requests",
    "pod_demand",
    "shared_mapped_claim",
]

Obj = Mapping[str, Any]

CHECKED = ("cpu", "memory", "ephemeral-storage")
"""Resources checked besides ``hugepages-*`` (upstream ``nodeFitsResources``)."""

_POD_LEVEL = ("cpu", "memory")
"""Pod-level requests that replace the containers' sum (``hugepages-*`` too)."""


class ClaimUse:
    """One claim of the pod on a node: its key, the pod claim name containers reference (None for the
    extended-resource claim), and its allocation result (the new one, or the claim's own)."""

    __slots__ = ("allocation", "key", "pod_claim_name")

    def __init__(self, key: str, pod_claim_name: str | None, allocation: Obj) -> None:
        self.key = key
        self.pod_claim_name = pod_claim_name
        self.allocation = allocation


def _quantity(raw: object, where: str) -> Fraction:
    try:
        return parse_quantity(raw).value
    except QuantityError as e:
        raise InvalidInputError(f"{where}: {e}") from e


def _devices(slices: Iterable[Obj]) -> dict[tuple[Any, Any, Any], Obj]:
    """(driver, pool, device) -> the device as published, for devices with ``nodeAllocatableResources``
    (the names as published: a missing one is None, and matches no allocation result)."""
    found: dict[tuple[Any, Any, Any], Obj] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name")
        for device in spec.get("devices") or ():
            if isinstance(device, Mapping) and device.get("nodeAllocatableResources"):
                found[(spec.get("driver"), pool, device.get("name"))] = device
    return found


def has_node_allocatable(slices: Iterable[Obj]) -> bool:
    """Whether any device of ``slices`` publishes ``nodeAllocatableResources``."""
    return bool(_devices(slices))


def node_requests(pods: Iterable[Obj], nodes: Iterable[str], skip_uid: str) -> dict[str, dict[str, Fraction]]:
    """What the pods bound to each of ``nodes`` request (``pod_demand``), but pod ``skip_uid`` and
    finished pods."""
    totals: dict[str, dict[str, Fraction]] = {n: {} for n in nodes}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in totals or (pod.get("metadata") or {}).get("uid") == skip_uid:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        totals[node] = _sum([totals[node], pod_demand(pod)])
    return totals


def is_mapped(allocation: Obj, slices: Iterable[Obj]) -> bool:
    """Whether an allocated device of ``allocation`` maps (is) a node resource."""
    devices = _devices(slices)
    return any(
        any((r or {}).get("mapping") for r in devices[k]["nodeAllocatableResources"].values())
        for k in _result_keys(allocation)
        if k in devices
    )


def _result_keys(allocation: Obj) -> list[tuple[str, str, str]]:
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return [(r.get("driver"), r.get("pool"), r.get("device")) for r in results]


def claim_statuses(pod: Obj, uses: Sequence[ClaimUse], slices: Iterable[Obj]) -> list[dict[str, Any]]:
    """The pod's ``nodeAllocatableResourceClaimStatuses`` for ``uses`` (module docstring). Raises
    InvalidInputError for a malformed quantity or a capacity key the allocation did not consume."""
    devices = _devices(slices)
    statuses = []
    for use in uses:
        mapped: dict[str, Fraction] = {}
        overhead: dict[str, dict[str, Fraction]] = {}
        results = ((use.allocation or {}).get("devices") or {}).get("results") or ()
        for result in results:
            device = devices.get((result.get("driver"), result.get("pool"), result.get("device")))
            if device is None:
                continue
            where = f"ResourceClaim {use.key}, device {result.get('device')}"
            for name, spec in sorted(device["nodeAllocatableResources"].items()):
                _add_mapping(mapped, name, spec.get("mapping"), result, where)
                for part in ("perPod", "perContainer"):
                    amount = (spec.get("overhead") or {}).get(part)
                    if amount is not None:
                        entry = overhead.setdefault(name, {})
                        entry[part] = entry.get(part, Fraction(0)) + _quantity(amount, f"{where}: {name}")
        if not mapped and not overhead:
            continue
        statuses.append(
            {
                "resourceClaimName": use.key.partition("/")[2],
                "containers": _containers(pod, use.pod_claim_name),
                "mapping": [{"name": n, "quantity": format_quantity(q)} for n, q in sorted(mapped.items())],
                "overhead": [
                    {"name": n, **{k: format_quantity(v) for k, v in parts.items()}}
                    for n, parts in sorted(overhead.items())
                ],
            }
        )
    return sorted(statuses, key=lambda s: s["resourceClaimName"])


def _add_mapping(
    totals: dict[str, Fraction], name: str, mapping: Obj | None, result: Obj, where: str
) -> None:
    if not mapping:
        return
    key = mapping.get("capacityKey")
    if key:
        consumed = result.get("consumedCapacity")
        if consumed is None:
            raise InvalidInputError(
                f"{where}: consumedCapacity is not set, but nodeAllocatableResources.{name} maps "
                f"capacity {key}"
            )
        if key in consumed:  # a capacity this allocation did not consume maps nothing
            multiplier = _quantity(mapping.get("capacityMultiplier", "1"), f"{where}: {name}")
            totals[name] = totals.get(name, Fraction(0)) + _quantity(consumed[key], where) * multiplier
    elif mapping.get("deviceMultiplier") is not None:
        amount = _quantity(mapping["deviceMultiplier"], f"{where}: {name}")
        totals[name] = totals.get(name, Fraction(0)) + amount


def _containers(pod: Obj, pod_claim_name: str | None) -> list[str]:
    spec = pod.get("spec") or {}
    names = []
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        claims = ((container.get("resources") or {}).get("claims")) or ()
        if pod_claim_name is not None and any(c.get("name") == pod_claim_name for c in claims):
            names.append(str(container.get("name")))
    return names


def pod_demand(pod: Obj, statuses: Sequence[Obj] | None = None) -> dict[str, Fraction]:
    """The pod's requests (upstream ``PodRequests`` with DRA node-allocatable statuses): ``statuses``, or
    the pod's own ``status.nodeAllocatableResourceClaimStatuses`` when None."""
    spec = pod.get("spec") or {}
    where = f"pod {(pod.get('metadata') or {}).get('namespace')}/{(pod.get('metadata') or {}).get('name')}"
    total = _sum(_requests(c, where) for c in spec.get("containers") or ())
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for container in spec.get("initContainers") or ():
        requests = _requests(container, where)
        if container.get("restartPolicy") == "Always":
            total = _sum([total, requests])
            sidecars = _sum([sidecars, requests])
            requests = dict(sidecars)
        else:
            requests = _sum([requests, sidecars])
        peak = {k: max(peak.get(k, Fraction(0)), v) for k, v in {**peak, **requests}.items()}
    total = {k: max(total.get(k, Fraction(0)), peak.get(k, Fraction(0))) for k in {*total, *peak}}
    if statuses is None:
        statuses = (pod.get("status") or {}).get("nodeAllocatableResourceClaimStatuses") or ()
    total = _sum([total, _dra(statuses, where)])
    level = (spec.get("resources") or {}).get("requests") or {}
    for name, amount in level.items():
        if name in _POD_LEVEL or str(name).startswith("hugepages-"):
            total[name] = _quantity(amount, f"{where}: spec.resources.requests.{name}")
    overhead = {
        k: _quantity(v, f"{where}: spec.overhead.{k}") for k, v in (spec.get("overhead") or {}).items()
    }
    return _sum([total, overhead])


def _requests(container: Obj, where: str) -> dict[str, Fraction]:
    requests = (container.get("resources") or {}).get("requests") or {}
    at = f"{where}: {container.get('name')}.resources.requests"
    return {k: _quantity(v, f"{at}.{k}") for k, v in requests.items()}


def _dra(statuses: Iterable[Obj], where: str) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for status in statuses:
        containers = len(status.get("containers") or ())
        for entry in status.get("mapping") or ():
            amount = _quantity(entry.get("quantity"), where)
            total[entry["name"]] = total.get(entry["name"], Fraction(0)) + amount
        for entry in status.get("overhead") or ():
            amount = _quantity(entry.get("perPod", "0"), where)
            if containers:
                amount += _quantity(entry.get("perContainer", "0"), where) * containers
            total[entry["name"]] = total.get(entry["name"], Fraction(0)) + amount
    return total


def _sum(parts: Iterable[Mapping[str, Fraction]]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for part in parts:
        for name, amount in part.items():
            total[name] = total.get(name, Fraction(0)) + amount
    return total


def insufficient(
    demand: Mapping[str, Fraction],
    allocatable: Mapping[str, object],
    requested: Mapping[str, Fraction],
    node: str,
) -> tuple[str, bool] | None:
    """Why ``demand`` does not fit the node (``Insufficient cpu, memory``) and whether it never can (the
    demand exceeds the allocatable outright), or None when it fits."""
    short, never = [], False
    for name in sorted(demand):
        if name not in CHECKED and not name.startswith("hugepages-"):
            continue
        want = demand[name]
        have = _quantity(allocatable.get(name, "0"), f"node {node}: status.allocatable.{name}")
        if want > 0 and want > have - requested.get(name, Fraction(0)):
            short.append(name)
            never = never or want > have
    if not short:
        return None
    names = ", ".join(short)
    return f"Insufficient {names} (with the node-allocatable resources of the pod's devices)", never


def shared_mapped_claim(key: str, claim: Obj, reserved_for_pod: bool, slices: Iterable[Obj]) -> str:
    """Why an allocated claim with a mapped device cannot be used by this pod (reserved for another
    consumer), or ''."""
    status = claim.get("status") or {}
    if not status.get("reservedFor") or reserved_for_pod:
        return ""
    if not is_mapped(status.get("allocation") or {}, slices):
        return ""
    return f"node allocatable resource claim {key} has a mapped device and cannot be shared across pods"
