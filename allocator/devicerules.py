"""Every per-device rule of allocation, defined once: the search asks it yes/no, the funnel for the reason.

A rule answers None when the device passes and a ``Refusal`` when it does not: the funnel stage the rule
belongs to, a short stable identifier (``rule``) and a sentence (``message``), written only when someone
reads it, so that the search, which only tests for None, pays for no text. The rules the search asks for
every device have a yes/no form the refusal is built on (``admits_class``, ``admits_request`` and both as
``selectable``; ``held``; ``could_fit``). Rules read the inventory's allocations; where the search has
placed devices of its own (counters taken, capacity pending, shares), it passes what it holds, and the
funnel, which looks at one device at a time, passes nothing.

The rules, in the funnel's stages (``allocator.funnel``):

* ``in_pools``: the device's pool is complete and valid (``pool``); a device of a
  ``perDeviceNodeSelection`` slice is on the node (``on_node``, a function: it needs no inventory);
* ``class_selectors``: a slice that skips node operations needs a node declaring them (``node_operations``);
  devices with binding conditions need DRADeviceBindingConditions and DRAResourceClaimDeviceStatus, as
  kube-scheduler enables them, and the DeviceClass selectors admit the device (``device_class``);
* ``request_selectors``: the request's own selectors (``request_selectors``);
* ``tolerations``: every NoSchedule / NoExecute taint tolerated (``taints``);
* ``not_in_use``: no other claim holds the device (``in_use``);
* ``counters_capacity``: counters left in the pool (``counters``, with DRAPartitionableDevices and
  compatibility groups), consumable capacity that could hold the request (``could_fit``) and is left
  (``capacity``).

Selector rules raise CELError (fatal for the pod in the search, a ``cel-error`` rejection in the funnel);
``consumption`` raises CapacityRequestError likewise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from functools import partial

from allocator.capacity import capacity_consumption
from allocator.compatibility import GroupIntersection
from allocator.errors import CapacityRequestError, CELError
from allocator.inventory import Inventory
from allocator.model import Claim, CounterConsumption, Device, DeviceRequest, ResourceSlice, Taint
from allocator.nodeoperations import DECLARED_FEATURE, allocatable_on
from allocator.nodeselector import Node
from allocator.pools import PoolView, device_on_node
from allocator.quantity import Quantity, format_like
from allocator.selectors import SelectorCache

__all__ = ["DeviceRules", "Refusal", "device_label", "on_node", "taint_source"]

_NOTHING: Mapping[str, Fraction] = {}


class Refusal:
    """Why a rule refuses a device: the funnel ``stage``, the ``rule`` and, on demand, the ``message``."""

    __slots__ = ("_message", "_text", "rule", "stage")

    def __init__(self, stage: str, rule: str, text: Callable[[], str]) -> None:
        self.stage = stage
        self.rule = rule
        self._text = text
        self._message: str | None = None

    @property
    def message(self) -> str:
        if self._message is None:
            self._message = self._text()
        return self._message


def device_label(device: Device) -> str:
    return f"{device.driver}/{device.pool}/{device.name}"


def taint_source(taint: Taint, slice_name: str) -> str:
    """Where a taint comes from: ``DeviceTaintRule <name>`` or ``ResourceSlice <name>``."""
    return taint.source or f"ResourceSlice {slice_name}"


def _untolerated(taint: Taint, slice_name: str) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"taint {taint.key}{value}:{taint.effect} from {taint_source(taint, slice_name)} is not tolerated"


def on_node(slice_: ResourceSlice, device: Device, node: Node) -> bool:
    """Per-device node selection: a device of a ``perDeviceNodeSelection`` slice names its nodes."""
    return not slice_.per_device_node_selection or device_on_node(device, node)


class DeviceRules:
    """The per-device rules against one inventory snapshot, for pods on ``node``."""

    __slots__ = ("_bindable", "_multi", "gates", "inventory", "node", "selectors")

    def __init__(self, inventory: Inventory, selectors: SelectorCache, node: Node) -> None:
        self.inventory = inventory
        self.selectors = selectors
        self.node = node
        self.gates = gates = inventory.gates
        # kube-scheduler enables binding conditions only with both gates (its DeviceBindingAndStatus).
        self._bindable = gates.DRADeviceBindingConditions and gates.DRAResourceClaimDeviceStatus
        self._multi = gates.DRAConsumableCapacity

    # --- in_pools -----------------------------------------------------------------------------------

    @staticmethod
    def pool(pool: PoolView) -> Refusal | None:
        """Devices of incomplete or invalid pools are never allocated (other pools may still serve)."""
        if pool.usable:
            return None
        if pool.incomplete:
            return Refusal("in_pools", "pool-incomplete", lambda: f"pool {pool.pool} is incomplete")
        return Refusal("in_pools", "pool-invalid", lambda: f"pool {pool.pool} is invalid: {pool.invalid}")

    # --- class_selectors ----------------------------------------------------------------------------

    def node_operations(self, slice_: ResourceSlice) -> Refusal | None:
        """A slice skipping node operations needs a node whose kubelet declares them (KEP-5945)."""
        if allocatable_on(slice_, self.node, self.gates):
            return None

        def text() -> str:
            if not self.gates.DRAOptionalNodeOperations:
                why = f"the {DECLARED_FEATURE} feature is disabled"
            else:
                why = f"node {self.node.name} does not declare {DECLARED_FEATURE}"
            return f"slice {slice_.name} skips node operations and {why}"

        return Refusal("class_selectors", "node-operations", text)

    def selectable(self, claim: Claim, alt: DeviceRequest, device: Device) -> bool:
        """``device_class`` and ``request_selectors`` as one yes/no (the search caches it per request and
        device)."""
        return self.admits_class(alt, device) and (
            not alt.selectors or self.admits_request(claim, alt, device)
        )

    def admits_class(self, alt: DeviceRequest, device: Device) -> bool:
        """Whether the device may serve the request's DeviceClass: a device with binding conditions only
        while kube-scheduler enables them (DRADeviceBindingConditions and DRAResourceClaimDeviceStatus), and
        the class exists and admits it (from the class-match index when attached)."""
        if device.binding_conditions and not self._bindable:
            return False
        device_class = self.inventory.device_class(alt.class_name)
        return device_class is not None and self.inventory.class_matches(device_class, device, self.selectors)

    def device_class(self, alt: DeviceRequest, device: Device) -> Refusal | None:
        if self.admits_class(alt, device):
            return None
        device_class = self.inventory.device_class(alt.class_name)
        if device_class is None:
            return Refusal(
                "class_selectors", "class-missing", lambda: f"DeviceClass {alt.class_name} not found"
            )
        if self.inventory.class_matches(device_class, device, self.selectors):  # refused for its conditions
            return Refusal(
                "class_selectors",
                "binding-conditions",
                lambda: (
                    "device has binding conditions and the DRADeviceBindingConditions and "
                    "DRAResourceClaimDeviceStatus features are not both enabled"
                ),
            )
        owner = f"class {device_class.name}"
        return Refusal(
            "class_selectors",
            "class-selector",
            lambda: self._false_selector(device_class.selectors, device, owner),
        )

    def _false_selector(self, expressions: Sequence[str], device: Device, owner: str) -> str:
        """Which selector refused the device (the yes/no answer does not say)."""
        try:
            for i, expression in enumerate(expressions):
                if not self.selectors.matches(expression, device, owner, i):
                    return f"{owner}: selector #{i} is false: {expression}"
        except CELError as e:
            return str(e)
        return f"{owner}: the selectors do not admit the device"

    # --- request_selectors --------------------------------------------------------------------------

    def admits_request(self, claim: Claim, alt: DeviceRequest, device: Device) -> bool:
        owner = f"claim {claim.key}"
        matches = self.selectors.matches
        # A loop, not all() over a generator: the search's lookahead asks this for every device.
        for i, expression in enumerate(alt.selectors):  # noqa: SIM110
            if not matches(expression, device, owner, i):
                return False
        return True

    def request_selectors(self, claim: Claim, alt: DeviceRequest, device: Device) -> Refusal | None:
        if self.admits_request(claim, alt, device):
            return None
        owner = f"claim {claim.key}"
        return Refusal(
            "request_selectors",
            "request-selector",
            lambda: self._false_selector(alt.selectors, device, owner),
        )

    # --- tolerations --------------------------------------------------------------------------------

    def taints(self, alt: DeviceRequest, slice_: ResourceSlice, device: Device) -> Refusal | None:
        """Every NoSchedule / NoExecute taint (the device's own and DeviceTaintRules') is tolerated."""
        if not self.gates.DRADeviceTaints:
            return None
        for taint in self.inventory.taints(device):
            if taint.blocks_allocation and not any(t.tolerates(taint) for t in alt.tolerations):
                return Refusal(
                    "tolerations",
                    "taint",
                    partial(_untolerated, taint, slice_.name),
                )
        return None

    # --- not_in_use ---------------------------------------------------------------------------------

    def allocated_elsewhere(self, device: Device) -> bool:
        """Claims already allocated keep the device from any other (upstream ``AllocatedDevices``): held
        without shareID, or, with DRAConsumableCapacity off, held at all (every share counts whole)."""
        inventory = self.inventory
        return inventory.is_exclusively_allocated(device.id) or (
            not self._multi and inventory.is_allocated(device.id)
        )

    def held(self, alt: DeviceRequest, device: Device) -> bool:
        """Whether another claim's allocation keeps the device from ``alt``: adminAccess requests may take
        devices in use."""
        return not alt.admin_access and self.allocated_elsewhere(device)

    def in_use(self, alt: DeviceRequest, device: Device) -> Refusal | None:
        if not self.held(alt, device):
            return None
        return Refusal(
            "not_in_use",
            "in-use",
            lambda: f"allocated to {', '.join(self.inventory.holders(device.id)) or 'another claim'}",
        )

    # --- counters_capacity --------------------------------------------------------------------------

    def multi(self, device: Device) -> bool:
        """Whether the device is handed out in shares (``allowMultipleAllocations``, with
        DRAConsumableCapacity)."""
        return self._multi and device.allow_multiple_allocations

    def counters_charged(self, device: Device, shares: int = 0) -> bool:
        """Whether placing the device consumes its counters: a multi-allocatable device consumes them once,
        with its first share (allocated, or one of the ``shares`` the search placed)."""
        return not (self.multi(device) and (shares or self.inventory.is_shared(device.id)))

    def partitionable(self, device: Device) -> Refusal | None:
        if not device.consumes_counters or self.gates.DRAPartitionableDevices:
            return None
        return Refusal(
            "counters_capacity",
            "partitionable-disabled",
            lambda: "device consumes counters and the DRAPartitionableDevices feature is disabled",
        )

    @staticmethod
    def compatibility(device: Device, joined: Mapping[str, GroupIntersection | None]) -> Refusal | None:
        """Every counter set the device draws on admits its compatibility groups (KEP-5963): ``joined``
        holds, per counter set, the intersection of the groups of the devices drawing on it."""
        for consumption in device.consumes_counters:
            current = joined.get(consumption.counter_set)
            if current is not None and not current.admits(consumption.compatibility_groups):
                return Refusal(
                    "counters_capacity",
                    "compatibility-groups",
                    partial(_incompatible, consumption),
                )
        return None

    @staticmethod
    def counters(
        pool: PoolView, device: Device, left: Mapping[str, Mapping[str, Fraction]]
    ) -> Refusal | None:
        """With the device's consumption taken from ``left`` (per counter set and counter, what the pool
        has left), no counter of the pool is below zero (upstream ``checkAvailableCounters``)."""
        taken: dict[tuple[str, str], Fraction] = {}
        like: dict[tuple[str, str], Quantity] = {}
        for consumption in device.consumes_counters:
            for name, amount in consumption.counters.items():
                key = (consumption.counter_set, name)
                taken[key] = taken.get(key, Fraction(0)) + amount.value
                like.setdefault(key, amount)
        for counter_set, counters in left.items():
            for name, have in counters.items():
                key = (counter_set, name)
                if have - taken.pop(key, 0) < 0:
                    return _short_counter(pool, counter_set, name, have, like.get(key))
        for counter_set, name in taken:  # a counter the pool does not define
            return _short_counter(pool, counter_set, name, Fraction(0), like[(counter_set, name)])
        return None

    def could_fit(self, claim: Claim, alt: DeviceRequest, device: Device) -> bool:
        """Whether the device's capacity could ever hold the request, its shares aside (always, with
        DRAConsumableCapacity off). Raises CapacityRequestError like ``consumption``."""
        return not self._multi or self.consumption(claim, alt, device) is not None

    def consumption(self, claim: Claim, alt: DeviceRequest, device: Device) -> dict[str, Fraction] | None:
        """What the request consumes of each device capacity (None: it can never fit the device). Raises
        CapacityRequestError naming the claim, request and device (fatal for the pod)."""
        try:
            return capacity_consumption(device, alt.capacity_requests, self.gates.DRAFractionalCapacityRange)
        except CapacityRequestError as e:
            raise CapacityRequestError(
                f"claim {claim.key}, request {alt.label}: checking capacity for device "
                f"{device_label(device)}: {e}"
            ) from e

    def capacity(
        self,
        alt: DeviceRequest,
        device: Device,
        consumption: Mapping[str, Fraction] | None,
        pending: Mapping[str, Fraction] = _NOTHING,
    ) -> Refusal | None:
        """With DRAConsumableCapacity: the request's ``consumption`` fits the device, a device with shares
        still allows them, and a multi-allocatable device has that much left beside its allocated shares
        and the search's ``pending`` ones."""
        if not self._multi:
            return None
        inventory = self.inventory
        if consumption is None:
            return Refusal("counters_capacity", "capacity", lambda: _misfit(alt, device))
        multi = device.allow_multiple_allocations
        shared = inventory.is_allocated(device.id) and not inventory.is_exclusively_allocated(device.id)
        if not multi and shared:
            return Refusal(
                "counters_capacity",
                "capacity",
                lambda: "device has shares allocated but no longer allows multiple allocations",
            )
        if multi:
            used = inventory.consumed_capacity(device.id)
            for name, amount in consumption.items():
                total = device.capacity[name].value
                left = total.value - used.get(name, 0) - pending.get(name, 0)
                if amount > left:
                    return Refusal(
                        "counters_capacity",
                        "capacity",
                        partial(_capacity_left, name, amount, total, left),
                    )
        return None


def _short_counter(
    pool: PoolView, counter_set: str, name: str, have: Fraction, needed: Quantity | None
) -> Refusal:
    def text() -> str:
        if needed is None:  # the pool's allocated devices already use more than it has
            return f"counter set {counter_set}: {name} is overused in pool {pool.pool}"
        left = format_like(max(have, Fraction(0)), needed)
        return f"counter set {counter_set}: {name} needs {needed.text}, {left} left in pool {pool.pool}"

    return Refusal("counters_capacity", "counters", text)


def _misfit(alt: DeviceRequest, device: Device) -> str:
    missing = [
        name
        for name in alt.capacity_requests
        if name not in device.capacity and name.rpartition("/")[2] not in device.capacity
    ]
    if missing:
        return f"device has no capacity {', '.join(sorted(missing))}"
    wanted = ", ".join(f"{k}={q.text}" for k, q in sorted(alt.capacity_requests.items()))
    return f"requested capacity {wanted} does not fit the device's capacity or request policy"


def _incompatible(consumption: CounterConsumption) -> str:
    groups = ", ".join(sorted(consumption.compatibility_groups)) or "(none)"
    return (
        f"counter set {consumption.counter_set}: compatibility groups {groups} do not intersect those of the "
        "devices already drawing on it"
    )


def _capacity_left(name: str, amount: Fraction, total: Quantity, left: Fraction) -> str:
    shown = format_like(max(left, Fraction(0)), total)
    return f"capacity {name}: needs {format_like(amount, total)}, {shown} of {total.text} left"
