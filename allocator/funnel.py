"""Why a request can or cannot get devices on a node: the device funnel, stage by stage.

For one request alternative (an ``exactly`` request or one ``firstAvailable`` subrequest) on one node,
every device the node sees goes through the rules the search applies (``allocator.devicerules``, the one
definition both ask; allocator-semantics §5-§12), grouped into stages in this order::

    in_pools            devices of complete, valid pools visible from the node
    class_selectors     DeviceClass selectors, binding conditions (DRADeviceBindingConditions and
                        DRAResourceClaimDeviceStatus), optional node operations (``allocator.nodeoperations``)
    request_selectors   the request's own selectors
    tolerations         NoSchedule / NoExecute taints (the device's own and DeviceTaintRules) tolerated
    not_in_use          not allocated to another claim, not reserved by a bind in flight
    counters_capacity   shared counters left in the pool and compatibility groups, consumable capacity
                        (KEP-4815, KEP-5963, KEP-5075)
    constraints         the claim's matchAttribute / distinctAttribute constraints covering the request

Each stage keeps the number of devices still usable and a few named examples of devices it removed, with
the rule (``rule``, a short stable identifier) and a sentence (``message``). Device checks never raise: a
CEL error on a device is reported as that device's rejection (the search itself treats it as fatal).
Stages are computed per device and independently of the other requests, except ``constraints`` which
looks at the devices every covered request has left: after the per-device stages the count is exactly the
devices the search could pick for the request alone; after ``constraints`` an upper bound of what it can
use, and the search's verdict is authoritative.

The same checks serve ``allocator.diagnose`` (the one-line no-fit reason of filter), ``allocator.counting``,
the aligned device selection (``allocator.alignment``: which devices a pod could use), the explanation
endpoints and the utilisation summary (``allocator.classusage``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from allocator.cel import AttributeValue, Version
from allocator.constraints import lookup_attribute
from allocator.counterledger import CounterLedger
from allocator.derived import NO_DERIVED_VALUES, request_derived_values
from allocator.devicerules import DeviceRules, Refusal, device_label, on_node, taint_source
from allocator.errors import CapacityRequestError, CELError
from allocator.inventory import Inventory, counters_left
from allocator.model import Claim, Constraint, Device, DeviceRequest, ResourceSlice
from allocator.nodeselector import Node
from allocator.pools import PoolView
from allocator.selectors import SelectorCache

__all__ = [
    "EXAMPLES_PER_STAGE",
    "STAGES",
    "STAGE_TITLES",
    "DeviceChecker",
    "NodeDevice",
    "Rejection",
    "RequestFunnel",
    "Stage",
    "claim_funnels",
    "class_matches",
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
    why: Refusal | str
    """The sentence, or the rule's refusal that writes it when read (most rejections are only counted)."""

    @property
    def message(self) -> str:
        return self.why if isinstance(self.why, str) else self.why.message


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


@dataclass(frozen=True, slots=True)
class NodeDevice:
    """A device as the node sees it: its pool view and the slice it was published in."""

    pool: PoolView
    slice: ResourceSlice
    device: Device


def node_devices(inventory: Inventory, node: Node) -> Iterator[NodeDevice]:
    """Every device visible from ``node`` in search order, usable pools or not (per-device node selection,
    ``allocator.devicerules.on_node``, leaves out the devices of other nodes)."""
    for pool in inventory.pools_for(node):
        for slice_ in pool.slices:
            for device in slice_.devices:
                if on_node(slice_, device, node):
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


class DeviceChecker:
    """The device rules (``allocator.devicerules``) in the funnel's stage order, for one inventory
    snapshot: counters and compatibility groups per pool are computed once, so use one checker per
    decision (not across inventory changes)."""

    def __init__(self, inventory: Inventory, selectors: SelectorCache, node: Node) -> None:
        self.inventory = inventory
        self.rules = DeviceRules(inventory, selectors, node)
        self._ledger = CounterLedger(self.rules)

    def in_use(self, alt: DeviceRequest, device: Device) -> bool:
        """The ``not_in_use`` rule: another claim holds the device."""
        return self.rules.held(alt, device)

    def check(
        self, claim: Claim, alt: DeviceRequest, nd: NodeDevice, *, last: str = "counters_capacity"
    ) -> Rejection | None:
        """The first rule rejecting the device, checking the stages up to ``last`` (inclusive)."""
        found = self._refusal(claim, alt, nd, STAGES.index(last))
        if found is None:
            return None
        if isinstance(found, Rejection):
            return found
        return Rejection(device_label(nd.device), found.stage, found.rule, found)

    def _refusal(
        self, claim: Claim, alt: DeviceRequest, nd: NodeDevice, last: int
    ) -> Refusal | Rejection | None:
        rules, pool, device = self.rules, nd.pool, nd.device
        found = rules.pool(pool)
        if found is not None or last == 0:
            return found
        found = rules.node_operations(nd.slice)
        if found is None:
            try:
                found = rules.device_class(alt, device)
            except CELError as e:
                return Rejection(device_label(device), "class_selectors", "cel-error", str(e))
        if found is not None or last == 1:
            return found
        try:
            found = rules.request_selectors(claim, alt, device)
        except CELError as e:
            return Rejection(device_label(device), "request_selectors", "cel-error", str(e))
        if found is not None or last == 2:
            return found
        found = rules.taints(alt, nd.slice, device)
        if found is not None or last == 3:
            return found
        found = rules.in_use(alt, device)
        if found is not None or last == 4:
            return found
        return self._counters_capacity(claim, alt, nd)

    def _counters_capacity(
        self, claim: Claim, alt: DeviceRequest, nd: NodeDevice
    ) -> Refusal | Rejection | None:
        rules, device = self.rules, nd.device
        if device.consumes_counters:
            found = self._ledger.refusal(nd.pool, device)
            if found is not None:
                return found
        if not rules.gates.DRAConsumableCapacity:
            return None
        try:
            consumption = rules.consumption(claim, alt, device)
        except CapacityRequestError as e:
            return Rejection(device_label(device), "counters_capacity", "capacity-error", str(e))
        return rules.capacity(alt, device, consumption)


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
    kept: list[Device] = []
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
