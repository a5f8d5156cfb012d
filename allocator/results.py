"""Building the API-shaped ``AllocationResult`` of one claim (allocator-semantics §14, §15).

``devices.results`` in allocation order; ``devices.config``: class configs once per class with the
requests that used it (``FromClass``), then the claim's own configs once (``FromClaim``), and ``requests``
cleared on any config that covers every request; ``nodeSelector`` pinned to the node when a device is
node-local or ``bindsToNode`` (not by upstream's stable allocator, whose ``createNodeSelector`` predates
the field), else the merged single-term selectors, else omitted (usable anywhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.inventory import Inventory
from allocator.model import Claim, Device, DeviceRequest, ResourceSlice
from allocator.nodeselector import Node, NodeSelector
from allocator.quantity import format_like

__all__ = ["PickedDevice", "build_allocation"]


@dataclass(frozen=True, slots=True)
class PickedDevice:
    """A device chosen for a request; ``share_id``/``consumed`` only for multi-allocatable devices."""

    request: DeviceRequest
    slice: ResourceSlice
    device: Device
    share_id: str
    consumed: Mapping[str, Fraction] | None


def _result_entry(picked: PickedDevice, gates: FeatureGates) -> dict[str, Any]:
    device, request = picked.device, picked.request
    entry: dict[str, Any] = {
        "request": request.name,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.name,
    }
    if request.admin_access:
        entry["adminAccess"] = True
    if request.tolerations:
        entry["tolerations"] = [dict(t.raw) for t in request.tolerations]
    if gates.DRADeviceBindingConditions:
        if device.binding_conditions:
            entry["bindingConditions"] = list(device.binding_conditions)
        if device.binding_failure_conditions:
            entry["bindingFailureConditions"] = list(device.binding_failure_conditions)
    # Only the experimental allocator copies it (and allocates such devices only with the gate on).
    if picked.slice.skip_node_operations and gates.experimental_allocator:
        entry["skipNodeOperations"] = list(picked.slice.skip_node_operations)
    if picked.share_id:
        entry["shareID"] = picked.share_id
        if picked.consumed:
            entry["consumedCapacity"] = {
                name: format_like(amount, device.capacity[name].value)
                for name, amount in picked.consumed.items()
            }
    return entry


def _configs(claim: Claim, chosen: Mapping[str, DeviceRequest], inventory: Inventory) -> list[dict[str, Any]]:
    used_names = {alt.name for alt in chosen.values()}
    by_class: dict[str, list[str]] = {}
    for request in claim.requests:
        alt = chosen[request.name]
        by_class.setdefault(alt.class_name, []).append(alt.name)
    configs: list[dict[str, Any]] = []
    for class_name, request_names in by_class.items():
        device_class = inventory.device_class(class_name)
        for entry in device_class.config if device_class else ():
            configs.append({"source": "FromClass", "requests": list(request_names), **_opaque(entry)})
    for entry in claim.config:
        requests = list(entry.get("requests") or [])
        if requests and not any(r in used_names or r in chosen for r in requests):
            continue
        configs.append({"source": "FromClaim", "requests": requests or None, **_opaque(entry)})
    for config in configs:
        requests = config["requests"]
        if requests is not None and all(
            r.name in requests or chosen[r.name].name in requests for r in claim.requests
        ):
            config["requests"] = None
        if config["requests"] is None:
            del config["requests"]
    return configs


def _opaque(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("requests", "source")}


def _node_selector(picked: list[PickedDevice], node: Node, gates: FeatureGates) -> dict[str, Any] | None:
    pinned = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}
        ]
    }
    expressions: list[dict[str, Any]] = []
    fields: list[dict[str, Any]] = []
    for p in picked:
        source = p.device if p.slice.per_device_node_selection else p.slice
        if source.node_name or (p.device.binds_to_node and not gates.stable_allocator):
            return pinned
        selector: NodeSelector | None = source.node_selector
        if selector is None:
            continue
        if len(selector.terms) != 1:
            raise InvalidInputError(
                f"unsupported ResourceSlice.NodeSelector with {len(selector.terms)} terms"
            )
        for requirement in selector.terms[0]:
            target = fields if requirement.field else expressions
            api = requirement.to_api()
            if api not in target:
                target.append(api)
    if not expressions and not fields:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def build_allocation(
    claim: Claim,
    picked: list[PickedDevice],
    chosen: Mapping[str, DeviceRequest],
    inventory: Inventory,
    node: Node,
    gates: FeatureGates,
) -> dict[str, Any]:
    """The ``status.allocation`` dict for one claim (``allocationTimestamp`` is the caller's)."""
    devices: dict[str, Any] = {"results": [_result_entry(p, gates) for p in picked]}
    configs = _configs(claim, chosen, inventory)
    if configs:
        devices["config"] = configs
    allocation: dict[str, Any] = {"devices": devices}
    selector = _node_selector(picked, node, gates)
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation
