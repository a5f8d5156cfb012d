"""The ``ResourceSlice`` kind: a pool's devices (attributes, capacity, counter consumption, taints, node
selection, binding conditions) and shared counters, parsed once per published revision."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from allocator.cel import AttributeValue, CELDevice, Version
from allocator.cel.library import SemverError, parse_semver
from allocator.model.fields import (
    FieldPath,
    object_name,
    read_amount,
    read_bool,
    read_int,
    read_list,
    read_mapping,
    read_quantity,
    read_str,
    read_strings,
)
from allocator.model.shared import shared_description, shared_domain, shared_value
from allocator.model.taints import Taint, parse_taint
from allocator.nodeselector import NodeSelector, parse_node_selector
from allocator.quantity import Quantity

__all__ = [
    "MAX_COMPATIBILITY_GROUPS",
    "MAX_SHARED_CAPACITIES",
    "CounterConsumption",
    "Device",
    "DeviceCapacity",
    "DeviceID",
    "RequestPolicy",
    "ResourceSlice",
    "parse_resource_slice",
]

DeviceID = tuple[str, str, str]
"""(driver, pool, device): a device's identity across the cluster."""

MAX_COMPATIBILITY_GROUPS = 2
"""``DeviceCompatibilityGroupsMaxSize``: ``compatibilityGroups`` of one counter consumption."""


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """``CapacityRequestPolicy`` (KEP-5075): default, and validValues or validRange{min, max, step}."""

    default: Quantity | None
    valid_values: tuple[Quantity, ...]
    min: Quantity | None
    max: Quantity | None
    step: Quantity | None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    """``DeviceCapacity``: a quantity and an optional request policy."""

    value: Quantity
    policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """One ``consumesCounters`` entry: counters taken from a counter set of the device's pool."""

    counter_set: str
    counters: Mapping[str, Quantity]
    compatibility_groups: frozenset[str] = frozenset()
    """``compatibilityGroups`` (gate DRADeviceCompatibilityGroups): devices drawing on one counter set may be
    allocated together only while their groups intersect; none means "only with devices without groups"."""


@dataclass(frozen=True, slots=True, weakref_slot=True, eq=False)
class Device:
    """One device of a ResourceSlice; compared and hashed by identity (caches key on it).

    Attributes are held once, by domain, in ``cel`` (the selector view; bare names are filed under the
    driver's domain): ``attribute`` looks one up by its fully qualified name (``domain/id``).
    """

    id: DeviceID
    capacity: Mapping[str, DeviceCapacity]
    cel: CELDevice
    taints: tuple[Taint, ...]
    consumes_counters: tuple[CounterConsumption, ...]
    node_name: str
    node_selector: NodeSelector | None
    all_nodes: bool
    binds_to_node: bool
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    allow_multiple_allocations: bool
    digest: bytes
    """Of the API dict it was parsed from (``_digest``): a slice update republishing the device unchanged
    keeps this parsed object, and with it every cached selector result, without the dict being kept."""
    description: bytes
    """Of that dict without its attributes, and with only whether ``nodeName`` is set: all the allocator
    reads of the device apart from its pool, attributes and node (name, capacity, counters, taints, node
    selection, binding fields). Equal on alike devices
    of alike nodes, and held once for them (``allocator.equivalence`` keys node layouts on it)."""

    @property
    def driver(self) -> str:
        return self.id[0]

    @property
    def pool(self) -> str:
        return self.id[1]

    @property
    def name(self) -> str:
        return self.id[2]

    def attribute(self, qualified_name: str) -> AttributeValue | None:
        """A constraint lookup (``matchAttribute``): the fully qualified name, driver domain included."""
        domain, slash, ident = qualified_name.rpartition("/")
        values = self.cel.attributes.get(domain) if slash else None
        return values.get(ident) if values is not None else None

    @property
    def attributes(self) -> dict[str, AttributeValue]:
        """Every attribute by fully qualified name, built on each call (a second map per device would be
        a fifth of the inventory's memory; readers of every attribute are rare)."""
        return {f"{d}/{i}": v for d, values in self.cel.attributes.items() for i, v in values.items()}


@dataclass(frozen=True, slots=True, eq=False)
class ResourceSlice:
    """``ResourceSlice``: devices or shared counters of one pool, published for one or more nodes."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    node_selector: NodeSelector | None
    all_nodes: bool
    per_device_node_selection: bool
    devices: tuple[Device, ...]
    shared_counters: Mapping[str, Mapping[str, Quantity]]
    resource_version: str
    skip_node_operations: tuple[str, ...] = ()
    """``spec.skipNodeOperations`` (gate DRAOptionalNodeOperations; ``allocator.nodeoperations``)."""
    uses_compatibility_groups: bool = False
    """A device declares ``compatibilityGroups`` on a counter consumption (``allocator.pools``: such slices
    are ignored while DRADeviceCompatibilityGroups is off); found once, when the slice is parsed."""
    devices_digest: bytes = b""
    """Of ``spec.devices`` as published (``_parse_devices``)."""

    @property
    def pool_id(self) -> tuple[str, str]:
        return (self.driver, self.pool)


_ATTRIBUTE_TYPES: tuple[tuple[str, type[bool] | type[int] | type[str]], ...] = (
    ("bool", bool),
    ("int", int),
    ("string", str),
)
_LIST_TYPES: tuple[tuple[str, type], ...] = (("bools", bool), ("ints", int), ("strings", str))


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _version(raw: Any, at: FieldPath) -> Version:
    """A ``version`` attribute: semver 2.0.0 text (API validation rejects anything else)."""
    text = read_str(raw, at, required=True)
    try:
        parse_semver(text)
    except SemverError as e:
        raise at.error(f"must be a semantic version (semver 2.0.0): {e}") from e
    return Version(text)


def _attribute_value(raw: Any, at: FieldPath) -> AttributeValue:
    data = read_mapping(raw, at, required=True)
    found: list[AttributeValue] = []
    for key, kind in _ATTRIBUTE_TYPES:
        if key in data and data[key] is not None:
            value = data[key]
            if type(value) is not kind:
                raise (at / key).error(f"must be of type {kind.__name__}")
            if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
                raise (at / key).error("must fit in a signed 64-bit integer")
            found.append(value)
    if data.get("version") is not None:
        found.append(_version(data["version"], at / "version"))
    for key, kind in _LIST_TYPES:
        if data.get(key) is not None:
            items = read_list(data[key], at / key)
            if not items or any(type(v) is not kind for v in items):
                raise (at / key).error(f"must be a non-empty list of {kind.__name__}")
            found.append(tuple(items))
    if data.get("versions") is not None:
        found.append(
            tuple(
                _version(v, at / "versions" / i)
                for i, v in enumerate(read_list(data["versions"], at / "versions"))
            )
        )
    if len(found) != 1:
        raise at.error("unsupported attribute value: exactly one value must be specified")
    return found[0]


def _qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


# Attribute names repeat on every device of a driver: interned, tens of thousands of devices share one
# string per domain and name instead of holding copies.
def _split(qualified: str) -> tuple[str, str]:
    domain, _, ident = qualified.rpartition("/")
    return sys.intern(domain), sys.intern(ident)


def _optional_quantity(data: Mapping[str, Any], key: str, at: FieldPath) -> Quantity | None:
    value = data.get(key)
    return read_quantity(value, at / key) if value is not None else None


def _request_policy(raw: Any, at: FieldPath) -> RequestPolicy | None:
    if raw is None:
        return None
    data = read_mapping(raw, at)
    valid_range = read_mapping(data.get("validRange"), at / "validRange")
    return RequestPolicy(
        default=_optional_quantity(data, "default", at),
        valid_values=tuple(
            read_quantity(v, at / "validValues" / i)
            for i, v in enumerate(read_list(data.get("validValues"), at / "validValues"))
        ),
        min=_optional_quantity(valid_range, "min", at / "validRange"),
        max=_optional_quantity(valid_range, "max", at / "validRange"),
        step=_optional_quantity(valid_range, "step", at / "validRange"),
    )


def _parse_device(raw: Any, driver: str, pool: str, at: FieldPath, digest: bytes) -> Device:
    data = read_mapping(raw, at, required=True)
    name = read_str(data.get("name"), at / "name", required=True)
    if "basic" in data:
        raise (at / "basic").error("the v1beta1 'basic' wrapper is not part of resource.k8s.io/v1")
    cel_attributes: dict[str, dict[str, AttributeValue]] = {}
    for key, value in read_mapping(data.get("attributes"), at / "attributes").items():
        parsed = shared_value(_attribute_value(value, at / "attributes" / key))
        domain, ident = _split(_qualify(key, driver))
        cel_attributes.setdefault(domain, {})[ident] = parsed
    capacity, cel_capacity = _capacities(data.get("capacity"), driver, at / "capacity")
    consumes = tuple(
        _counter_consumption(entry, at / "consumesCounters" / i)
        for i, entry in enumerate(read_list(data.get("consumesCounters"), at / "consumesCounters"))
    )
    multi = read_bool(data.get("allowMultipleAllocations"), at / "allowMultipleAllocations")
    selector = data.get("nodeSelector")
    return Device(
        id=(driver, pool, sys.intern(name)),  # names repeat on every node (gpu-0, gpu-1, ...)
        capacity=capacity,
        cel=CELDevice(driver, {d: shared_domain(v) for d, v in cel_attributes.items()}, cel_capacity, multi),
        taints=tuple(
            parse_taint(t, at / "taints" / i)
            for i, t in enumerate(read_list(data.get("taints"), at / "taints"))
        ),
        consumes_counters=consumes,
        node_name=read_str(data.get("nodeName"), at / "nodeName"),
        node_selector=parse_node_selector(selector, str(at / "nodeSelector")) if selector else None,
        all_nodes=read_bool(data.get("allNodes"), at / "allNodes"),
        binds_to_node=read_bool(data.get("bindsToNode"), at / "bindsToNode"),
        binding_conditions=read_strings(data.get("bindingConditions"), at / "bindingConditions"),
        binding_failure_conditions=read_strings(
            data.get("bindingFailureConditions"), at / "bindingFailureConditions"
        ),
        allow_multiple_allocations=multi,
        digest=digest,
        description=_description(data),
    )


def _description(data: Mapping[str, Any]) -> bytes:
    """``Device.description``: the digest of ``data`` without ``attributes``, and with only whether
    ``nodeName`` is set (per-device node selection names each device's own node: which node a device is
    on is the node's identity, not its description), held once for alike devices
    (``allocator.model.shared``)."""
    rest = {key: value for key, value in data.items() if key not in ("attributes", "nodeName")}
    if data.get("nodeName"):
        rest["nodeName"] = True
    digest = _digest(rest)
    return shared_description(digest)


MAX_SHARED_CAPACITIES = 4096
"""Distinct published capacity maps whose parsed form is shared (``_capacities``)."""

_CAPACITIES: dict[tuple[str, str], tuple[dict[str, DeviceCapacity], dict[str, dict[str, Quantity]]]] = {}


def _capacities(
    raw: Any, driver: str, at: FieldPath
) -> tuple[dict[str, DeviceCapacity], dict[str, dict[str, Quantity]]]:
    """A device's ``capacity`` (constraint view, CEL view). Alike devices publish equal capacity maps: one
    parsed pair serves them all (read-only; about 0.5 KB per device saved), at most
    ``MAX_SHARED_CAPACITIES`` of them."""
    data = read_mapping(raw, at)
    key = (driver, repr(data))
    shared = _CAPACITIES.get(key)
    if shared is not None:
        return shared
    capacity: dict[str, DeviceCapacity] = {}
    cel_capacity: dict[str, dict[str, Quantity]] = {}
    for name, value in data.items():
        cap_at = at / name
        cap = read_mapping(value, cap_at, required=True)
        if "value" not in cap:
            raise (cap_at / "value").error("required field is missing")
        parsed_cap = DeviceCapacity(
            read_amount(cap["value"], cap_at / "value"),
            _request_policy(cap.get("requestPolicy"), cap_at / "requestPolicy"),
        )
        capacity[sys.intern(name)] = parsed_cap
        domain, ident = _split(_qualify(name, driver))
        cel_capacity.setdefault(domain, {})[ident] = parsed_cap.value
    if len(_CAPACITIES) >= MAX_SHARED_CAPACITIES:
        _CAPACITIES.clear()
    _CAPACITIES[key] = (capacity, cel_capacity)
    return capacity, cel_capacity


def _counter_consumption(raw: Any, at: FieldPath) -> CounterConsumption:
    data = read_mapping(raw, at, required=True)
    groups = read_strings(data.get("compatibilityGroups"), at / "compatibilityGroups")
    if len(groups) > MAX_COMPATIBILITY_GROUPS:
        raise (at / "compatibilityGroups").error(
            f"must have at most {MAX_COMPATIBILITY_GROUPS} items, got {len(groups)}"
        )
    if len(set(groups)) != len(groups):
        raise (at / "compatibilityGroups").error("must not contain duplicates")
    return CounterConsumption(
        counter_set=read_str(data.get("counterSet"), at / "counterSet", required=True),
        counters=_counters(data.get("counters"), at / "counters"),
        compatibility_groups=frozenset(groups),
    )


def _counters(raw: Any, at: FieldPath) -> dict[str, Quantity]:
    result = {}
    for name, counter in read_mapping(raw, at, required=True).items():
        entry = read_mapping(counter, at / name, required=True)
        result[name] = read_amount(entry.get("value"), at / name / "value")
    return result


def _parse_devices(
    raw: Any, driver: str, pool: str, at: FieldPath, previous: ResourceSlice | None
) -> tuple[tuple[Device, ...], bytes]:
    """The devices and the digest of their list. A slice republished with the same list (a new
    resourceVersion, other fields changed) keeps every parsed device for one digest; else each device is
    matched by name and digest."""
    listed = _digest(raw)
    known: dict[str, Device] = {}
    if previous is not None and previous.pool_id == (driver, pool):
        if previous.devices_digest == listed:
            return previous.devices, listed
        known = {d.name: d for d in previous.devices}
    devices = []
    for i, data in enumerate(read_list(raw, at)):
        name = data.get("name") if isinstance(data, Mapping) else None
        old = known.get(name) if isinstance(name, str) else None
        digest = _digest(data)
        devices.append(
            old
            if old is not None and old.digest == digest
            else _parse_device(data, driver, pool, at / i, digest)
        )
    return tuple(devices), listed


def _digest(data: Any) -> bytes:
    """128 bits of the device's API dict as serialized, key order included (an API server writes fields in
    one order; another order only costs a re-parse). A dict orjson cannot write (an integer beyond 64 bits)
    is digested from its repr, marked apart so that the two forms never meet."""
    try:
        text = b"j" + orjson.dumps(data)
    except orjson.JSONEncodeError:
        text = b"r" + repr(data).encode()
    return hashlib.blake2b(text, digest_size=16).digest()


def parse_resource_slice(obj: Mapping[str, Any], previous: ResourceSlice | None = None) -> ResourceSlice:
    """Convert a resource.k8s.io/v1 ResourceSlice dict. Raises InvalidInputError naming the field.

    ``previous``: the slice this one replaces; its devices are reused where their API dict is unchanged.
    """
    _, name, at = object_name("ResourceSlice", obj)
    spec = read_mapping(obj.get("spec"), at / "spec", required=True)
    driver = read_str(spec.get("driver"), at / "spec" / "driver", required=True)
    pool = read_mapping(spec.get("pool"), at / "spec" / "pool", required=True)
    pool_name = read_str(pool.get("name"), at / "spec" / "pool" / "name", required=True)
    selector = spec.get("nodeSelector")
    node_fields = [
        bool(spec.get("nodeName")),
        bool(selector),
        bool(spec.get("allNodes")),
        bool(spec.get("perDeviceNodeSelection")),
    ]
    if sum(node_fields) > 1:
        raise (at / "spec").error("only one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection")
    shared: dict[str, Mapping[str, Quantity]] = {}
    for i, entry in enumerate(read_list(spec.get("sharedCounters"), at / "spec" / "sharedCounters")):
        entry_at = at / "spec" / "sharedCounters" / i
        data = read_mapping(entry, entry_at, required=True)
        set_name = read_str(data.get("name"), entry_at / "name", required=True)
        if set_name in shared:
            raise (entry_at / "name").error(f"duplicate counter set name {set_name}")
        shared[set_name] = _counters(data.get("counters"), entry_at / "counters")
    meta = obj.get("metadata") or {}
    devices, devices_digest = _parse_devices(
        spec.get("devices"), driver, pool_name, at / "spec" / "devices", previous
    )
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=read_int(pool.get("generation"), at / "spec" / "pool" / "generation", 0),
        slice_count=read_int(pool.get("resourceSliceCount"), at / "spec" / "pool" / "resourceSliceCount", 1),
        node_name=read_str(spec.get("nodeName"), at / "spec" / "nodeName"),
        node_selector=parse_node_selector(selector, str(at / "spec" / "nodeSelector")) if selector else None,
        all_nodes=read_bool(spec.get("allNodes"), at / "spec" / "allNodes"),
        per_device_node_selection=read_bool(
            spec.get("perDeviceNodeSelection"), at / "spec" / "perDeviceNodeSelection"
        ),
        devices=devices,
        shared_counters=shared,
        resource_version=str(meta.get("resourceVersion") or ""),
        skip_node_operations=read_strings(spec.get("skipNodeOperations"), at / "spec" / "skipNodeOperations"),
        uses_compatibility_groups=any(c.compatibility_groups for d in devices for c in d.consumes_counters),
        devices_digest=devices_digest,
    )
