"""Device selection inside a node: upstream's first fit, or topology-aligned (``aligned``).

``first-fit`` is upstream's structured allocator unchanged (``Allocator.allocate``): the same inputs give
kube-scheduler's devices. The acceptance suite and the hand-worked demo placements use it.

``aligned`` looks for a valid allocation whose devices share a PCIe root complex, else a NUMA node, and
prefers the tightest such group, so that whole groups stay free for later pods::

    1. first fit (upstream order). No fit → no fit: every later attempt searches a subset.
    2. for each PCIe root (``resource.kubernetes.io/pcieRoot``), fewest usable devices first:
       the search restricted to that root's devices (plus devices that publish no root)
    3. the same for each NUMA node (``resource.kubernetes.io/numaNode``)
    4. every usable device, devices of the most used NUMA nodes and roots first
    5. the first-fit result of step 1

The first attempt that finds an allocation wins; every allocation it can return is one upstream's search
accepts (the restriction only removes or reorders candidates, ``Allocator.allocate(candidate_order=)``).
"Usable" is the funnel of ``allocator.funnel`` up to counters / capacity for some request of the pod;
groups that cannot hold each request's count are skipped without a search, and the restricted searches
share a budget of ``ALIGNED_STEP_BUDGET`` device placements per node, so the extra work is bounded. A
missing topology attribute means *unknown*: such devices join every group (never NUMA node 0). Pods with
an ``All`` request, and nodes whose usable devices publish no topology, keep the first-fit result.
Attribute names are configurable (``Topology``), so a driver-specific NUMA attribute, or a cluster-wide
derived attribute materialised on devices, can stand in for the standard one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from allocator.cel import Version
from allocator.errors import AllocatorError, NodeLocalError
from allocator.funnel import DeviceChecker, device_label, node_devices
from allocator.inventory import Inventory
from allocator.model import Claim, Device, DeviceRequest
from allocator.nodeselector import Node
from allocator.search import Allocator, Candidate, Deadline
from allocator.selectors import SelectorCache

__all__ = [
    "ALIGNED_STEP_BUDGET",
    "DEVICE_SELECTION_POLICIES",
    "NUMA_ATTRIBUTE",
    "PCIE_ROOT_ATTRIBUTE",
    "Selection",
    "Topology",
    "node_topology",
    "select",
]

NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"
"""KEP-6072 standard attribute (int, or a list with the physical node first); absent = unknown."""

PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
"""KEP-4381 standard attribute (``pci<domain>:<bus>``; a list for devices spanning several roots)."""

DEVICE_SELECTION_POLICIES = ("aligned", "first-fit")
"""``aligned``: topology-aligned, tightest group first; ``first-fit``: upstream's device order."""

ALIGNED_STEP_BUDGET = 20_000
"""Device placements the restricted searches of one node may try together (first fit not counted).
A restricted search over one group of a typical 8-GPU node tries tens of placements; the budget only
matters for pathological claims, where the first-fit result is kept."""

_UNKNOWN = 1 << 30

_NOWHERE: tuple[object | None, frozenset[object]] = (None, frozenset())
"""``Topology.place`` of a device that publishes neither a NUMA node nor a PCIe root."""


@dataclass(frozen=True, slots=True)
class Topology:
    """Which device attributes name the NUMA node and the PCIe root (first present one wins)."""

    numa_attributes: tuple[str, ...] = (NUMA_ATTRIBUTE,)
    pcie_attributes: tuple[str, ...] = (PCIE_ROOT_ATTRIBUTE,)
    _known: WeakKeyDictionary[Device, tuple[object | None, frozenset[object]]] = field(
        default_factory=WeakKeyDictionary, init=False, repr=False, compare=False
    )
    """(numa, roots) per device: devices are immutable per slice revision, so this never goes stale."""

    def place(self, device: Device) -> tuple[object | None, frozenset[object]]:
        """``(numa(device), roots(device))``, computed once per device."""
        found = self._known.get(device)
        if found is None:
            found = (self._numa(device), self._roots(device))
            self._known[device] = found
        return found

    def numa(self, device: Device) -> object | None:
        """The device's NUMA node (a list's first element: the physical node), or None when unknown."""
        return self.place(device)[0]

    def roots(self, device: Device) -> frozenset[object]:
        """The device's PCIe roots (usually one; empty when unknown)."""
        return self.place(device)[1]

    def _numa(self, device: Device) -> object | None:
        for name in self.numa_attributes:
            value = device.attribute(name)
            if value is None:
                continue
            if isinstance(value, tuple):
                value = value[0] if value else None
            return value.text if isinstance(value, Version) else value
        return None

    def _roots(self, device: Device) -> frozenset[object]:
        for name in self.pcie_attributes:
            value = device.attribute(name)
            if value is None:
                continue
            values = value if isinstance(value, tuple) else (value,)
            return frozenset(v.text if isinstance(v, Version) else v for v in values)
        return frozenset()

    def group(self, device: Device) -> tuple[str, object] | None:
        """The aligned group a device is counted in for fragmentation: its NUMA node, else its root."""
        numa = self.numa(device)
        if numa is not None:
            return ("numaNode", numa)
        roots = self.roots(device)
        return ("pcieRoot", min(roots, key=str)) if roots else None

    def groups(self, devices: Sequence[Device]) -> dict[str, tuple[str, object]]:
        """``device_label`` → group, for the devices that publish topology."""
        found = {}
        for device in devices:
            group = self.group(device)
            if group is not None:
                found[device_label(device)] = group
        return found


@dataclass(frozen=True, slots=True)
class Selection:
    """What the device selection chose on one node.

    ``results``: one AllocationResult dict per claim, or None (no fit). ``placement``: which attempt
    won (``first-fit``, ``pcieRoot pci0000:48``, ``numaNode 1``, ``fragmented groups first``, ...).
    ``devices_tried``: placements tried by all searches together."""

    results: list[dict[str, Any]] | None
    policy: str
    placement: str
    devices_tried: int


def _alternatives(claims: Sequence[Claim]) -> list[tuple[Claim, DeviceRequest]]:
    return [(c, alt) for c in claims for r in c.requests for alt in r.alternatives]


def _group_sizes(
    topology: Topology, devices: Iterable[Device]
) -> tuple[dict[object, int], dict[object, int]]:
    """Devices per NUMA node and per PCIe root (devices of unknown topology are not counted)."""
    numa_sizes: dict[object, int] = {}
    root_sizes: dict[object, int] = {}
    for device in devices:
        numa, roots = topology.place(device)
        if numa is not None:
            numa_sizes[numa] = numa_sizes.get(numa, 0) + 1
        for root in roots:
            root_sizes[root] = root_sizes.get(root, 0) + 1
    return numa_sizes, root_sizes


class _Aligner:
    def __init__(
        self,
        inventory: Inventory,
        selectors: SelectorCache,
        node: Node,
        claims: Sequence[Claim],
        topology: Topology,
    ) -> None:
        self.inventory, self.selectors, self.node = inventory, selectors, node
        self.claims, self.topology = claims, topology
        checker = DeviceChecker(inventory, selectors, node)
        devices = list(node_devices(inventory, node))
        # Tightness counts every free device of a group, of any class: a root whose GPU is free but
        # whose NIC is taken is a better home for a GPU-only pod than a root with both free.
        self.numa_room, self.root_room = _group_sizes(
            topology,
            (nd.device for nd in devices if nd.pool.usable and not inventory.is_allocated(nd.device.id)),
        )
        self.usable: dict[int, set[int]] = {}  # id(alt) -> ids of usable devices
        relevant: dict[int, Device] = {}
        for claim, alt in _alternatives(claims):
            ids = set()
            for nd in devices:
                # Up to "not in use": counters and capacity are left to the search (cheaper, and a
                # device that fails them only makes a group look roomier than it is). A device in use
                # is out whatever the earlier stages say, and that is the cheapest stage to ask.
                if checker.in_use(alt, nd.device) or checker.check(claim, alt, nd, last="not_in_use"):
                    continue
                ids.add(id(nd.device))
                relevant[id(nd.device)] = nd.device
            self.usable[id(alt)] = ids
        self.relevant = relevant
        self.requests = sum(len(c.requests) for c in claims)
        self.numa: dict[int, object | None] = {i: topology.numa(d) for i, d in relevant.items()}
        self.roots: dict[int, frozenset[object]] = {i: topology.roots(d) for i, d in relevant.items()}
        self.numa_free, self.root_free = _group_sizes(topology, relevant.values())

    @property
    def has_topology(self) -> bool:
        return bool(self.numa_free or self.root_free)

    def fits(self, members: set[int]) -> bool:
        """Whether every request has an alternative with enough usable devices among ``members``."""
        for claim in self.claims:
            for request in claim.requests:
                if not any(
                    len(self.usable[id(alt)] & members) >= (alt.count if alt.mode == "ExactCount" else 1)
                    for alt in request.alternatives
                ):
                    return False
        return True

    def rank(self, device_id: int) -> tuple[int, int]:
        """Most used (fewest free devices left) NUMA node first, then root; unknown topology last."""
        numa = self.numa.get(device_id)
        roots = self.roots.get(device_id, frozenset())
        return (
            self.numa_room.get(numa, 0) if numa is not None else _UNKNOWN,
            min((self.root_room.get(r, 0) for r in roots), default=_UNKNOWN),
        )

    def attempts(self) -> list[tuple[str, set[int]]]:
        """(placement label, device ids the search may use), in the order to try them.

        A pod with one request (say, GPUs only): the tightest NUMA node that can hold it, within it the
        tightest root that can, else the NUMA node; then the next NUMA node. A pod with several requests
        (GPU and NIC): PCIe roots first (across requests, alignment on a root matters most), those of the
        tightest NUMA nodes first, then NUMA nodes. Either way the last attempt is every usable device,
        fragmented groups first. Devices without a NUMA node / root join every such group (unknown)."""
        relevant = set(self.relevant)
        # Members of each group in one pass over the devices (a node may have a root per device).
        numa_members: dict[object, set[int]] = {n: set() for n in self.numa_free}
        root_members: dict[object, set[int]] = {r: set() for r in self.root_free}
        no_root: set[int] = set()
        no_numa: set[int] = set()
        for i in relevant:
            numa = self.numa[i]
            (no_numa if numa is None else numa_members[numa]).add(i)
            for root in self.roots[i]:
                root_members[root].add(i)
            if not self.roots[i]:
                no_root.add(i)
        for members in numa_members.values():
            members |= no_numa
        for members in root_members.values():
            members |= no_root

        def root_numa_room(root: object) -> int:
            return min(
                (self.numa_room.get(self.numa[i], 0) for i in root_members[root] if self.numa[i] is not None),
                default=0,
            )

        numas = sorted(self.numa_free, key=lambda n: (self.numa_room.get(n, 0), self.numa_free[n], str(n)))
        roots = sorted(
            self.root_free,
            key=lambda r: (root_numa_room(r), self.root_room.get(r, 0), self.root_free[r], str(r)),
        )
        attempts: list[tuple[str, set[int]]] = []
        if self.requests > 1 or not numas:
            attempts += [(f"pcieRoot {r}", root_members[r]) for r in roots]
            attempts += [(f"numaNode {n}", numa_members[n]) for n in numas]
        else:
            for n in numas:
                inside = [r for r in roots if any(self.numa[i] == n for i in root_members[r])]
                attempts += [(f"pcieRoot {r}", root_members[r] & numa_members[n]) for r in inside]
                attempts.append((f"numaNode {n}", numa_members[n]))
        attempts = [(label, members) for label, members in attempts if self.fits(members)]
        attempts.append(("fragmented groups first", relevant))
        return attempts

    def within(self, results: list[dict[str, Any]], allowed: set[int]) -> bool:
        """Whether every device of ``results`` is among ``allowed``."""
        ids = {d.id: i for i, d in self.relevant.items()}
        for allocation in results:
            for entry in allocation["devices"]["results"]:
                if ids.get((entry["driver"], entry["pool"], entry["device"])) not in allowed:
                    return False
        return True

    def order(self, allowed: set[int]) -> Callable[[list[Candidate]], list[Candidate]]:
        def reorder(candidates: list[Candidate]) -> list[Candidate]:
            kept = [
                (self.rank(id(c.device)), i, c) for i, c in enumerate(candidates) if id(c.device) in allowed
            ]
            kept.sort(key=lambda entry: (entry[0], entry[1]))
            return [c for _, _, c in kept]

        return reorder


def select(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claims: Sequence[Claim],
    policy: str = "aligned",
    topology: Topology | None = None,
    budget: int = ALIGNED_STEP_BUDGET,
    deadline: Deadline | None = None,
    first_steps: int | None = None,
) -> Selection:
    """Allocate ``claims`` together on ``node`` with device-selection ``policy``, every search stopping
    at ``deadline``, the first-fit search also after trying ``first_steps`` devices (SearchLimitError).

    Raises what ``Allocator.allocate`` raises for the first-fit search (AllocatorError: fatal for the pod;
    NodeLocalError: this node only, SearchTimeoutError among them); errors of the restricted searches only
    end those attempts.
    """
    if policy not in DEVICE_SELECTION_POLICIES:
        raise ValueError(f"unknown device selection policy {policy!r}")
    allocator = Allocator(inventory, selectors, deadline)
    allocator.max_steps = first_steps
    first = allocator.allocate(node, claims)
    tried = allocator.stats.devices_tried
    if first is None or policy == "first-fit" or not claims:
        return Selection(first, policy, "first-fit", tried)
    every = [
        (i, alt)
        for i, c in enumerate(claims)
        for r in c.requests
        for alt in r.alternatives
        if alt.mode == "All"
    ]
    if every:
        index, alt = every[0]
        return Selection(first, policy, _all_devices_placement(alt, first[index]), tried)
    topology = topology or Topology()
    # Checking every device against every request is the aligner's own cost: not for a node with nothing
    # to align on.
    if not any(topology.place(nd.device) != _NOWHERE for nd in node_devices(inventory, node)):
        return Selection(first, policy, "first-fit (no topology published)", tried)
    aligner = _Aligner(inventory, selectors, node, claims, topology)
    if not aligner.has_topology:
        return Selection(first, policy, "first-fit (no topology published)", tried)
    attempts = aligner.attempts()
    if len(attempts) > 1 and aligner.within(first, attempts[0][1]):
        # First fit already lies in the best group (e.g. an empty or evenly filled node): keep it.
        return Selection(first, policy, attempts[0][0], tried)
    spent = 0
    for label, allowed in attempts:
        if spent >= budget:
            break
        attempt = Allocator(inventory, selectors, deadline)
        attempt.max_steps = budget - spent
        try:
            results = attempt.allocate(node, claims, candidate_order=aligner.order(allowed))
        except (AllocatorError, NodeLocalError):
            results = None
        spent += attempt.stats.devices_tried
        if results is not None:
            return Selection(results, policy, label, tried + spent)
    return Selection(first, policy, "first-fit (no aligned allocation)", tried + spent)


def _all_devices_placement(every: DeviceRequest, allocation: Mapping[str, Any]) -> str:
    """First fit stands when a request asks for all devices (a restricted search would give it fewer). The
    label names what was allocated for its claim: that (sub)request, or the firstAvailable subrequest
    chosen instead."""
    if not every.is_subrequest:
        return f"first-fit (request {every.name} for all devices)"
    chosen = next(
        entry["request"]
        for entry in allocation["devices"]["results"]
        if entry["request"].startswith(f"{every.parent}/")
    )
    if chosen == every.name:
        return f"first-fit (subrequest {every.name} for all devices)"
    return f"first-fit (firstAvailable chose {chosen}; {every.name} asks for all devices)"


def node_topology(inventory: Inventory, node: Node, topology: Topology | None = None) -> dict[str, Any]:
    """``device_label`` → aligned group of every device on ``node`` that publishes topology."""
    topology = topology or Topology()
    return dict(topology.groups([nd.device for nd in node_devices(inventory, node)]))
