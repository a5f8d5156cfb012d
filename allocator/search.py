"""The structured allocator: claims x node -> allocation results, "no fit", or a fatal error.

Reproduces upstream's depth-first search with backtracking (allocator-semantics §4-§16): claims in order,
requests in spec order, ``firstAvailable`` subrequests in list order, device slots of an ExactCount
request as combinations (slot k+1 resumes after slot k's device), candidates in pool order (pools sorted
by driver/pool, binding-condition pools last; slices by name; devices in slice order). The first
complete assignment wins. Per device the checks run in upstream's order: in use, selectable
(binding-condition gate, class then request selectors, then per-device node selection), capacity,
counters, taints, constraints.

Pruning never changes the answer: devices still to place that would exceed a claim's 32 results end the
branch before any is placed (as upstream does), and once the search backtracks, a slot with fewer usable
devices left than it needs is abandoned, and a request that no alternative could satisfy even with every
device of the node free (alone, or with the other requests of a claim constraint) ends the whole search as
"no fit" (upstream would try every combination before it first), and a choice after which the requests
still to place need more devices than the node has free is dropped at once (when no device may serve two
requests and nothing the dropped choices would reach could fail the pod: ``_may_prune_by_supply``).

There is no step limit: like upstream, whose only bound is kube-scheduler's ``filterTimeout`` (a context
deadline checked at each recursion), the search runs until its ``Deadline`` (read every
``CLOCK_CHECK_STEPS`` devices tried) and then raises ``SearchTimeoutError``, which is neither a fit nor
"cannot be satisfied". A caller may also set ``max_steps`` (the aligned device-selection attempts, which
only look for a better fit than one already found): running out raises ``SearchLimitError``.

One module, about 700 lines: upstream's ``allocator.go`` is one depth-first search whose steps share its
state (counters, capacity and constraints taken and undone while backtracking); it stays one here too.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any, NamedTuple

from allocator.compatibility import GroupIntersection, groups_in_use
from allocator.constraints import ConstraintState, new_constraint_state
from allocator.derived import check_request_derived, request_derived_values
from allocator.devicerules import DeviceRules, on_node
from allocator.errors import (
    CapacityRequestError,
    CELError,
    ClaimConstraintError,
    FeatureDisabledError,
    InvalidInputError,
    NodeLocalError,
    SearchLimitError,
    SearchTimeoutError,
)
from allocator.inventory import Inventory, counters_left
from allocator.model import (
    MAX_DEVICES_PER_CLAIM,
    Claim,
    Constraint,
    Device,
    DeviceID,
    DeviceRequest,
    ResourceSlice,
)
from allocator.nodeselector import Node
from allocator.pools import PoolView
from allocator.results import PickedDevice, build_allocation
from allocator.selectors import SelectorCache
from allocator.supply import falls_short

__all__ = ["CLOCK_CHECK_STEPS", "Allocator", "Candidate", "Deadline", "SearchStats"]

CLOCK_CHECK_STEPS = 256
"""Devices tried between two reads of the deadline's clock (a few milliseconds of search)."""


class Deadline:
    """When a search gives up: ``seconds`` after it was made, by ``clock`` (injectable for tests)."""

    __slots__ = ("at", "clock", "seconds")

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.at = clock() + seconds

    def passed(self) -> bool:
        return self.clock() >= self.at


class Candidate(NamedTuple):
    """A device in search order, with the pool and slice it came from (a tuple: every search builds one
    per device of the node)."""

    pool: PoolView
    slice: ResourceSlice
    device: Device


@dataclass(slots=True)
class SearchStats:
    """How much work a call did (tests may assert it; benchmarks report it)."""

    devices_tried: int = 0
    placements: int = 0


_NOTHING: dict[str, Fraction] = {}


class _SearchLimit(Exception):
    pass


class _TimedOut(Exception):
    pass


_UNLIMITED = 1 << 30
"""Counts as more devices than any request asks for (a candidate count pruning must not skip)."""


class _ResultsLimit(Exception):
    """Upstream's ``errAllocationResultMaxSizeExceeded``: the devices still to place do not fit in the claim's
    32 results. Device counts do not depend on which devices were chosen, so no other choice in this claim
    helps; it unwinds to the nearest ``firstAvailable`` (whose next subrequest may need fewer) or the claim
    boundary (where an earlier claim may choose differently)."""


class _Unsatisfiable(Exception):
    """Some request can never be satisfied on this node, and no error can come first: the answer is no fit
    whatever the search tries before it (``Allocator._unsatisfiable``)."""


@dataclass(slots=True)
class _ClaimPlan:
    claim: Claim
    all_devices: dict[str, list[Candidate]]
    constraints: list[ConstraintState]
    picked: list[PickedDevice] = field(default_factory=list)
    chosen: dict[str, DeviceRequest] = field(default_factory=dict)


class Allocator:
    """Allocates claims on one node against an inventory snapshot; never mutates the inventory.

    One instance per call: ``Allocator(inventory, selectors).allocate(node, claims)``.
    """

    def __init__(
        self, inventory: Inventory, selectors: SelectorCache, deadline: Deadline | None = None
    ) -> None:
        self.inventory = inventory
        self.deadline = deadline
        """When the search gives up with SearchTimeoutError (None: never)."""
        self.gates = inventory.gates
        self.selectors = selectors
        self.stats = SearchStats()
        self._node = Node("", {})
        self._rules = DeviceRules(inventory, selectors, self._node)
        self._candidates: list[Candidate] = []
        self._plans: list[_ClaimPlan] = []
        self._allocating: dict[DeviceID, set[int]] = defaultdict(set)
        self._capacity: dict[DeviceID, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
        self._shares: dict[DeviceID, int] = defaultdict(int)
        self._counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self._groups: dict[tuple[str, str], dict[str, GroupIntersection | None]] = {}
        self._selectable: dict[tuple[int, int], bool] = {}
        self._usable_after: dict[int, list[int]] = {}
        """Per request alternative: how many candidates from each index on it might use (count pruning)."""
        self._looked_ahead = False
        self._free: set[DeviceID] = set()
        """Devices of the node no claim holds (supply pruning counts those this search has not taken)."""
        self._taken = 0
        """How many of ``_free`` this search has placed."""
        self._needed_after: list[list[int]] = []
        """Per claim and request index: the fewest devices the requests from there on need, all claims."""
        self._supply_pruning = False
        """Whether a choice leaving fewer free devices than the rest needs may be dropped (``_short``)."""
        self.max_steps: int | None = None
        """Devices tried before giving up with SearchLimitError (None: no limit; a device-selection policy
        trying several searches for a better fit sets it)."""

    # --- entry point ------------------------------------------------------------------------------

    def allocate(
        self,
        node: Node,
        claims: Sequence[Claim],
        candidate_order: Callable[[list[Candidate]], list[Candidate]] | None = None,
    ) -> list[dict[str, Any]] | None:
        """Allocate all ``claims`` together on ``node``.

        Returns one API-shaped ``AllocationResult`` dict per claim (claim order), or None when the node
        cannot satisfy them. Raises AllocatorError (fatal for the pod) or NodeLocalError (only this node:
        no solution and the node has an invalid pool; SearchTimeoutError: the deadline passed;
        SearchLimitError: ``max_steps`` devices tried).

        ``candidate_order`` (device-selection policies, ``allocator.alignment``): maps the candidates in
        upstream order to the ones ExactCount slots may use, in the order to try them (a subset and/or a
        permutation). ``All`` requests still take every matching device of the node. None (first-fit)
        keeps upstream's order exactly.
        """
        self._node = node
        self._rules = DeviceRules(self.inventory, self.selectors, node)
        pools = self.inventory.pools_for(node)
        # Devices of perDeviceNodeSelection slices that are not on the node stay candidates: upstream checks
        # their node after the selectors, so a selector's runtime error on them is still fatal.
        self._candidates = [Candidate(pool, s, d) for pool in pools for s in pool.slices for d in s.devices]
        self._usable_after = {}
        self._looked_ahead = False
        self._supply_pruning = False
        # A successful search keeps its placements; a second call on this instance starts afresh.
        self._allocating.clear()
        self._capacity.clear()
        self._shares.clear()
        self._counters.clear()
        self._groups.clear()
        self._taken = 0
        self._plans = [self._plan(claim, pools) for claim in claims]
        # Over every candidate, before a policy's order restricts them: All requests still take any.
        self._free = {
            c.device.id
            for c in self._candidates
            if c.pool.usable and not self._rules.allocated_elsewhere(c.device)
        }
        self._needed_after = self._needs()
        if candidate_order is not None:
            self._candidates = candidate_order(self._candidates)
        try:
            found = self._request(0, 0)
        except (_ResultsLimit, _Unsatisfiable):
            found = False
        except _SearchLimit:
            raise SearchLimitError(f"search limit reached after {self.max_steps} steps") from None
        except _TimedOut:
            seconds = self.deadline.seconds if self.deadline is not None else 0
            raise SearchTimeoutError(
                f"timed out trying to allocate devices (filter timeout {seconds:g} s, "
                f"{self.stats.devices_tried} devices tried)"
            ) from None
        if not found:
            # Upstream fails the node when any of its pools is invalid, whether or not the search got there.
            if any(pool.invalid for pool in pools):
                raise NodeLocalError("invalid resource pools were encountered")
            return None
        return [
            build_allocation(plan.claim, plan.picked, plan.chosen, self.inventory, node, self.gates)
            for plan in self._plans
        ]

    # --- pre-checks (§4) --------------------------------------------------------------------------

    def validate(self, claims: Sequence[Claim]) -> None:
        """Raise what ``allocate`` raises for the claims themselves, before looking at any device
        (AllocatorError, fatal for the pod: disabled features, invalid requests, unknown classes, device
        limits, empty constraints). ``All`` requests are checked against a node's pools by ``allocate``."""
        for claim in claims:
            self._plan(claim, [])

    def _plan(self, claim: Claim, pools: list[PoolView]) -> _ClaimPlan:
        key = claim.key
        all_devices: dict[str, list[Candidate]] = {}
        minimum_total = 0
        for request in claim.requests:
            if request.first_available and not self.gates.DRAPrioritizedList:
                raise FeatureDisabledError(
                    f"claim {key}, request {request.name}: has subrequests, but the DRAPrioritizedList "
                    "feature is disabled"
                )
            # Upstream's stable allocator does not know capacity requests, so it ignores them.
            if not self.gates.DRAConsumableCapacity and not self.gates.stable_allocator:
                for alt in request.alternatives:
                    if alt.capacity_requests:
                        kind = "subrequest" if alt.is_subrequest else "request"
                        raise FeatureDisabledError(
                            f"claim {key}, {kind} {alt.label}: has capacity requests, but the "
                            "DRAConsumableCapacity feature is disabled"
                        )
            minimums = []
            for alt in request.alternatives:
                self._validate_request(claim, alt)
                if alt.mode == "All":
                    all_devices[alt.name] = self._all_mode_devices(claim, alt, pools)
                    minimums.append(len(all_devices[alt.name]))
                else:
                    minimums.append(alt.count)
            # Checked request by request, as upstream does: a later request's errors come after this one.
            minimum = min(minimums)
            if minimum > MAX_DEVICES_PER_CLAIM - minimum_total:
                raise InvalidInputError(
                    f"claim {key}, request {request.name}: adding {minimum} devices exceeds the claim limit "
                    f"of {MAX_DEVICES_PER_CLAIM}, with {minimum_total} already accounted for"
                )
            minimum_total += minimum
        states = []
        for i, constraint in enumerate(claim.constraints):
            state = new_constraint_state(constraint, self.gates)
            if state is None:
                raise InvalidInputError(
                    f"claim {key}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
            states.append(state)
        return _ClaimPlan(claim, all_devices, states)

    def _validate_request(self, claim: Claim, alt: DeviceRequest) -> None:
        where = f"claim {claim.key}, request {alt.label}"
        for i, expression in enumerate(alt.selectors):
            if not expression:
                raise InvalidInputError(
                    f"{where}, selector #{i}: CEL expression empty (unsupported selector type?)"
                )
        if alt.admin_access is not None and not self.gates.DRAAdminAccess:
            raise FeatureDisabledError(f"{where}: admin access is requested, but the feature is disabled")
        check_request_derived(claim, alt, self.selectors, self.gates)
        if not alt.class_name:
            raise InvalidInputError(f"{where}: missing device class name (unsupported request type?)")
        device_class = self.inventory.device_class(alt.class_name)
        if device_class is None:
            raise InvalidInputError(
                f"{where}: could not retrieve device class {alt.class_name}: "
                f'deviceclass.resource.k8s.io "{alt.class_name}" not found'
            )
        for i, expression in enumerate(device_class.selectors):
            if not expression:
                raise InvalidInputError(
                    f"class {device_class.name}: selector #{i}: CEL expression empty "
                    "(unsupported selector type?)"
                )
        if alt.mode not in ("ExactCount", "All"):
            raise InvalidInputError(f"{where}: unsupported count mode {alt.mode}")

    def _all_mode_devices(self, claim: Claim, alt: DeviceRequest, pools: list[PoolView]) -> list[Candidate]:
        """Pool by pool as upstream: a selector error in one pool comes before a later incomplete pool."""
        by_pool: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
        for candidate in self._candidates:
            by_pool[candidate.pool.id].append(candidate)
        devices: list[Candidate] = []
        for pool in pools:
            if pool.incomplete:
                raise InvalidInputError(
                    f"claim {claim.key}, request {alt.label}: asks for all devices, but "
                    f"resource pool {pool.driver}/{pool.pool} is currently being updated"
                )
            if pool.invalid:
                raise InvalidInputError(
                    f"claim {claim.key}, request {alt.label}: asks for all devices, but "
                    f"resource pool {pool.driver}/{pool.pool} is currently invalid"
                )
            devices += [
                c
                for c in by_pool[pool.id]
                if self._is_selectable(claim, alt, c) and self._static_capacity_fits(claim, c.device, alt)
            ]
        return devices

    def _static_capacity_fits(self, claim: Claim, device: Device, alt: DeviceRequest) -> bool:
        """Whether the device's capacity could ever hold the request, ignoring its shares: "all" is every
        such device, so a device whose shares leave too little stays in it and the request fails, as
        upstream's, rather than being quietly left out."""
        if not self.gates.DRAConsumableCapacity:
            return True
        return self._rules.consumption(claim, alt, device) is not None

    # --- recursion (§5) ---------------------------------------------------------------------------

    def _request(self, claim_index: int, request_index: int) -> bool:
        if claim_index == len(self._plans):
            return True
        plan = self._plans[claim_index]
        if request_index == len(plan.claim.requests):
            try:
                return self._request(claim_index + 1, 0)
            except _ResultsLimit:
                return False
        request = plan.claim.requests[request_index]
        over_limit = True
        for alt in request.alternatives:
            plan.chosen[request.name] = alt
            try:
                if alt.mode == "All":
                    found = self._all(claim_index, request_index, alt)
                else:
                    found = self._slot(claim_index, request_index, alt, 0, 0)
            except _ResultsLimit:
                continue
            over_limit = False
            if found:
                return True
        plan.chosen.pop(request.name, None)
        if over_limit:
            raise _ResultsLimit
        return False

    def _all(self, claim_index: int, request_index: int, alt: DeviceRequest) -> bool:
        plan = self._plans[claim_index]
        devices = plan.all_devices[alt.name]
        if not devices:
            return False
        if len(plan.picked) + len(devices) > MAX_DEVICES_PER_CLAIM:
            raise _ResultsLimit
        undos: list[Callable[[], None]] = []
        for candidate in devices:
            undo = None
            if not self._in_use(claim_index, alt, candidate.device):
                undo = self._allocate_device(claim_index, alt, candidate, must=True)
            if undo is None:
                _undo(undos)
                return False
            undos.append(undo)
        return self._continue(undos, partial(self._request, claim_index, request_index + 1))

    def _slot(self, claim_index: int, request_index: int, alt: DeviceRequest, slot: int, start: int) -> bool:
        if slot == alt.count:
            return self._request(claim_index, request_index + 1)
        plan = self._plans[claim_index]
        if alt.count - slot > MAX_DEVICES_PER_CLAIM - len(plan.picked):
            raise _ResultsLimit
        claim = plan.claim
        # Count pruning (fewer usable devices left than slots to fill: no combination from here completes)
        # starts once the search tried more devices than one scan of the node: most searches succeed
        # before, and for them evaluating every device's selectors up front would be wasted work.
        backtracking = self.stats.devices_tried > len(self._candidates)
        if backtracking and not self._looked_ahead:
            self._looked_ahead = True
            if self._unsatisfiable():
                raise _Unsatisfiable
            self._supply_pruning = self._may_prune_by_supply()
        if self._supply_pruning and self._short(claim_index, request_index, alt, slot):
            return False
        usable_after = self._usable_counts(claim, alt) if backtracking else None
        if usable_after is not None and usable_after[start] < alt.count - slot:
            return False
        for index in range(start, len(self._candidates)):
            candidate = self._candidates[index]
            if not candidate.pool.usable:
                continue
            if usable_after is not None and usable_after[index] < alt.count - slot:
                return False
            self._step()
            device = candidate.device
            if self._in_use(claim_index, alt, device):
                continue
            if not self._is_selectable(claim, alt, candidate):
                continue
            consumption = self._capacity_consumption(claim, device, alt)
            if consumption is None:
                continue
            undo = self._allocate_device(claim_index, alt, candidate, must=False, consumption=consumption)
            if undo is None:
                continue
            rest = partial(self._slot, claim_index, request_index, alt, slot + 1, index + 1)
            if self._continue([undo], rest):
                return True
        return False

    def _step(self) -> None:
        """Count one device tried; give up at the step limit or, checked every ``CLOCK_CHECK_STEPS``, the
        deadline."""
        tried = self.stats.devices_tried = self.stats.devices_tried + 1
        if self.max_steps is not None and tried > self.max_steps:
            raise _SearchLimit
        if tried % CLOCK_CHECK_STEPS == 0 and self.deadline is not None and self.deadline.passed():
            raise _TimedOut

    @staticmethod
    def _continue(undos: list[Callable[[], None]], search: Callable[[], bool]) -> bool:
        """Run the rest of the search on top of placed devices; undo them unless it succeeded (also when
        the results limit unwinds through here)."""
        try:
            found = search()
        except _ResultsLimit:
            _undo(undos)
            raise
        if not found:
            _undo(undos)
        return found

    def _unsatisfiable(self) -> bool:
        """Whether some request has no alternative with enough usable devices on the node, with nothing
        before it in search order that could raise an error. Upstream explores every combination of the
        earlier requests before giving up on that request, so the answer is no fit unless it meets an error
        on the way: a selector failing on a device (counted as unlimited usable devices) or an ``All``
        request breaking a claim constraint. Where one of those could come first, this says no and the
        search goes on as upstream's would."""
        for plan in self._plans:
            for request in plan.claim.requests:
                satisfiable = False
                for alt in request.alternatives:
                    if alt.mode == "All":
                        devices = plan.all_devices[alt.name]
                        if devices and plan.constraints:
                            return False
                        satisfiable |= bool(devices)
                        continue
                    usable = self._usable_counts(plan.claim, alt)[0]
                    if usable >= _UNLIMITED:
                        return False
                    satisfiable |= usable >= alt.count
                if not satisfiable:
                    return True
            if any(self._constraint_unsatisfiable(plan.claim, c) for c in plan.claim.constraints):
                return True
        return self._devices_fall_short()

    def _needs(self) -> list[list[int]]:
        """``_needed_after``: per request, the fewest devices its alternatives ask for (an adminAccess one
        needs none: it may take devices in use), summed from each request to the end of the search."""
        needs: list[list[int]] = []
        total = 0
        for plan in reversed(self._plans):
            suffix = [total]
            for request in reversed(plan.claim.requests):
                total += min(
                    0
                    if alt.admin_access
                    else len(plan.all_devices[alt.name])
                    if alt.mode == "All"
                    else alt.count
                    for alt in request.alternatives
                )
                suffix.append(total)
            needs.append(suffix[::-1])
        return needs[::-1]

    def _short(self, claim_index: int, request_index: int, alt: DeviceRequest, slot: int) -> bool:
        """Whether this slot, the rest of its request and every later request need more devices than the
        node has left free: then no choice from here completes, and the search drops it at once."""
        needed = (0 if alt.admin_access else alt.count - slot) + self._needed_after[claim_index][
            request_index + 1
        ]
        return needed > len(self._free) - self._taken

    def _may_prune_by_supply(self) -> bool:
        """Whether dropping choices by ``_short`` keeps upstream's answer: no device may serve two requests
        (multi-allocatable devices), and nothing the dropped choices would have reached could fail the pod
        (a selector, derived attribute or capacity error, counted as unlimited usable devices, or an All
        request breaking a claim constraint). Asked once, when the search starts backtracking."""
        if any(self._multi(c.device) for c in self._candidates):
            return False
        for plan in self._plans:
            for request in plan.claim.requests:
                for alt in request.alternatives:
                    if alt.mode == "All":
                        if plan.constraints:
                            return False
                    elif self._usable_counts(plan.claim, alt)[0] >= _UNLIMITED:
                        return False
        return True

    def _devices_fall_short(self) -> bool:
        """Whether the requests of all claims together need more distinct devices than they might take
        (``allocator.supply``). A request with several alternatives needs the fewest any of them asks for,
        from any of their devices; adminAccess requests are left out, as they may share a device."""
        demands: list[tuple[int, set[DeviceID]]] = []
        shareable: set[DeviceID] = set()
        for plan in self._plans:
            for request in plan.claim.requests:
                if any(alt.admin_access for alt in request.alternatives):
                    continue
                devices: set[DeviceID] = set()
                needed = _UNLIMITED
                for alt in request.alternatives:
                    if alt.mode == "All":
                        usable = [c.device for c in plan.all_devices[alt.name]]
                        needed = min(needed, len(usable))
                    else:
                        usable = [c.device for _, c in self._usable_candidates(plan.claim, alt)]
                        needed = min(needed, alt.count)
                    devices.update(d.id for d in usable)
                    shareable.update(d.id for d in usable if self._multi(d))
                demands.append((needed, devices))
        return falls_short(demands, shareable)

    def _constraint_unsatisfiable(self, claim: Claim, constraint: Constraint) -> bool:
        """Whether the devices the constraint's requests might take cannot give them all their devices under
        it: ``distinctAttribute`` needs as many different values as devices, ``matchAttribute`` as many
        devices with one value (a device without the attribute never joins). Scalar values only; an ``All``
        request or a list value leaves the question open, and so does ``matchAttribute`` over a device one
        claim may take twice (shares). A request deriving the constrained attribute is left out: its values
        are not known before the search, and the constraint over the other requests must hold anyway."""
        name = constraint.distinct_attribute or constraint.match_attribute
        needed = 0
        usable: dict[int, Candidate] = {}
        for request in claim.requests:
            alternatives = [alt for alt in request.alternatives if constraint.applies_to(alt)]
            if not alternatives:
                continue
            if any(alt.mode == "All" for alt in alternatives):
                return False
            if any(d.name == name for alt in alternatives for d in alt.derived_attributes):
                continue
            # A firstAvailable request may take a subrequest the constraint does not name: then it needs none.
            needed += min(alt.count if constraint.applies_to(alt) else 0 for alt in request.alternatives)
            for alt in alternatives:
                usable.update(self._usable_candidates(claim, alt))
        per_value: dict[tuple[type, object], int] = defaultdict(int)
        for candidate in usable.values():
            value = candidate.device.attribute(name)
            if isinstance(value, tuple):
                return False
            if value is not None:
                if constraint.match_attribute and self._multi(candidate.device):
                    return False
                per_value[(type(value), value)] += 1
        if constraint.distinct_attribute:
            return needed > len(per_value)
        return needed > max(per_value.values(), default=0)

    def _usable_candidates(self, claim: Claim, alt: DeviceRequest) -> list[tuple[int, Candidate]]:
        """(index, candidate) of every candidate ``alt`` might take (``_usable_counts`` steps there)."""
        counts = self._usable_counts(claim, alt)
        return [(i, c) for i, c in enumerate(self._candidates) if counts[i] != counts[i + 1]]

    def _usable_counts(self, claim: Claim, alt: DeviceRequest) -> list[int]:
        """For each candidate index, how many candidates from there on ``alt`` might take: an upper bound
        (devices placed during the search are not subtracted), so pruning on it never drops a solution.
        A device whose selectors fail with an error counts as unlimited: the search must still reach it,
        because upstream raises the error there."""
        counts = self._usable_after.get(id(alt))
        if counts is not None:
            return counts
        counts = [0] * (len(self._candidates) + 1)
        for index in range(len(self._candidates) - 1, -1, -1):
            candidate = self._candidates[index]
            counts[index] = counts[index + 1] + self._might_use(claim, alt, candidate)
        self._usable_after[id(alt)] = counts
        return counts

    def _might_use(self, claim: Claim, alt: DeviceRequest, candidate: Candidate) -> int:
        """1 if ``alt`` might take the candidate, 0 if never, ``_UNLIMITED`` if its selectors fail."""
        if not candidate.pool.usable:
            return 0
        if self._rules.held(alt, candidate.device):
            return 0
        try:
            if not self._is_selectable(claim, alt, candidate):
                return 0
            if not self._static_capacity_fits(claim, candidate.device, alt):
                return 0  # its capacity can never hold the request, whatever its shares
            # A derived attribute failing here fails the pod if the search places the device: reach it.
            values = request_derived_values(self.selectors, claim, alt, candidate.device)
            for name in values:
                values[name]
        except (CELError, CapacityRequestError):
            return _UNLIMITED
        return 1

    # --- per-device checks (``allocator.devicerules``) ----------------------------------------------

    def _multi(self, device: Device) -> bool:
        return self._rules.multi(device)

    def _in_use(self, claim_index: int, alt: DeviceRequest, device: Device) -> bool:
        picked_by = self._allocating.get(device.id)
        if alt.admin_access:
            return bool(picked_by) and claim_index in picked_by
        # Upstream's deviceInUse, checked before any selector: a multi-allocatable device taken by a result
        # without shareID is in use too (its shares are limited by capacity, checked later).
        return bool(picked_by) or self._rules.allocated_elsewhere(device)

    def _is_selectable(self, claim: Claim, alt: DeviceRequest, candidate: Candidate) -> bool:
        device = candidate.device
        key = (id(alt), id(device))
        result = self._selectable.get(key)
        if result is None:
            result = self._selectable[key] = self._rules.selectable(claim, alt, device)
        # Per-device node selection comes after the selectors (upstream ``isSelectable``).
        return result and on_node(candidate.slice, device, self._node)

    def _capacity_consumption(
        self, claim: Claim, device: Device, alt: DeviceRequest
    ) -> dict[str, Fraction] | None:
        """Consumption of every device capacity for this request, or None if it does not fit (§12).
        Raises CapacityRequestError (fatal) before any other capacity check, as upstream."""
        if not self.gates.DRAConsumableCapacity:
            return {}
        rules = self._rules
        consumption = rules.consumption(claim, alt, device)
        pending = self._capacity.get(device.id, _NOTHING)
        if rules.capacity(alt, device, consumption, pending) is not None:
            return None
        return consumption

    def _allocate_device(
        self,
        claim_index: int,
        alt: DeviceRequest,
        candidate: Candidate,
        must: bool,
        consumption: dict[str, Fraction] | None = None,
    ) -> Callable[[], None] | None:
        """Place one device (upstream ``allocateDevice``); returns an undo function or None if unusable.

        ``consumption``: the device's capacity consumption for ``alt`` when the caller has just computed it
        against the current shares (None: computed here)."""
        device = candidate.device
        plan = self._plans[claim_index]
        undos: list[Callable[[], None]] = []

        def undo_all() -> None:
            for u in reversed(undos):
                u()

        rules = self._rules
        if rules.node_operations(candidate.slice) is not None:
            return None
        if device.consumes_counters:
            if rules.partitionable(device) is not None:
                return None
            counter_undo = self._take_counters(candidate)
            if counter_undo is None:
                return None
            undos.append(counter_undo)
        if rules.taints(alt, candidate.slice, device) is not None:
            undo_all()
            return None
        derived = request_derived_values(self.selectors, plan.claim, alt, device)
        for state in plan.constraints:
            if not state.add(alt, device, derived):
                undo_all()
                if must:
                    raise ClaimConstraintError(
                        f"claim {plan.claim.key}, request {alt.label}: cannot add device "
                        f"{device.driver}/{device.pool}/{device.name} because a claim constraint would not "
                        "be satisfied"
                    )
                return None
            undos.append(lambda s=state: s.remove(alt, device))
        share_id, consumed = "", None
        if self._multi(device):
            consumed = (
                consumption
                if consumption is not None
                else self._capacity_consumption(plan.claim, device, alt)
            )
            if consumed is None:
                undo_all()
                return None
            pending = self._capacity[device.id]
            for name, amount in consumed.items():
                pending[name] += amount

            self._shares[device.id] += 1

            def undo_capacity(c: dict[str, Fraction] = consumed) -> None:
                for name, amount in c.items():
                    pending[name] -= amount
                self._shares[device.id] -= 1

            undos.append(undo_capacity)
            share_id = str(uuid.uuid4())
        else:
            undos.append(self._hold(device.id, claim_index))
        plan.picked.append(PickedDevice(alt, candidate.slice, device, share_id, consumed))
        undos.append(plan.picked.pop)
        self.stats.placements += 1
        return undo_all

    def _hold(self, device_id: DeviceID, claim_index: int) -> Callable[[], None]:
        """Mark the device in use by the claim (upstream ``allocatingDevices``); returns the undo."""
        holders = self._allocating[device_id]
        counted = not holders and device_id in self._free
        holders.add(claim_index)
        self._taken += counted

        def undo() -> None:
            holders.discard(claim_index)
            self._taken -= counted

        return undo

    def _take_counters(self, candidate: Candidate) -> Callable[[], None] | None:
        """Take the device's counters from its pool if they suffice (§11); returns the undo."""
        device, pool = candidate.device, candidate.pool
        rules = self._rules
        # A share beside an allocation without shareID (adminAccess) consumes them again: that is no share.
        if not rules.counters_charged(device, self._shares[device.id]):
            return _noop
        groups_undo = (
            self._join_compatibility_groups(candidate) if self.gates.DRADeviceCompatibilityGroups else _noop
        )
        if groups_undo is None:
            return None
        available = self._counters.get(pool.id)
        if available is None:
            available = self._counters[pool.id] = counters_left(self.inventory, pool)
        if rules.counters(pool, device, available) is not None:
            groups_undo()
            return None
        for consumption in device.consumes_counters:
            counters = available[consumption.counter_set]
            for name, amount in consumption.counters.items():
                counters[name] -= amount.value

        def undo() -> None:
            for consumption in device.consumes_counters:
                for name, amount in consumption.counters.items():
                    available[consumption.counter_set][name] += amount.value
            groups_undo()

        return undo

    def _join_compatibility_groups(self, candidate: Candidate) -> Callable[[], None] | None:
        """Fold the device's compatibility groups into each counter set it draws on, if every set admits it
        (``CompatibilityGroups``); returns the undo, or None when some set's devices are incompatible."""
        pool, device = candidate.pool, candidate.device
        joined = self._groups.get(pool.id)
        if joined is None:
            joined = self._groups[pool.id] = groups_in_use(self.inventory, pool)
        if self._rules.compatibility(device, joined) is not None:
            return None
        before = {c.counter_set: joined.get(c.counter_set) for c in device.consumes_counters}
        for consumption in device.consumes_counters:
            current = joined.get(consumption.counter_set)
            joined[consumption.counter_set] = GroupIntersection.of(current, consumption.compatibility_groups)

        def undo() -> None:
            joined.update(before)

        return undo


def _noop() -> None:
    pass


def _undo(undos: list[Callable[[], None]]) -> None:
    for undo in reversed(undos):
        undo()
