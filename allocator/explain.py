"""Why a request can or cannot get devices on a node: the device funnel, stage by stage.

For one request alternative (an ``exactly`` request or one ``firstAvailable`` subrequest) on one node,
every device the node sees goes through the same rules the search applies (allocator-semantics §5-§12),
grouped into stages in this order::

    in_pools            devices of complete, valid pools visible from the node
    class_selectors     DeviceClass selectors, the DRADeviceBindingConditions gate, optional node operations
                        (``allocator.nodeoperations``), cluster-wide derived attributes that failed on
                        the device
    request_selectors   the request's own selectors
    tolerations         NoSchedule / NoExecute taints (the device's own and DeviceTaintRules) tolerated
    not_in_use          not allocated to another claim, not reserved by a bind in flight
    counters_capacity   shared counters left in the pool, consumable capacity (KEP-4815, KEP-5075)
    constraints         the claim's matchAttribute / distinctAttribute constraints covering the request

Each stage keeps the number of devices still usable and a few named examples of devices it removed, with
the rule (``rule``, a short stable identifier) and a sentence (``message``). Device checks never raise: a
CEL error on a device is reported as that device's rejection (the search itself treats it as fatal).
Stages are computed per device and independently of the other requests, except ``constraints`` which
looks at the devices every covered request has left; the counts are therefore upper bounds of what the
search can use, and the search's verdict is authoritative.

The same checks serve ``allocator.diagnose`` (the one-line no-fit reason of filter), the aligned device
selection (``allocator.alignment``: which devices a pod could use), the explanation endpoints and the
utilisation summary (``class_usage``).

One module, about 800 lines: the funnel's stages are the search's per-device checks in the search's order
(``DeviceChecker``) plus the constraint stage; diagnose, counting, alignment and the explanations read these
same stages, which must not drift apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from allocator.capacity import capacity_consumption
from allocator.cel import AttributeValue, Version
from allocator.constraints import lookup_attribute
from allocator.derived import NO_DERIVED_VALUES, request_derived_values
from allocator.errors import CapacityRequestError, CELError
from allocator.inventory import Inventory, counters_left
from allocator.model import Claim, Constraint, Device, DeviceRequest, ResourceSlice, Taint
from allocator.nodeoperations import DECLARED_FEATURE, allocatable_on
from allocator.nodeselector import Node
from allocator.pools import PoolView, device_on_node
from allocator.quantity import format_like
from allocator.selectors import SelectorCache

__all__ = [
    "EXAMPLES_PER_STAGE",
    "STAGES",
    "STAGE_TITLES",
    "ClassUsage",
    "DeviceChecker",
    "NodeDevice",
    "Rejection",
    "RequestFunnel",
    "Stage",
    "claim_funnels",
    "class_matches",
    "class_usage",
    "counters_left",
    "device_label",
    "node_devices",
    "request_funnel",
    "taint_source",
]

STAGES = (
    "in_pools",
    "class_selectors",
    "request_selectors",
    "tolerations",
    "not_in_use",
    "counters_capacity",
    "constraints",
)
"""Funnel stages, in the order devices pass them."""

STAGE_TITLES = {
    "in_pools": "in pools on this node",
    "class_selectors": "class selectors",
    "request_selectors": "request selectors",
    "tolerations": "taints tolerated",
    "not_in_use": "not in use",
    "counters_capacity": "counters / capacity",
    "constraints": "constraints",
}
"""How people read the stages (CLI column headers)."""

EXAMPLES_PER_STAGE = 3
"""Named rejected devices kept per stage: enough to see the rule, short enough to read."""

_PER_DEVICE_STAGES = STAGES[:-1]


# --- results --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rejection:
    """One device removed at ``stage`` by ``rule`` (e.g. ``taint``), with a readable ``message``."""

    device: str
    """``driver/pool/device``."""
    stage: str
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class Stage:
    """Devices left after one stage, how many it removed, and up to ``EXAMPLES_PER_STAGE`` of them."""

    name: str
    count: int
    rejected: int
    examples: tuple[Rejection, ...]
    rules: Mapping[str, int] = field(default_factory=dict)
    """Rejections per rule at this stage (``{"taint": 1}``)."""

    @property
    def title(self) -> str:
        return STAGE_TITLES[self.name]


@dataclass(frozen=True, slots=True)
class RequestFunnel:
    """The funnel of one request alternative (``request`` is ``req`` or ``req/sub``) on one node."""

    claim: str
    request: str
    device_class: str
    mode: str
    needed: int
    """ExactCount: ``count``; All: every device matching the selectors (at least 1)."""
    stages: tuple[Stage, ...]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def count(self, name: str) -> int:
        """Devices left after stage ``name``; for a stage not computed, those left after the last one."""
        for stage in self.stages:
            if stage.name == name:
                return stage.count
        return self.usable

    @property
    def usable(self) -> int:
        """Devices left after the last computed stage."""
        return self.stages[-1].count if self.stages else 0

    @property
    def short(self) -> str:
        """The first stage after which fewer devices than ``needed`` are left, or ''."""
        for stage in self.stages:
            if stage.count < self.needed:
                return stage.name
        return ""


# --- per-device checks ------------------------------------------------------------------------------------


def device_label(device: Device) -> str:
    return f"{device.driver}/{device.pool}/{device.name}"


def taint_source(taint: Taint, slice_name: str) -> str:
    """Where a taint comes from: ``DeviceTaintRule <name>`` or ``ResourceSlice <name>``."""
    return taint.source or f"ResourceSlice {slice_name}"


def _taint_text(taint: Taint) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


@dataclass(frozen=True, slots=True)
class NodeDevice:
    """A device as the node sees it: its pool view and the slice it was published in."""

    pool: PoolView
    slice: ResourceSlice
    device: Device


def node_devices(inventory: Inventory, node: Node) -> Iterator[NodeDevice]:
    """Every device visible from ``node`` in search order, usable pools or not."""
    for pool in inventory.pools_for(node):
        for slice_ in pool.slices:
            for device in slice_.devices:
                if slice_.per_device_node_selection and not device_on_node(device, node):
                    continue
                yield NodeDevice(pool, slice_, device)


def class_matches(selectors: SelectorCache, inventory: Inventory, class_name: str, device: Device) -> bool:
    """Whether the DeviceClass selectors accept the device (False for an unknown class or a CEL error)."""
    device_class = inventory.device_class(class_name)
    if device_class is None:
        return False
    try:
        return inventory.class_matches(device_class, device, selectors)
    except CELError:
        return False


def _selector_rejection(
    selectors: SelectorCache,
    expressions: Sequence[str],
    device: Device,
    owner: str,
    stage: str,
    rule: str,
) -> Rejection | None:
    for i, expression in enumerate(expressions):
        try:
            if not selectors.matches(expression, device, owner, i):
                return Rejection(
                    device_label(device), stage, rule, f"{owner}: selector #{i} is false: {expression}"
                )
        except CELError as e:
            return Rejection(device_label(device), stage, "cel-error", str(e))
    return None


def _capacity_rejection(inventory: Inventory, device: Device, alt: DeviceRequest) -> Rejection | None:
    label = device_label(device)
    try:
        consumption = capacity_consumption(
            device, alt.capacity_requests, inventory.gates.DRAFractionalCapacityRange
        )
    except CapacityRequestError as e:
        return Rejection(label, "counters_capacity", "capacity-error", str(e))
    if (
        not device.allow_multiple_allocations
        and inventory.is_allocated(device.id)
        and not inventory.is_exclusively_allocated(device.id)
    ):
        return Rejection(
            label,
            "counters_capacity",
            "capacity",
            "device has shares allocated but no longer allows multiple allocations",
        )
    if consumption is None:
        missing = [
            name
            for name in alt.capacity_requests
            if name not in device.capacity and name.rpartition("/")[2] not in device.capacity
        ]
        if missing:
            text = f"device has no capacity {', '.join(sorted(missing))}"
        else:
            wanted = ", ".join(f"{k}={q.text}" for k, q in sorted(alt.capacity_requests.items()))
            text = f"requested capacity {wanted} does not fit the device's capacity or request policy"
        return Rejection(label, "counters_capacity", "capacity", text)
    if device.allow_multiple_allocations:
        if inventory.is_exclusively_allocated(device.id):
            return Rejection(label, "counters_capacity", "capacity", "device is allocated exclusively")
        used = inventory.consumed_capacity(device.id)
        for name, amount in sorted(consumption.items()):
            total = device.capacity[name].value
            left = total.value - used.get(name, Fraction(0))
            if amount > left:
                return Rejection(
                    label,
                    "counters_capacity",
                    "capacity",
                    f"capacity {name}: needs {format_like(amount, total)}, "
                    f"{format_like(max(left, Fraction(0)), total)} of {total.text} left",
                )
    return None


def _counter_rejection(
    inventory: Inventory, pool: PoolView, device: Device, left: Mapping[str, Mapping[str, Fraction]]
) -> Rejection | None:
    if device.allow_multiple_allocations and inventory.is_shared(device.id):
        return None  # counters are consumed once, by the device's first share
    for consumption in device.consumes_counters:
        available = left.get(consumption.counter_set, {})
        for name, amount in sorted(consumption.counters.items()):
            have = available.get(name, Fraction(0))
            if amount.value > have:
                return Rejection(
                    device_label(device),
                    "counters_capacity",
                    "counters",
                    f"counter set {consumption.counter_set}: {name} needs {amount.text}, "
                    f"{format_like(max(have, Fraction(0)), amount)} left in pool {pool.pool}",
                )
    return None


class DeviceChecker:
    """Per-device checks against one inventory snapshot; counters left per pool are computed once, so
    use one checker per decision (not across inventory changes)."""

    def __init__(self, inventory: Inventory, selectors: SelectorCache, node: Node) -> None:
        self.inventory = inventory
        self.selectors = selectors
        self.node = node
        self.gates = inventory.gates
        self._counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}

    def in_use(self, alt: DeviceRequest, device: Device) -> bool:
        """The ``not_in_use`` rule: another claim holds the device exclusively (adminAccess requests and
        shares of multi-allocatable devices are not kept out by that)."""
        if alt.admin_access or (self.gates.DRAConsumableCapacity and device.allow_multiple_allocations):
            return False
        return self.inventory.is_exclusively_allocated(device.id)

    def _node_operations(self, slice_name: str) -> str:
        if not self.gates.DRAOptionalNodeOperations:
            why = f"the {DECLARED_FEATURE} feature is disabled"
        else:
            why = f"node {self.node.name} does not declare {DECLARED_FEATURE}"
        return f"slice {slice_name} skips node operations and {why}"

    def check(
        self, claim: Claim, alt: DeviceRequest, nd: NodeDevice, *, last: str = "counters_capacity"
    ) -> Rejection | None:
        """The first rule rejecting the device, checking the stages up to ``last`` (inclusive)."""
        pool, device = nd.pool, nd.device
        label = device_label(device)
        gates, inventory = self.gates, self.inventory
        if pool.incomplete:
            return Rejection(label, "in_pools", "pool-incomplete", f"pool {pool.pool} is incomplete")
        if pool.invalid:
            return Rejection(
                label, "in_pools", "pool-invalid", f"pool {pool.pool} is invalid: {pool.invalid}"
            )
        if last == "in_pools":
            return None
        device_class = inventory.device_class(alt.class_name)
        if device_class is None:
            return Rejection(
                label, "class_selectors", "class-missing", f"DeviceClass {alt.class_name} not found"
            )
        if device.binding_conditions and not gates.DRADeviceBindingConditions:
            return Rejection(
                label,
                "class_selectors",
                "binding-conditions",
                "device has binding conditions and the DRADeviceBindingConditions feature is disabled",
            )
        if not allocatable_on(nd.slice, self.node, gates):
            return Rejection(
                label, "class_selectors", "node-operations", self._node_operations(nd.slice.name)
            )
        # The class-match index answers without evaluating CEL; only a rejected device is looked at
        # selector by selector, to name the selector that said no.
        try:
            admitted = inventory.class_matches(device_class, device, self.selectors)
        except CELError as e:
            return Rejection(label, "class_selectors", "cel-error", str(e))
        if not admitted and len(device_class.selectors) == 1:
            owner = f"class {device_class.name}"
            return Rejection(
                label,
                "class_selectors",
                "class-selector",
                f"{owner}: selector #0 is false: {device_class.selectors[0]}",
            )
        if not admitted:
            found = _selector_rejection(
                self.selectors,
                device_class.selectors,
                device,
                f"class {device_class.name}",
                "class_selectors",
                "class-selector",
            )
            if found is not None:
                return found
        if last == "class_selectors":
            return None
        found = _selector_rejection(
            self.selectors,
            alt.selectors,
            device,
            f"claim {claim.key}",
            "request_selectors",
            "request-selector",
        )
        if found is not None or last == "request_selectors":
            return found
        if gates.DRADeviceTaints:
            for taint in inventory.taints(device):
                if taint.blocks_allocation and not any(t.tolerates(taint) for t in alt.tolerations):
                    return Rejection(
                        label,
                        "tolerations",
                        "taint",
                        f"taint {_taint_text(taint)} from {taint_source(taint, nd.slice.name)} "
                        "is not tolerated",
                    )
        if last == "tolerations":
            return None
        if self.in_use(alt, device):
            holders = ", ".join(inventory.holders(device.id)) or "another claim"
            return Rejection(label, "not_in_use", "in-use", f"allocated to {holders}")
        if last == "not_in_use":
            return None
        if device.consumes_counters:
            if not gates.DRAPartitionableDevices:
                return Rejection(
                    label,
                    "counters_capacity",
                    "partitionable-disabled",
                    "device consumes counters and the DRAPartitionableDevices feature is disabled",
                )
            left = self._counters.get(pool.id)
            if left is None:
                left = self._counters[pool.id] = counters_left(inventory, pool)
            found = _counter_rejection(inventory, pool, device, left)
            if found is not None:
                return found
        if gates.DRAConsumableCapacity:
            return _capacity_rejection(inventory, device, alt)
        return None


# --- funnels ----------------------------------------------------------------------------------------------


def _needed(alt: DeviceRequest, matching: int) -> int:
    return alt.count if alt.mode == "ExactCount" else max(matching, 1)


def _stages(
    counts: Mapping[str, int],
    rejected: Mapping[str, list[Rejection]],
    start: int,
    names: Sequence[str],
    examples: int,
) -> tuple[Stage, ...]:
    stages = []
    left = start
    for name in names:
        removed = rejected.get(name, [])
        left -= len(removed)
        rules: dict[str, int] = defaultdict(int)
        for r in removed:
            rules[r.rule] += 1
        stages.append(
            Stage(name, counts.get(name, left), len(removed), tuple(removed[:examples]), dict(rules))
        )
    return tuple(stages)


@dataclass(slots=True)
class _Partial:
    claim: Claim
    alt: DeviceRequest
    total: int
    rejected: dict[str, list[Rejection]]
    survivors: list[Device]


def _partial(
    checker: DeviceChecker, devices: Sequence[NodeDevice], claim: Claim, alt: DeviceRequest, last: str
) -> _Partial:
    rejected: dict[str, list[Rejection]] = defaultdict(list)
    survivors = []
    for nd in devices:
        found = checker.check(claim, alt, nd, last=last)
        if found is None:
            survivors.append(nd.device)
        else:
            rejected[found.stage].append(found)
    return _Partial(claim, alt, len(devices), rejected, survivors)


def request_funnel(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claim: Claim,
    alt: DeviceRequest,
    *,
    last: str = "counters_capacity",
    examples: int = EXAMPLES_PER_STAGE,
) -> RequestFunnel:
    """The funnel of one request alternative on ``node``, per-device stages up to ``last``.

    ``constraints`` needs the other requests of the claim: use ``claim_funnels`` for it."""
    names = STAGES[: STAGES.index(last) + 1]
    devices = list(node_devices(inventory, node))
    part = _partial(DeviceChecker(inventory, selectors, node), devices, claim, alt, last)
    stages = _stages({}, part.rejected, part.total, names, examples)
    matching = stages[min(2, len(stages) - 1)].count
    return RequestFunnel(claim.key, alt.name, alt.class_name, alt.mode, _needed(alt, matching), stages)


def claim_funnels(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claim: Claim,
    *,
    examples: int = EXAMPLES_PER_STAGE,
) -> list[RequestFunnel]:
    """Full funnels (every stage, constraints included) for every request alternative of ``claim``."""
    checker = DeviceChecker(inventory, selectors, node)
    devices = list(node_devices(inventory, node))
    parts = [
        _partial(checker, devices, claim, alt, "counters_capacity")
        for request in claim.requests
        for alt in request.alternatives
    ]
    funnels = []
    for part in parts:
        matching = part.total - sum(len(part.rejected[s]) for s in STAGES[:3])
        needed = _needed(part.alt, matching)
        kept, removed = _constraint_stage(claim, part, parts, needed, inventory, selectors)
        rejected = dict(part.rejected)
        rejected["constraints"] = removed
        counts = {"constraints": kept}
        stages = _stages(counts, rejected, part.total, STAGES, examples)
        funnels.append(
            RequestFunnel(claim.key, part.alt.name, part.alt.class_name, part.alt.mode, needed, stages)
        )
    return funnels


# --- constraints ------------------------------------------------------------------------------------------


_Key = tuple[type, object]


class _Alone:
    """Key type of a list-typed value while DRAListTypeAttributes is off: it matches no other device."""


def _list_gate_off(name: str, value: AttributeValue, outcome: str) -> str:
    return (
        f"{name}={_show(value)} is list-typed: with the DRAListTypeAttributes feature disabled a list "
        f"{outcome}"
    )


def _values(value: AttributeValue, lists: bool, device: Device) -> tuple[_Key, ...]:
    """Comparable keys of an attribute value (each element of a list with DRAListTypeAttributes)."""
    if isinstance(value, tuple):
        return tuple((type(v), v) for v in value) if lists else ((_Alone, id(device)),)
    return ((type(value), value),)


def _show(value: object) -> str:
    if isinstance(value, Version):
        return value.text
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def _constraint_value(
    selectors: SelectorCache, claim: Claim, alt: DeviceRequest, device: Device, name: str, lists: bool
) -> tuple[AttributeValue | None, tuple[_Key, ...]]:
    """What a constraint compares for ``name`` on ``device``: the request's derived attribute (KEP-6080),
    else the device's own, and its comparison keys (list semantics with ``lists``, DRAListTypeAttributes).
    Raises CELEvalError when a derived attribute fails on the device."""
    derived = (
        request_derived_values(selectors, claim, alt, device) if alt.derived_attributes else NO_DERIVED_VALUES
    )
    value = lookup_attribute(name, device, derived)
    if value is None:
        return None, ()
    return value, _values(value, lists, device)


def _constraint_stage(
    claim: Claim,
    part: _Partial,
    parts: Sequence[_Partial],
    needed: int,
    inventory: Inventory,
    selectors: SelectorCache,
) -> tuple[int, list[Rejection]]:
    """How many devices of ``part`` can be used together under the claim's constraints, and the devices
    no allocation can use (no attribute, or a value too few devices of every covered request share)."""
    lists = inventory.gates.DRAListTypeAttributes
    usable = list(part.survivors)
    together = len(usable)
    removed: list[Rejection] = []
    for index, constraint in enumerate(claim.constraints):
        if not constraint.applies_to(part.alt):
            continue
        name = constraint.match_attribute or constraint.distinct_attribute
        if not name:
            continue
        kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
        rule = f"constraint #{index} {kind}"
        with_value = []
        for device in usable:
            try:
                value, keys = _constraint_value(selectors, claim, part.alt, device, name, lists)
            except CELError as e:
                removed.append(Rejection(device_label(device), "constraints", "cel-error", str(e)))
                continue
            if value is None:
                removed.append(
                    Rejection(device_label(device), "constraints", rule, f"device has no attribute {name}")
                )
            else:
                with_value.append((device, value, keys))
        if constraint.match_attribute:
            usable, largest = _match_groups(
                constraint, part, parts, with_value, needed, lists, rule, removed, selectors
            )
        else:
            usable = _distinct(name, with_value, rule, removed)
            largest = len(usable)
        together = min(together, largest)
    return min(together, len(usable)), removed


def _match_groups(
    constraint: Constraint,
    part: _Partial,
    parts: Sequence[_Partial],
    with_value: list[tuple[Device, AttributeValue, tuple[_Key, ...]]],
    needed: int,
    lists: bool,
    rule: str,
    removed: list[Rejection],
    selectors: SelectorCache,
) -> tuple[list[Device], int]:
    """Devices of ``part`` whose value a usable set of ``needed`` devices can share (with every other covered
    request), and how many devices can be used together (the largest set sharing one value)."""
    name = constraint.match_attribute
    # Per other covered request: the values it can meet with enough devices of its own (any alternative).
    others: dict[str, set[_Key]] = defaultdict(set)
    for other in parts:
        parent = other.alt.parent
        if other.claim is not part.claim or parent == part.alt.parent or not constraint.applies_to(other.alt):
            continue
        counts: dict[_Key, int] = defaultdict(int)
        for device in other.survivors:
            try:
                _, keys = _constraint_value(selectors, other.claim, other.alt, device, name, lists)
            except CELError:
                continue
            for key in keys:
                counts[key] += 1
        minimum = other.alt.count if other.alt.mode == "ExactCount" else 1
        others[parent] |= {k for k, n in counts.items() if n >= minimum}
    groups: dict[_Key, list[Device]] = defaultdict(list)
    for device, _, keys in with_value:
        for key in keys:
            if all(key in feasible for feasible in others.values()):
                groups[key].append(device)
    largest = max((len(g) for g in groups.values()), default=0)
    feasible_keys = {k for k, g in groups.items() if len(g) >= needed}
    if not feasible_keys:  # short: keep the largest group, to show how close it gets
        feasible_keys = {next(k for k, g in groups.items() if len(g) == largest)} if groups else set()
    kept = {id(d) for k in feasible_keys for d in groups[k]}
    for device, value, keys in with_value:
        if id(device) in kept:
            continue
        present = [k for k in keys if k in groups]
        if keys[0][0] is _Alone:
            why = _list_gate_off(name, value, "matches no other device")
        elif not present:
            why = f"{name}={_show(value)} is not available to every request the constraint covers"
        else:
            size = max(len(groups[k]) for k in present)
            why = f"only {size} usable device(s) have {name}={_show(value)}, {needed} needed"
            if largest < needed:
                why += f" (at most {largest} share one value)"
        removed.append(Rejection(device_label(device), "constraints", rule, why))
    return [d for d, _, _ in with_value if id(d) in kept], largest


def _distinct(
    name: str,
    with_value: list[tuple[Device, AttributeValue, tuple[_Key, ...]]],
    rule: str,
    removed: list[Rejection],
) -> list[Device]:
    seen: dict[_Key, Device] = {}
    kept = []
    for device, value, keys in with_value:
        if keys[0][0] is _Alone and kept:
            why = _list_gate_off(name, value, "is distinct only as the first device")
            removed.append(Rejection(device_label(device), "constraints", rule, why))
            continue
        taken = next((seen[k] for k in keys if k in seen), None)
        if taken is not None:
            removed.append(
                Rejection(
                    device_label(device),
                    "constraints",
                    rule,
                    f"attribute value {_show(value)} already used by {device_label(taken)}",
                )
            )
            continue
        for key in keys:
            seen[key] = device
        kept.append(device)
    return kept


# --- utilisation --------------------------------------------------------------------------------------------


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
