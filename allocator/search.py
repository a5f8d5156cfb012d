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

Each per-device rule is asked from ``allocator.devicerules``, the pruning counts come from
``allocator.lookahead`` and the counters taken while backtracking are kept by ``allocator.counterledger``.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import Any

from allocator.constraints import new_constraint_state
from allocator.counterledger import CounterLedger
from allocator.derived import check_request_derived, request_derived_values
from allocator.devicerules import DeviceRules, on_node
from allocator.errors import (
    ClaimConstraintError,
    FeatureDisabledError,
    InvalidInputError,
    NodeLocalError,
    SearchLimitError,
    SearchTimeoutError,
)
from allocator.inventory import Inventory
from allocator.lookahead import Candidate, ClaimPlan, Lookahead, needs
from allocator.model import (
    MAX_DEVICES_PER_CLAIM,
    Claim,
    Device,
    DeviceID,
    DeviceRequest,
)
from allocator.nodeselector import Node
from allocator.pools import PoolView
from allocator.results import PickedDevice, build_allocation
from allocator.selectors import SelectorCache

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


class _ResultsLimit(Exception):
    """Upstream's ``errAllocationResultMaxSizeExceeded``: the devices still to place do not fit in the claim's
    32 results. Device counts do not depend on which devices were chosen, so no other choice in this claim
    helps; it unwinds to the nearest ``firstAvailable`` (whose next subrequest may need fewer) or the claim
    boundary (where an earlier claim may choose differently)."""


class _Unsatisfiable(Exception):
    """Some request can never be satisfied on this node, and no error can come first: the answer is no fit
    whatever the search tries before it (``Lookahead.unsatisfiable``)."""


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
        self._plans: list[ClaimPlan] = []
        self._allocating: dict[DeviceID, set[int]] = defaultdict(set)
        self._capacity: dict[DeviceID, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
        self._shares: dict[DeviceID, int] = defaultdict(int)
        self._ledger = CounterLedger(self._rules)
        self._selectable: dict[tuple[int, int], bool] = {}
        self._lookahead: Lookahead | None = None
        """Count pruning and unsatisfiability, made once the search starts backtracking."""
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
        self._lookahead = None
        self._supply_pruning = False
        # A successful search keeps its placements; a second call on this instance starts afresh.
        self._allocating.clear()
        self._capacity.clear()
        self._shares.clear()
        self._ledger = CounterLedger(self._rules)
        self._taken = 0
        self._plans = [self._plan(claim, pools) for claim in claims]
        # Over every candidate, before a policy's order restricts them: All requests still take any.
        self._free = {
            c.device.id
            for c in self._candidates
            if c.pool.usable and not self._rules.allocated_elsewhere(c.device)
        }
        self._needed_after = needs(self._plans)
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

    def _plan(self, claim: Claim, pools: list[PoolView]) -> ClaimPlan:
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
        return ClaimPlan(claim, all_devices, states)

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
                if self._is_selectable(claim, alt, c) and self._rules.could_fit(claim, alt, c.device)
            ]
        return devices

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
        lookahead = self._lookahead
        if backtracking and lookahead is None:
            lookahead = self._lookahead = Lookahead(
                self._candidates,
                self._plans,
                self._rules,
                self.selectors,
                self._is_selectable,
            )
            if lookahead.unsatisfiable():
                raise _Unsatisfiable
            self._supply_pruning = lookahead.may_prune_by_supply()
        if self._supply_pruning and self._short(claim_index, request_index, alt, slot):
            return False
        usable_after = lookahead.usable_counts(claim, alt) if lookahead is not None else None
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

    def _short(self, claim_index: int, request_index: int, alt: DeviceRequest, slot: int) -> bool:
        """Whether this slot, the rest of its request and every later request need more devices than the
        node has left free: then no choice from here completes, and the search drops it at once."""
        needed = (0 if alt.admin_access else alt.count - slot) + self._needed_after[claim_index][
            request_index + 1
        ]
        return needed > len(self._free) - self._taken

    # --- per-device checks (``allocator.devicerules``) ----------------------------------------------

    def _in_use(self, claim_index: int, alt: DeviceRequest, device: Device) -> bool:
        picked_by = self._allocating.get(device.id)
        if alt.admin_access:
            return picked_by is not None and claim_index in picked_by
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
        undos: list[Callable[[], object]] = []

        def undo_all() -> None:
            for u in reversed(undos):
                u()

        rules = self._rules
        if rules.node_operations(candidate.slice) is not None:
            return None
        if device.consumes_counters:
            counter_undo = self._ledger.take(candidate.pool, device, self._shares[device.id])
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
            undos.append(partial(state.remove, alt, device))
        share_id, consumed = "", None
        if self._rules.multi(device):
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


def _undo(undos: list[Callable[[], None]]) -> None:
    for undo in reversed(undos):
        undo()
