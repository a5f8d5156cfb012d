"""Typed, immutable views of the resource.k8s.io/v1 objects the allocator reads.

API-shaped dicts are converted once (``parse_*``) into frozen, slotted dataclasses; the search never
touches raw dicts. Every parse error is an ``InvalidInputError`` whose message names the object and the
field path, e.g. ``ResourceClaim demo/x: spec.devices.requests[0].exactly.count: must be an integer``.

Shapes follow ``k8s.io/api/resource/v1/types.go`` (1.37): ResourceSlice, Device, DeviceClass,
ResourceClaim(Spec), DeviceRequest / DeviceSubRequest, DeviceConstraint, DeviceToleration, DeviceTaint,
DeviceTaintRule.

One module, about 900 lines: the parsed types of the five kinds reference each other (a request's
tolerations, a device's taints, counters and capacity) and share the readers that name the field path in
errors, as upstream's one ``types.go`` does.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import orjson

from allocator.cel import AttributeValue, CELDevice, Version
from allocator.cel.library import SemverError, parse_semver
from allocator.cel.reads import attribute_key
from allocator.errors import InvalidInputError
from allocator.nodeselector import NodeSelector, parse_node_selector
from allocator.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "Claim",
    "Constraint",
    "CounterConsumption",
    "DerivedAttribute",
    "Device",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceID",
    "DeviceRequest",
    "DeviceTaintRule",
    "Request",
    "RequestPolicy",
    "ResourceSlice",
    "Taint",
    "Toleration",
    "parse_claim",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_resource_slice",
    "qualified_name_problem",
]

DeviceID = tuple[str, str, str]
"""(driver, pool, device): a device's identity across the cluster."""

MAX_DEVICES_PER_CLAIM = 32
"""``AllocationResultsMaxSize``: results in one claim's allocation."""

MAX_COMPATIBILITY_GROUPS = 2
"""``DeviceCompatibilityGroupsMaxSize``: ``compatibilityGroups`` of one counter consumption."""

MAX_REQUESTS_PER_CLAIM = 32
"""``DeviceRequestsMaxSize``: requests in one claim."""


class _Path:
    """Field paths for error messages (``spec.devices.requests[0].name``), formatted only when an error
    is raised: parsing builds many paths and almost never needs one."""

    __slots__ = ("name", "obj", "parent")

    def __init__(self, obj: str, parent: _Path | None = None, name: str | int | None = None) -> None:
        self.obj = obj
        self.parent = parent
        self.name = name

    def __truediv__(self, name: str | int) -> _Path:
        return _Path(self.obj, self, name)

    @property
    def path(self) -> str:
        parts: list[str] = []
        node: _Path | None = self
        while node is not None and node.name is not None:
            parts.append(f"[{node.name}]" if isinstance(node.name, int) else f".{node.name}")
            node = node.parent
        return "".join(reversed(parts)).lstrip(".")

    def __str__(self) -> str:
        return f"{self.obj}: {self.path}" if self.path else self.obj

    def error(self, problem: str) -> InvalidInputError:
        return InvalidInputError(f"{self}: {problem}")


def _mapping(value: Any, at: _Path, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise at.error("required field is missing")
        return {}
    if not isinstance(value, Mapping):
        raise at.error(f"must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, at: _Path) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise at.error(f"must be a list, got {type(value).__name__}")
    return value


def _str(value: Any, at: _Path, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise at.error("required field is missing")
        return ""
    if not isinstance(value, str):
        raise at.error(f"must be a string, got {type(value).__name__}")
    return value


def _bool(value: Any, at: _Path) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise at.error(f"must be a boolean, got {type(value).__name__}")
    return value


def _int(value: Any, at: _Path, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise at.error(f"must be an integer, got {type(value).__name__}")
    return value


def _quantity(value: Any, at: _Path) -> Quantity:
    try:
        return parse_quantity(value)
    except QuantityError as e:
        raise at.error(str(e)) from e


def _amount(value: Any, at: _Path) -> Quantity:
    """A capacity or counter value: a quantity that is not negative."""
    quantity = _quantity(value, at)
    if quantity.value < 0:
        raise at.error(f"must not be negative, got {quantity.text}")
    return quantity


def _strings(value: Any, at: _Path) -> tuple[str, ...]:
    return tuple(_str(v, at / i, required=True) for i, v in enumerate(_list(value, at)))


def _object_name(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, _Path]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = raw if isinstance(raw := meta.get("name"), str) else ""
    namespace = raw if isinstance(raw := meta.get("namespace"), str) else ""
    label = f"{namespace}/{name}" if namespace else name
    at = _Path(f"{kind} {label or '<unnamed>'}")
    if not isinstance(obj, Mapping):
        raise at.error(f"must be an object, got {type(obj).__name__}")
    if not name:
        raise (at / "metadata.name").error("required field is missing")
    return namespace, name, at


# --- taints and tolerations -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    """``DeviceTaint``: effects NoSchedule and NoExecute block allocation; None and unknown do not."""

    key: str
    value: str
    effect: str
    source: str = ""
    """Where the taint comes from: empty for the device's own, else ``DeviceTaintRule <name>``."""

    @property
    def blocks_allocation(self) -> bool:
        return self.effect in ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Toleration:
    """``DeviceToleration``; ``raw`` is copied into allocation results as written."""

    key: str
    operator: str
    value: str
    effect: str
    raw: Mapping[str, Any] = field(compare=False)

    def tolerates(self, taint: Taint) -> bool:
        """Upstream ``resourceclaim.ToleratesTaint``: effect, then key, then operator/value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return False


def _parse_taint(raw: Any, at: _Path, source: str = "") -> Taint:
    data = _mapping(raw, at, required=True)
    return Taint(
        key=_str(data.get("key"), at / "key", required=True),
        value=_str(data.get("value"), at / "value"),
        effect=_str(data.get("effect"), at / "effect", required=True),
        source=source,
    )


def _parse_toleration(raw: Any, at: _Path) -> Toleration:
    data = _mapping(raw, at, required=True)
    operator = _str(data.get("operator"), at / "operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise (at / "operator").error(f"unsupported operator {operator!r} (Equal or Exists)")
    return Toleration(
        key=_str(data.get("key"), at / "key"),
        operator=operator,
        value=_str(data.get("value"), at / "value"),
        effect=_str(data.get("effect"), at / "effect"),
        raw=dict(data),
    )


# --- ResourceSlice --------------------------------------------------------------------------------


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


def _version(raw: Any, at: _Path) -> Version:
    """A ``version`` attribute: semver 2.0.0 text (API validation rejects anything else)."""
    text = _str(raw, at, required=True)
    try:
        parse_semver(text)
    except SemverError as e:
        raise at.error(f"must be a semantic version (semver 2.0.0): {e}") from e
    return Version(text)


def _attribute_value(raw: Any, at: _Path) -> AttributeValue:
    data = _mapping(raw, at, required=True)
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
            items = _list(data[key], at / key)
            if not items or any(type(v) is not kind for v in items):
                raise (at / key).error(f"must be a non-empty list of {kind.__name__}")
            found.append(tuple(items))
    if data.get("versions") is not None:
        found.append(
            tuple(
                _version(v, at / "versions" / i)
                for i, v in enumerate(_list(data["versions"], at / "versions"))
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


def _optional_quantity(data: Mapping[str, Any], key: str, at: _Path) -> Quantity | None:
    value = data.get(key)
    return _quantity(value, at / key) if value is not None else None


def _request_policy(raw: Any, at: _Path) -> RequestPolicy | None:
    if raw is None:
        return None
    data = _mapping(raw, at)
    valid_range = _mapping(data.get("validRange"), at / "validRange")
    return RequestPolicy(
        default=_optional_quantity(data, "default", at),
        valid_values=tuple(
            _quantity(v, at / "validValues" / i)
            for i, v in enumerate(_list(data.get("validValues"), at / "validValues"))
        ),
        min=_optional_quantity(valid_range, "min", at / "validRange"),
        max=_optional_quantity(valid_range, "max", at / "validRange"),
        step=_optional_quantity(valid_range, "step", at / "validRange"),
    )


def _parse_device(raw: Any, driver: str, pool: str, at: _Path, digest: bytes) -> Device:
    data = _mapping(raw, at, required=True)
    name = _str(data.get("name"), at / "name", required=True)
    if "basic" in data:
        raise (at / "basic").error("the v1beta1 'basic' wrapper is not part of resource.k8s.io/v1")
    cel_attributes: dict[str, dict[str, AttributeValue]] = {}
    for key, value in _mapping(data.get("attributes"), at / "attributes").items():
        parsed = _shared_value(_attribute_value(value, at / "attributes" / key))
        domain, ident = _split(_qualify(key, driver))
        cel_attributes.setdefault(domain, {})[ident] = parsed
    capacity, cel_capacity = _capacities(data.get("capacity"), driver, at / "capacity")
    consumes = tuple(
        _counter_consumption(entry, at / "consumesCounters" / i)
        for i, entry in enumerate(_list(data.get("consumesCounters"), at / "consumesCounters"))
    )
    multi = _bool(data.get("allowMultipleAllocations"), at / "allowMultipleAllocations")
    selector = data.get("nodeSelector")
    return Device(
        id=(driver, pool, sys.intern(name)),  # names repeat on every node (gpu-0, gpu-1, ...)
        capacity=capacity,
        cel=CELDevice(driver, {d: _shared_domain(v) for d, v in cel_attributes.items()}, cel_capacity, multi),
        taints=tuple(
            _parse_taint(t, at / "taints" / i) for i, t in enumerate(_list(data.get("taints"), at / "taints"))
        ),
        consumes_counters=consumes,
        node_name=_str(data.get("nodeName"), at / "nodeName"),
        node_selector=parse_node_selector(selector, str(at / "nodeSelector")) if selector else None,
        all_nodes=_bool(data.get("allNodes"), at / "allNodes"),
        binds_to_node=_bool(data.get("bindsToNode"), at / "bindsToNode"),
        binding_conditions=_strings(data.get("bindingConditions"), at / "bindingConditions"),
        binding_failure_conditions=_strings(
            data.get("bindingFailureConditions"), at / "bindingFailureConditions"
        ),
        allow_multiple_allocations=multi,
        digest=digest,
        description=_description(data),
    )


def _description(data: Mapping[str, Any]) -> bytes:
    """``Device.description``: the digest of ``data`` without ``attributes``, and with only whether
    ``nodeName`` is set (per-device node selection names each device's own node: which node a device is
    on is the node's identity, not its description), held once for alike devices (at most
    ``MAX_SHARED_DESCRIPTIONS`` of them)."""
    rest = {key: value for key, value in data.items() if key not in ("attributes", "nodeName")}
    if data.get("nodeName"):
        rest["nodeName"] = True
    digest = _digest(rest)
    return _held_once(_DESCRIPTIONS, digest, digest, MAX_SHARED_DESCRIPTIONS)


MAX_SHARED_VALUES = 4096
"""Distinct string and ``version`` attribute values held once (``_shared_value``)."""

MAX_SHARED_DOMAINS = 4096
"""Distinct per-domain attribute maps held once (``_shared_domain``)."""

MAX_SHARED_DESCRIPTIONS = 4096
"""Distinct device descriptions (``Device.description``) held once."""

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
_VALUES: dict[str | Version, str | Version] = {}
_DOMAINS: dict[tuple[object, ...], dict[str, AttributeValue]] = {}
_DESCRIPTIONS: dict[bytes, bytes] = {}


def _shared_value(value: AttributeValue) -> AttributeValue:
    """Alike devices (one model on every node) publish equal values: each is held once, at most
    ``MAX_SHARED_VALUES`` of them (a bounded table, not ``sys.intern``: unique values, uuids and serials,
    would each cost an entry for nothing)."""
    if type(value) is not str and type(value) is not Version:
        return value
    return _held_once(_VALUES, value, value, MAX_SHARED_VALUES)


def _shared_domain(values: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """One map for every device with these values of one domain (read-only; what differs between alike
    devices, a uuid or a PCIe root, is usually in a domain of its own or in a few distinct values), at most
    ``MAX_SHARED_DOMAINS`` of them."""
    key = tuple((name, attribute_key(value)) for name, value in values.items())
    return _held_once(_DOMAINS, key, values, MAX_SHARED_DOMAINS)


def _held_once(table: dict[_K, _V], key: _K, value: _V, limit: int) -> _V:
    """What ``table`` holds for ``key``, else ``value``, remembered (the table starts over at ``limit``)."""
    held = table.get(key)
    if held is None:
        if len(table) >= limit:
            table.clear()
        held = table[key] = value
    return held


MAX_SHARED_CAPACITIES = 4096
"""Distinct published capacity maps whose parsed form is shared (``_capacities``)."""

_CAPACITIES: dict[tuple[str, str], tuple[dict[str, DeviceCapacity], dict[str, dict[str, Quantity]]]] = {}


def _capacities(
    raw: Any, driver: str, at: _Path
) -> tuple[dict[str, DeviceCapacity], dict[str, dict[str, Quantity]]]:
    """A device's ``capacity`` (constraint view, CEL view). Alike devices publish equal capacity maps: one
    parsed pair serves them all (read-only; about 0.5 KB per device saved), at most
    ``MAX_SHARED_CAPACITIES`` of them."""
    data = _mapping(raw, at)
    key = (driver, repr(data))
    shared = _CAPACITIES.get(key)
    if shared is not None:
        return shared
    capacity: dict[str, DeviceCapacity] = {}
    cel_capacity: dict[str, dict[str, Quantity]] = {}
    for name, value in data.items():
        cap_at = at / name
        cap = _mapping(value, cap_at, required=True)
        if "value" not in cap:
            raise (cap_at / "value").error("required field is missing")
        parsed_cap = DeviceCapacity(
            _amount(cap["value"], cap_at / "value"),
            _request_policy(cap.get("requestPolicy"), cap_at / "requestPolicy"),
        )
        capacity[sys.intern(name)] = parsed_cap
        domain, ident = _split(_qualify(name, driver))
        cel_capacity.setdefault(domain, {})[ident] = parsed_cap.value
    if len(_CAPACITIES) >= MAX_SHARED_CAPACITIES:
        _CAPACITIES.clear()
    _CAPACITIES[key] = (capacity, cel_capacity)
    return capacity, cel_capacity


def _counter_consumption(raw: Any, at: _Path) -> CounterConsumption:
    data = _mapping(raw, at, required=True)
    groups = _strings(data.get("compatibilityGroups"), at / "compatibilityGroups")
    if len(groups) > MAX_COMPATIBILITY_GROUPS:
        raise (at / "compatibilityGroups").error(
            f"must have at most {MAX_COMPATIBILITY_GROUPS} items, got {len(groups)}"
        )
    if len(set(groups)) != len(groups):
        raise (at / "compatibilityGroups").error("must not contain duplicates")
    return CounterConsumption(
        counter_set=_str(data.get("counterSet"), at / "counterSet", required=True),
        counters=_counters(data.get("counters"), at / "counters"),
        compatibility_groups=frozenset(groups),
    )


def _counters(raw: Any, at: _Path) -> dict[str, Quantity]:
    result = {}
    for name, counter in _mapping(raw, at, required=True).items():
        entry = _mapping(counter, at / name, required=True)
        result[name] = _amount(entry.get("value"), at / name / "value")
    return result


def _parse_devices(
    raw: Any, driver: str, pool: str, at: _Path, previous: ResourceSlice | None
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
    for i, data in enumerate(_list(raw, at)):
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
    _, name, at = _object_name("ResourceSlice", obj)
    spec = _mapping(obj.get("spec"), at / "spec", required=True)
    driver = _str(spec.get("driver"), at / "spec" / "driver", required=True)
    pool = _mapping(spec.get("pool"), at / "spec" / "pool", required=True)
    pool_name = _str(pool.get("name"), at / "spec" / "pool" / "name", required=True)
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
    for i, entry in enumerate(_list(spec.get("sharedCounters"), at / "spec" / "sharedCounters")):
        entry_at = at / "spec" / "sharedCounters" / i
        data = _mapping(entry, entry_at, required=True)
        set_name = _str(data.get("name"), entry_at / "name", required=True)
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
        generation=_int(pool.get("generation"), at / "spec" / "pool" / "generation", 0),
        slice_count=_int(pool.get("resourceSliceCount"), at / "spec" / "pool" / "resourceSliceCount", 1),
        node_name=_str(spec.get("nodeName"), at / "spec" / "nodeName"),
        node_selector=parse_node_selector(selector, str(at / "spec" / "nodeSelector")) if selector else None,
        all_nodes=_bool(spec.get("allNodes"), at / "spec" / "allNodes"),
        per_device_node_selection=_bool(
            spec.get("perDeviceNodeSelection"), at / "spec" / "perDeviceNodeSelection"
        ),
        devices=devices,
        shared_counters=shared,
        resource_version=str(meta.get("resourceVersion") or ""),
        skip_node_operations=_strings(spec.get("skipNodeOperations"), at / "spec" / "skipNodeOperations"),
        uses_compatibility_groups=any(c.compatibility_groups for d in devices for c in d.consumes_counters),
        devices_digest=devices_digest,
    )


# --- DeviceClass and DeviceTaintRule --------------------------------------------------------------


def _selectors(raw: Any, at: _Path) -> tuple[str, ...]:
    """Selector expressions; a selector without ``cel`` is reported by the caller (upstream, fatal)."""
    expressions = []
    for i, selector in enumerate(_list(raw, at)):
        data = _mapping(selector, at / i, required=True)
        cel = data.get("cel")
        expressions.append(
            _str(_mapping(cel, at / i / "cel").get("expression"), at / i / "cel" / "expression")
            if cel is not None
            else ""
        )
    return tuple(expressions)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """``DeviceClass``: selectors all devices of the class match, config copied into results."""

    name: str
    selectors: tuple[str, ...]
    config: tuple[Mapping[str, Any], ...]
    extended_resource_name: str


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """Convert a resource.k8s.io/v1 DeviceClass dict. Raises InvalidInputError naming the field."""
    _, name, at = _object_name("DeviceClass", obj)
    spec = _mapping(obj.get("spec"), at / "spec")
    return DeviceClass(
        name=name,
        selectors=_selectors(spec.get("selectors"), at / "spec" / "selectors"),
        config=tuple(
            _mapping(c, at / "spec" / "config" / i, required=True)
            for i, c in enumerate(_list(spec.get("config"), at / "spec" / "config"))
        ),
        extended_resource_name=_str(spec.get("extendedResourceName"), at / "spec" / "extendedResourceName"),
    )


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """``DeviceTaintRule``: adds ``taint`` to every device matching the set selector fields; a rule without
    ``deviceSelector`` (``selects`` False) taints nothing."""

    name: str
    driver: str
    pool: str
    device: str
    taint: Taint
    selects: bool = True

    def matches(self, device_id: DeviceID) -> bool:
        driver, pool, name = device_id
        return (
            self.selects
            and (not self.driver or self.driver == driver)
            and (not self.pool or self.pool == pool)
            and (not self.device or self.device == name)
        )


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    """Convert a v1 DeviceTaintRule. A missing ``deviceSelector`` matches no device, as the scheduler's
    ResourceSlice tracker applies rules (``applyPatches`` in dynamic-resource-allocation v0.37.2 skips such a
    rule); an empty one matches every device."""
    _, name, at = _object_name("DeviceTaintRule", obj)
    spec = _mapping(obj.get("spec"), at / "spec", required=True)
    selector = _mapping(spec.get("deviceSelector"), at / "spec" / "deviceSelector")
    for removed in ("deviceClassName", "selectors"):
        if selector.get(removed):
            raise (at / "spec" / "deviceSelector" / removed).error("field was removed in Kubernetes 1.35")
    return DeviceTaintRule(
        name=name,
        driver=_str(selector.get("driver"), at / "spec" / "deviceSelector" / "driver"),
        pool=_str(selector.get("pool"), at / "spec" / "deviceSelector" / "pool"),
        device=_str(selector.get("device"), at / "spec" / "deviceSelector" / "device"),
        taint=_parse_taint(spec.get("taint"), at / "spec" / "taint", source=f"DeviceTaintRule {name}"),
        selects=spec.get("deviceSelector") is not None,
    )


# --- ResourceClaim --------------------------------------------------------------------------------


MAX_DERIVED_ATTRIBUTES = 32
"""Entries of one request's ``derivedAttributes`` (KEP-6080; ``+k8s:maxItems=32`` in ``k8s.io/api``
``resource/v1/types.go``)."""


@dataclass(frozen=True, slots=True)
class DerivedAttribute:
    """One ``derivedAttributes`` entry (KEP-6080): a value computed by a CEL expression per candidate device.

    ``name`` is domain-qualified: a domain no driver uses keeps it local to the claim, a driver's name shadows
    the static attribute in this request's constraints (app.state.validation refuses bare names, as Kubernetes
    1.37).
    """

    name: str
    expression: str


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """An ``exactly`` request or one ``firstAvailable`` subrequest.

    ``name`` is what results carry: ``req`` or ``req/sub``. ``admin_access`` is None when the field is unset
    (upstream treats a non-nil ``false`` with the gate off as an error).
    """

    name: str
    parent: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    admin_access: bool | None
    tolerations: tuple[Toleration, ...]
    capacity_requests: Mapping[str, Quantity]
    is_subrequest: bool
    derived_attributes: tuple[DerivedAttribute, ...] = ()
    """``derivedAttributes`` (KEP-6080, gate DRADerivedAttributes), in spec order."""

    @property
    def label(self) -> str:
        """How upstream messages name it: ``request <sub>`` prints the subrequest's own name."""
        return self.name.rpartition("/")[2]


@dataclass(frozen=True, slots=True)
class Request:
    """``DeviceRequest``: exactly one alternative for ``exactly``, several for ``firstAvailable``."""

    name: str
    alternatives: tuple[DeviceRequest, ...]
    first_available: bool


@dataclass(frozen=True, slots=True)
class Constraint:
    """``DeviceConstraint``: matchAttribute or distinctAttribute over ``requests`` (empty = all)."""

    requests: tuple[str, ...]
    match_attribute: str
    distinct_attribute: str

    def applies_to(self, request: DeviceRequest) -> bool:
        return not self.requests or request.parent in self.requests or request.name in self.requests


@dataclass(frozen=True, slots=True)
class Claim:
    """``ResourceClaim`` as the allocator needs it; ``key`` is ``namespace/name`` (upstream klog form)."""

    namespace: str
    name: str
    uid: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Mapping[str, Any], ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _device_request(
    data: Mapping[str, Any], name: str, parent: str, at: _Path, *, sub: bool
) -> DeviceRequest:
    mode = _str(data.get("allocationMode"), at / "allocationMode") or "ExactCount"
    capacity = _mapping(data.get("capacity"), at / "capacity")
    admin = data.get("adminAccess")
    if admin is not None and not isinstance(admin, bool):
        raise (at / "adminAccess").error(f"must be a boolean, got {type(admin).__name__}")
    count = _int(data.get("count"), at / "count", 1)
    if mode == "ExactCount" and count < 1:
        raise (at / "count").error("must be greater than zero")
    return DeviceRequest(
        name=name,
        parent=parent,
        class_name=_str(data.get("deviceClassName"), at / "deviceClassName"),
        selectors=_selectors(data.get("selectors"), at / "selectors"),
        mode=mode,
        count=count if mode == "ExactCount" else 0,
        admin_access=admin,
        tolerations=tuple(
            _parse_toleration(t, at / "tolerations" / i)
            for i, t in enumerate(_list(data.get("tolerations"), at / "tolerations"))
        ),
        capacity_requests={
            k: _quantity(v, at / "capacity" / "requests" / k)
            for k, v in _mapping(capacity.get("requests"), at / "capacity" / "requests").items()
        },
        is_subrequest=sub,
        derived_attributes=_derived_attributes(data.get("derivedAttributes"), at / "derivedAttributes"),
    )


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def qualified_name_problem(name: str) -> str:
    """Why ``name`` is not a ``QualifiedName`` (``[domain/]id``: a DNS subdomain of at most 63 characters
    and a C identifier of at most 32), or "" when it is one."""
    domain, slash, ident = name.rpartition("/")
    if not _C_IDENTIFIER.fullmatch(ident) or len(ident) > 32:
        return f"{ident!r} must be a C identifier of at most 32 characters"
    if slash and (not _DNS_SUBDOMAIN.fullmatch(domain) or len(domain) > 63):
        return f"domain {domain!r} must be a DNS subdomain of at most 63 characters"
    return ""


def _derived_attributes(raw: Any, at: _Path) -> tuple[DerivedAttribute, ...]:
    entries = _list(raw, at)
    if len(entries) > MAX_DERIVED_ATTRIBUTES:
        raise at.error(f"must have at most {MAX_DERIVED_ATTRIBUTES} entries, got {len(entries)}")
    result: list[DerivedAttribute] = []
    for i, entry in enumerate(entries):
        data = _mapping(entry, at / i, required=True)
        name = _str(data.get("name"), at / i / "name", required=True)
        problem = qualified_name_problem(name)
        if problem:
            raise (at / i / "name").error(problem)
        if any(d.name == name for d in result):
            raise (at / i / "name").error(f"duplicate derived attribute name {name}")
        expression = _str(data.get("expression"), at / i / "expression", required=True)
        result.append(DerivedAttribute(name, expression))
    return tuple(result)


def _request(raw: Any, at: _Path) -> Request:
    data = _mapping(raw, at, required=True)
    name = _str(data.get("name"), at / "name", required=True)
    if data.get("deviceClassName") is not None:
        raise at.error("flat request fields belong under 'exactly' in resource.k8s.io/v1")
    exactly, first = data.get("exactly"), data.get("firstAvailable")
    if (exactly is None) == (first is None):
        raise at.error("exactly one of 'exactly' or 'firstAvailable' must be set")
    if exactly is not None:
        alternative = _device_request(
            _mapping(exactly, at / "exactly"), name, name, at / "exactly", sub=False
        )
        return Request(name, (alternative,), first_available=False)
    subs = []
    for i, sub in enumerate(_list(first, at / "firstAvailable")):
        sub_at = at / "firstAvailable" / i
        sub_data = _mapping(sub, sub_at, required=True)
        sub_name = _str(sub_data.get("name"), sub_at / "name", required=True)
        subs.append(_device_request(sub_data, f"{name}/{sub_name}", name, sub_at, sub=True))
    if not subs:
        raise (at / "firstAvailable").error("must have at least one subrequest")
    return Request(name, tuple(subs), first_available=True)


def parse_claim(obj: Mapping[str, Any], *, same_spec: Claim | None = None) -> Claim:
    """Convert a resource.k8s.io/v1 ResourceClaim dict (spec only). Raises InvalidInputError.

    ``same_spec``: a claim parsed from an equal spec (claims made from one template): its requests,
    constraints and config are taken as they are, and only this claim's identity is read."""
    namespace, name, claim_at = _object_name("ResourceClaim", obj)
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    if same_spec is not None:
        return replace(same_spec, namespace=namespace, name=name, uid=uid)
    at = claim_at / "spec"
    devices = _mapping(_mapping(obj.get("spec"), at).get("devices"), at / "devices")
    requests = tuple(
        _request(r, at / "devices" / "requests" / i)
        for i, r in enumerate(_list(devices.get("requests"), at / "devices" / "requests"))
    )
    if len(requests) > MAX_REQUESTS_PER_CLAIM:
        raise (at / "devices" / "requests").error(f"must have at most {MAX_REQUESTS_PER_CLAIM} items")
    seen: set[str] = set()
    for i, request in enumerate(requests):
        if request.name in seen:
            raise (at / "devices" / "requests" / i / "name").error(f"duplicate request name {request.name}")
        seen.add(request.name)
    known = seen | {alt.name for request in requests for alt in request.alternatives}
    constraints = []
    for i, raw in enumerate(_list(devices.get("constraints"), at / "devices" / "constraints")):
        c_at = at / "devices" / "constraints" / i
        data = _mapping(raw, c_at, required=True)
        named = _strings(data.get("requests"), c_at / "requests")
        for j, request_name in enumerate(named):
            if request_name not in known:
                raise (c_at / "requests" / j).error(
                    f"no request or subrequest named {request_name} in this claim"
                )
        constraints.append(
            Constraint(
                requests=named,
                match_attribute=_str(data.get("matchAttribute"), c_at / "matchAttribute"),
                distinct_attribute=_str(data.get("distinctAttribute"), c_at / "distinctAttribute"),
            )
        )
    return Claim(
        namespace=namespace,
        name=name,
        uid=uid,
        requests=requests,
        constraints=tuple(constraints),
        config=tuple(
            _mapping(c, at / "devices" / "config" / i, required=True)
            for i, c in enumerate(_list(devices.get("config"), at / "devices" / "config"))
        ),
    )
