"""What the search knows before it tries combinations, to prune branches that cannot complete.

Per request alternative: how many candidates from each index on it might still take (an upper bound:
devices placed during the search are not subtracted); whether some request can never be satisfied on the
node, alone or with the other requests of a claim constraint or of all claims together; whether dropping
choices that leave too few free devices keeps upstream's answer. None of it changes the answer
(``allocator.search`` says when each is asked).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from allocator.constraints import ConstraintState
from allocator.derived import request_derived_values
from allocator.devicerules import DeviceRules
from allocator.errors import CapacityRequestError, CELError
from allocator.model import Claim, Constraint, Device, DeviceID, DeviceRequest, ResourceSlice
from allocator.pools import PoolView
from allocator.results import PickedDevice
from allocator.selectors import SelectorCache
from allocator.supply import falls_short

__all__ = ["UNLIMITED", "Candidate", "ClaimPlan", "Lookahead", "needs"]

UNLIMITED = 1 << 30
"""Counts as more devices than any request asks for (a candidate count pruning must not skip)."""


class Candidate(NamedTuple):
    """A device in search order, with the pool and slice it came from (a tuple: every search builds one
    per device of the node)."""

    pool: PoolView
    slice: ResourceSlice
    device: Device


@dataclass(slots=True)
class ClaimPlan:
    """One claim in the search: its ``All`` requests' devices, its constraints, and what it picked so far."""

    claim: Claim
    all_devices: dict[str, list[Candidate]]
    constraints: list[ConstraintState]
    picked: list[PickedDevice] = field(default_factory=list)
    chosen: dict[str, DeviceRequest] = field(default_factory=dict)


def needs(plans: Sequence[ClaimPlan]) -> list[list[int]]:
    """Per claim and request, the fewest devices its alternatives ask for (an adminAccess one
    needs none: it may take devices in use), summed from each request to the end of the search."""
    needs: list[list[int]] = []
    total = 0
    for plan in reversed(plans):
        suffix = [total]
        for request in reversed(plan.claim.requests):
            total += min(
                0 if alt.admin_access else len(plan.all_devices[alt.name]) if alt.mode == "All" else alt.count
                for alt in request.alternatives
            )
            suffix.append(total)
        needs.append(suffix[::-1])
    return needs[::-1]


class Lookahead:
    """Usable-device counts and unsatisfiability for one search: its ``candidates`` (in the order its
    slots try them) and claim ``plans``; ``selectable`` is the search's own (cached) selector check."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        plans: Sequence[ClaimPlan],
        rules: DeviceRules,
        selectors: SelectorCache,
        selectable: Callable[[Claim, DeviceRequest, Candidate], bool],
    ) -> None:
        self._candidates = candidates
        self._plans = plans
        self._rules = rules
        self.selectors = selectors
        self._selectable = selectable
        self._usable_after: dict[int, list[int]] = {}
        """Per request alternative: how many candidates from each index on it might use."""

    def unsatisfiable(self) -> bool:
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
                    usable = self.usable_counts(plan.claim, alt)[0]
                    if usable >= UNLIMITED:
                        return False
                    satisfiable |= usable >= alt.count
                if not satisfiable:
                    return True
            if any(self._constraint_unsatisfiable(plan.claim, c) for c in plan.claim.constraints):
                return True
        return self._devices_fall_short()

    def may_prune_by_supply(self) -> bool:
        """Whether dropping choices that leave too few free devices keeps upstream's answer: no device may
        serve two requests (multi-allocatable devices), and nothing the dropped choices would have reached
        could fail the pod (a selector, derived attribute or capacity error, counted as unlimited usable
        devices, or an All request breaking a claim constraint). Asked once, when the search starts
        backtracking."""
        if any(self._rules.multi(c.device) for c in self._candidates):
            return False
        for plan in self._plans:
            for request in plan.claim.requests:
                for alt in request.alternatives:
                    if alt.mode == "All":
                        if plan.constraints:
                            return False
                    elif self.usable_counts(plan.claim, alt)[0] >= UNLIMITED:
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
                needed = UNLIMITED
                for alt in request.alternatives:
                    if alt.mode == "All":
                        usable = [c.device for c in plan.all_devices[alt.name]]
                        needed = min(needed, len(usable))
                    else:
                        usable = [c.device for _, c in self._usable_candidates(plan.claim, alt)]
                        needed = min(needed, alt.count)
                    devices.update(d.id for d in usable)
                    shareable.update(d.id for d in usable if self._rules.multi(d))
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
                if constraint.match_attribute and self._rules.multi(candidate.device):
                    return False
                per_value[(type(value), value)] += 1
        if constraint.distinct_attribute:
            return needed > len(per_value)
        return needed > max(per_value.values(), default=0)

    def _usable_candidates(self, claim: Claim, alt: DeviceRequest) -> list[tuple[int, Candidate]]:
        """(index, candidate) of every candidate ``alt`` might take (``_usable_counts`` steps there)."""
        counts = self.usable_counts(claim, alt)
        return [(i, c) for i, c in enumerate(self._candidates) if counts[i] != counts[i + 1]]

    def usable_counts(self, claim: Claim, alt: DeviceRequest) -> list[int]:
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
        """1 if ``alt`` might take the candidate, 0 if never, ``UNLIMITED`` if its selectors fail."""
        if not candidate.pool.usable:
            return 0
        if self._rules.held(alt, candidate.device):
            return 0
        try:
            if not self._selectable(claim, alt, candidate):
                return 0
            if not self._rules.could_fit(claim, alt, candidate.device):
                return 0  # its capacity can never hold the request, whatever its shares
            # A derived attribute failing here fails the pod if the search places the device: reach it.
            values = request_derived_values(self.selectors, claim, alt, candidate.device)
            for name in values:
                values[name]
        except (CELError, CapacityRequestError):
            return UNLIMITED
        return 1
