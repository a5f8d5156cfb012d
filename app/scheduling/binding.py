"""Reserve and PreBind: one bind per pod at a time, its devices reserved while the binder writes.

``BindCoordinator.bind`` follows kube-scheduler's binding cycle. Reserve (under the service's lock): the
decision on the chosen node (Filter's kept decision while it is current and has devices chosen on the
node, else decided again with ``Want.DEVICES``), the chosen devices reserved in the inventory so
concurrent filters treat them as used, and the bind marked in flight (``app.scheduling.inflight``).
Where Reserve needs no decision and no wait, it is made as the bind arrives, on the event loop
(``reserve_early``), before kube-scheduler's next filter is read; the bind's worker thread takes it up.
Earlier still, once prioritize's answer is out, the bind is planned on the node it scored strictly best
and its devices held (``hold_best``, ``app.scheduling.prioritizeholds``); Reserve takes that plan up when
it is for the bind's node and still current.
PreBind and Bind: the ``Binder`` writes the claims and the pod outside the lock
(``app.scheduling.binder``); the reservation is released once the write is done or failed, and the
claims shape's answer is patched for the node (``NodeDecider.patch_after_bind``). While another pod's bind
writes a claim this pod shares, the bind waits for the write first. The outcome goes to ``bind_log``; a
failure is also an Event on the pod naming the claims and their devices (``app.scheduling.podevents``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator.decide import SearchNeeded
from allocator.deviceuse import AllocatedDevice, allocated_devices
from allocator.errors import AllocatorError
from app.scheduling.binder import Binder, BindError, BindPlan, ExtendedBind
from app.scheduling.bindlog import BindLog
from app.scheduling.claimrules import is_allocated
from app.scheduling.cycle import CycleState
from app.scheduling.decisions import FilterOutcome, PodView, claims_shape, spec_key
from app.scheduling.inflight import BindsInFlight
from app.scheduling.nodedecider import QUICK_LOCK_WAIT_SECONDS, NodeDecider, NotQuick
from app.scheduling.podevents import DiscardEvents, PodEvents, failed_binding
from app.scheduling.preemptionholds import PreemptionHolds
from app.scheduling.prioritizeholds import PrioritizeHolds
from app.state.cluster import ClusterState
from app.state.podclaims import ClaimNotReady, claim_names, controlled_by, pod_key, state_pod_claims

__all__ = ["INDEX_LAG_SECONDS", "BindCoordinator", "Bound"]

Obj = Mapping[str, Any]

INDEX_LAG_SECONDS = 2.0
"""How long a bind waits for the index to show a claim its pod names. kube-scheduler's informers and ours
see the resourceclaim controller's writes (the generated claim, the pod's ``status.resourceClaimStatuses``)
at slightly different times, so on a real control plane a bind can arrive first. Past this the bind fails
with the reason and kube-scheduler retries the pod."""

INDEX_POLL_SECONDS = 0.02
"""How often a waiting bind looks at the index again."""


@dataclass(frozen=True, slots=True)
class Bound:
    """What a bind that succeeded did."""

    devices: list[str]
    """Devices this bind allocated, ``<claim key>: <driver>/<pool>/<device>``."""
    kept: tuple[str, ...] = ()
    """Claims of the pod that were allocated already (shared with another pod, or written by an earlier
    attempt of this bind), left as they were but for the pod's reservation."""
    already_bound: bool = False
    """The pod was on the node already (kube-scheduler retried a bind that had succeeded): nothing written."""

    def summary(self) -> str:
        """One line for the log: the devices, the claims kept, or why there are none."""
        if self.already_bound:
            return "the pod is on the node already (a retried bind); nothing written"
        parts = [", ".join(self.devices)] if self.devices else []
        if self.kept:
            parts.append(f"claims allocated already: {', '.join(self.kept)}")
        return "; ".join(parts) or "the pod has no ResourceClaims; only the binding written"


@dataclass(frozen=True, slots=True)
class Reservation:
    """What Reserve holds for PreBind: the plan, the token its devices are reserved under, the claims it
    allocates (marked in flight), and the claims shape's cycle to patch once written (None: not shared)."""

    plan: BindPlan
    token: str
    allocating: list[str]
    shape: CycleState | None


class BindCoordinator:
    """Reserve, then PreBind through the binder (module docstring). ``decide_devices(pod, node, quick)``
    is the service's Filter of one node with ``Want.DEVICES`` (PreFilter included)."""

    def __init__(
        self,
        state: ClusterState,
        lock: threading.RLock,
        binds: BindsInFlight,
        decider: NodeDecider,
        decide_devices: Callable[[Obj, str, bool], FilterOutcome],
        binder: Binder,
        step_aside: Callable[[], None] = lambda: None,
    ) -> None:
        self.state = state
        self.step_aside = step_aside
        """Called before each bind plans (``app.scheduling.answerfirst``): kube-scheduler binds in the
        background, its next cycle waits on filter."""
        self.lock = lock
        self.binds = binds
        self.decider = decider
        self.decide_devices = decide_devices
        self.binder = binder
        self.bind_log = BindLog()
        """The last bind outcome per pod, for explain."""
        self.events: PodEvents = DiscardEvents()
        """Where a failed bind is reported (``app.scheduling.podevents``); set before serving."""
        self.index_lag_seconds = INDEX_LAG_SECONDS
        """How long a bind waits for the index to show a claim the pod names (``INDEX_LAG_SECONDS``)."""
        self.preemption_holds = PreemptionHolds(state, lock)
        """Devices held for preemptors (``app.scheduling.preemptionholds``); a pod's own hold is lifted
        while it reserves."""
        self._early: dict[tuple[str, str, str], Reservation] = {}
        """Reservations made as binds arrived (``reserve_early``), by pod key, UID and node, until the
        bind's thread takes them up or ``drop_early`` releases them; under ``_early_lock``, which the
        event loop takes without waiting on the service lock."""
        self._early_lock = threading.Lock()
        self.holds = PrioritizeHolds(state.inventory)
        """Binds planned at prioritize, their devices held until the bind (``hold_best``)."""

    def hold_best(
        self,
        key: str,
        uid: str,
        node_names: Sequence[str],
        scores: Sequence[int],
        attempt: PodView | None,
    ) -> None:
        """Under the lock, after prioritize scored pod ``key`` (``uid``) from its decisions ``attempt`` (or
        filter passed on its best nodes, ``scores`` then fine scores): plan its bind on the node scored
        strictly best, choosing its devices there where prioritize has
        not (a node scored by counts or from an equivalent node), and hold them
        (``app.scheduling.prioritizeholds``). Only where that is certain and quick (on the event loop): no
        tie, ``attempt`` still the pod's decisions, every claim it allocates made for the pod, no bind of
        the pod in flight, no preemption hold of the pod, the devices chosen with a few device checks.
        Ends the holds whose time is up first."""
        self.holds.expire()
        node = _strict_best(node_names, scores)
        if node is None or self.holds.seconds <= 0 or self.binds.node_of(key) is not None:
            return
        if attempt is None or self.decider.cache.view(uid) is not attempt:
            # An answer kube-scheduler gave up waiting for comes late: the pod's bind reserved since (its
            # decisions are gone) or a new attempt of the pod filtered again (new decisions, maybe held
            # already). Planning would hold devices for a pod that is bound, or replace the current hold.
            return
        if key in self.preemption_holds:
            return  # its devices are held for it already, on the node it was nominated for
        # The checks on the pod's claims come before planning, which may choose devices.
        pod = self.state.get("Pod", key)
        if pod is None:
            return
        try:
            claims = state_pod_claims(self.state, pod)
        except ClaimNotReady:
            return
        owner = str((pod.get("metadata") or {}).get("uid") or "")
        if self.binds.claims_of(pod, claims) or not all(
            controlled_by(pc.claim, owner) for pc in claims if not is_allocated(pc)
        ):
            return  # a claim other pods may name (module docstring of app.scheduling.prioritizeholds)
        try:
            planned = self._plan(key, uid, node, quick=True, keep_view=True)
        except (NotQuick, SearchNeeded, ClaimNotReady, BindError, AllocatorError):
            return
        if planned is None:
            return
        plan, shape = planned
        devices = tuple(device for _, device in _planned_devices(plan))
        if devices:
            self.holds.hold(key, uid, node, plan, shape, devices)

    def reserve_early(self, namespace: str, name: str, uid: str, node_name: str) -> Reservation | None:
        """Reserve for the bind of pod ``namespace/name`` on ``node_name`` on the caller's thread (the event
        loop, as the bind arrives) when that is quick: the lock free within ``QUICK_LOCK_WAIT_SECONDS``,
        the pod's claims indexed, no other bind writing a claim it shares, and its devices on the node
        held by prioritize, or chosen with a few device checks. kube-scheduler sends the next pod's filter
        right after the bind, while the bind's worker thread may not have started: reserved here, the
        devices are used for that filter, which would otherwise pass the node for them and have the next
        bind refused. ``bind`` takes the reservation up if the pod and its claims are unchanged by then;
        whatever is not quick (or fails) is left to it. Returns the reservation, for ``drop_early``."""
        key = f"{namespace}/{name}"
        if not self.lock.acquire(timeout=QUICK_LOCK_WAIT_SECONDS):
            return None
        try:
            with self.preemption_holds.lifted_for(key, uid):
                reservation = self._reserve(key, uid, node_name, quick=True)
            if reservation is not None:
                with self._early_lock:
                    self._early[(key, uid, node_name)] = reservation
            return reservation
        except (NotQuick, SearchNeeded, ClaimNotReady, BindError, AllocatorError):
            return None  # the bind's own thread meets it again and reports it
        finally:
            self.lock.release()

    def drop_early(
        self, namespace: str, name: str, uid: str, node_name: str, reservation: Reservation
    ) -> None:
        """Release ``reservation`` (``reserve_early``'s) if the bind's thread did not take it up (it never
        ran), and only that one: a retry of the bind may have reserved anew under the same key. On the
        event loop: the service lock is waited for briefly, else the release goes to a thread of its own."""
        key = f"{namespace}/{name}"
        with self._early_lock:
            if self._early.get((key, uid, node_name)) is not reservation:
                return
            del self._early[(key, uid, node_name)]
        if self.lock.acquire(timeout=QUICK_LOCK_WAIT_SECONDS):
            try:
                self._release(key, node_name, reservation, written=False)
            finally:
                self.lock.release()
            return

        def release() -> None:
            with self.lock:
                self._release(key, node_name, reservation, written=False)

        threading.Thread(target=release, name="dra-extender-drop-early", daemon=True).start()

    def _taken_up(self, key: str, uid: str, node_name: str) -> Reservation | None:
        """The early reservation of this bind, if its pod and claims are still the objects it was planned
        from (else it is released: the bind reserves again, meeting a deleted or recreated pod as before)."""
        with self._early_lock:
            reservation = self._early.pop((key, uid, node_name), None)
        if reservation is None:
            return None
        with self.lock:
            current = self._unchanged(reservation.plan)
            if not current:
                self._release(key, node_name, reservation, written=False)
        return reservation if current else None

    def _unchanged(self, plan: BindPlan) -> bool:
        """Under the lock: the pod and its claims are still the objects ``plan`` was made from."""
        return self.state.get("Pod", pod_key(plan.pod)) is plan.pod and all(
            self.state.get("ResourceClaim", pc.key) is pc.claim for pc, _ in plan.claims
        )

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> Bound:
        """Allocate on ``node_name`` and write it through the binder; returns what it did. Raises
        BindError; then nothing is written and the devices are free again (module docstring)."""
        key = f"{namespace}/{name}"
        reservation = self._taken_up(key, uid, node_name)
        try:
            if reservation is None:
                self.step_aside()
                reservation = self._reserve_once_indexed(key, uid, node_name)
            bound = (
                Bound([], already_bound=True)
                if reservation is None
                else self._pre_bind(key, node_name, reservation)
            )
        except Exception as e:
            with self.lock:
                self.bind_log.record(key, uid, node_name, str(e))
                claims = (
                    _bind_claims(reservation.plan)
                    if reservation is not None
                    else self._pod_claim_allocations(key)
                )
            self.events.record(failed_binding(key, uid, node_name, claims, str(e)))
            raise
        with self.lock:
            self.bind_log.record(key, uid, node_name, "")
        return bound

    def _pod_claim_allocations(self, key: str) -> list[tuple[str, Mapping[str, Any] | None]]:
        """(key, allocation) of the claims of pod ``key`` as the state has them, for a bind that failed
        before its plan."""
        pod = self.state.get("Pod", key)
        if pod is None:
            return []
        namespace = key.partition("/")[0]
        found = []
        for claim_key in (f"{namespace}/{name}" for name in claim_names(pod)):
            claim = self.state.get("ResourceClaim", claim_key)
            found.append((claim_key, ((claim or {}).get("status") or {}).get("allocation")))
        return found

    def _pre_bind(self, key: str, node_name: str, reservation: Reservation) -> Bound:
        """Write the reserved plan through the binder, then release its reservation."""
        plan = reservation.plan
        written = False
        try:
            self.binder.bind(plan)
            written = True
        finally:
            with self.lock:
                self._release(key, node_name, reservation, written=written)
        devices = [f"{key}: {'/'.join(device.id)}" for key, device in _planned_devices(plan)]
        return Bound(devices, tuple(pc.key for pc, allocation in plan.claims if allocation is None))

    def _release(self, key: str, node_name: str, reservation: Reservation, *, written: bool) -> None:
        """Under the lock: the reservation's devices free again (written: held by the claims now), its
        bind no longer in flight, and the shape's answer patched for the node once written."""
        self.state.inventory.release(reservation.token)
        self.binds.finish(self.state, key, node_name, reservation.allocating, written=written)
        if written and reservation.shape is not None:
            self.decider.patch_after_bind(reservation.shape)

    def _reserve_once_indexed(self, key: str, uid: str, node_name: str) -> Reservation | None:
        """``_reserve``, waiting up to ``index_lag_seconds`` (without the lock, so the watches can apply
        events) while the index does not show a claim the pod names yet."""
        deadline = time.monotonic() + self.index_lag_seconds
        while True:
            try:
                with self.lock:
                    # Waited for first: the wait lets the lock go, and a lifted preemption hold would let
                    # other pods' filters take the preemptor's devices meanwhile.
                    self.binds.await_claim_writes(self.state, key)
                    with self.preemption_holds.lifted_for(key, uid):
                        return self._reserve(key, uid, node_name)
            except ClaimNotReady as e:
                if time.monotonic() >= deadline:
                    # Usually the resourceclaim controller has not created the claim yet: a bind error
                    # makes kube-scheduler put the pod back in its queue, so nothing is lost.
                    raise BindError(
                        f"pod {key} is not ready to bind: {e}; kube-scheduler will retry the pod"
                    ) from None
            time.sleep(INDEX_POLL_SECONDS)

    def _reserve(self, key: str, uid: str, node_name: str, *, quick: bool = False) -> Reservation | None:
        """Under the lock, once no other bind writes a claim the pod shares (the caller waited for that, in
        ``_reserve_once_indexed``): the bind's plan, with its devices reserved under a token of this attempt
        and its claims marked in flight; None when the pod is already on that node. Raises ClaimNotReady
        while the index lacks a claim the pod names. ``quick``: raise NotQuick or SearchNeeded, having
        changed nothing, rather than wait for other binds, search or decide more than a few device
        checks."""
        binding = self.binds.node_of(key)
        if binding is not None:
            raise BindError(f"pod {key}: another bind of this pod is in progress (to {binding})")
        if quick and self.binds.claims_of_pod(self.state, self.state.get("Pod", key)):
            raise NotQuick
        held = self.holds.take(
            key, uid, node_name, lambda plan: self._unchanged(plan) and self.state.node(node_name) is not None
        )
        if held is not None:
            # The devices stay reserved under the hold's token: the bind releases that one.
            self.decider.cache.forget(held.uid)
            allocating = _allocating(held.plan)
            self.binds.start(key, node_name, allocating)
            return Reservation(held.plan, held.token, allocating, held.shape)
        stale = self.holds.lift(key)
        try:
            planned = self._plan(key, uid, node_name, quick=quick)
        except (NotQuick, SearchNeeded):
            if stale is not None:
                self.holds.put_back(key, stale)
            raise
        if planned is None:
            return None
        plan, shape = planned
        allocating = _allocating(plan)
        token = self.binds.start(key, node_name, allocating)
        self.state.inventory.reserve(token, tuple(device for _, device in _planned_devices(plan)))
        return Reservation(plan, token, allocating, shape)

    def _plan(
        self, key: str, uid: str, node_name: str, *, quick: bool = False, keep_view: bool = False
    ) -> tuple[BindPlan, CycleState | None] | None:
        """The decision for a bind and, where the pod's decisions are its claims shape's, that shape's
        cycle (to patch the shape's answer once the bind is written); None when the pod is already on
        that node (a retried bind). ``quick``: raise NotQuick, having changed nothing, where the node must
        be decided with a search or more than a few device checks (``NodeDecider.filter``'s quick);
        SearchNeeded may come too. ``keep_view``: keep the pod's decisions (a hold's plan: the bind may name
        another node)."""
        pod = self.state.get("Pod", key)
        if pod is None:
            raise BindError(f"pod {key} not found")
        if self.state.node(node_name) is None:
            raise BindError(f"node {node_name} is not known to dra-extender")
        pod_uid = str((pod.get("metadata") or {}).get("uid") or key)
        if uid and pod_uid != uid:
            raise BindError(f"pod {key}: UID {uid} does not match the current pod")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound == node_name:
                return None
            raise BindError(f"pod {key} is already assigned to node {bound!r}")
        claims = state_pod_claims(self.state, pod)
        pending_claims = [pc for pc in claims if not is_allocated(pc)]
        cache = self.decider.cache
        view = cache.view(pod_uid)
        kept = self.decider.kept(pod_uid, node_name)
        if (
            kept is None
            or view is None
            or view.claims != tuple(pc.key for pc in pending_claims)
            or view.shape != claims_shape(pending_claims)
            or view.pod_spec != spec_key(pod)
            or not kept[0].results
            or kept[0].fine_score is None
        ):
            # Something changed since filter (or filter never ran here), or filter decided by counts or
            # from an equivalent node: decide again, choosing the devices.
            outcome = self.decide_devices(pod, node_name, quick)
            if outcome.error:
                raise BindError(outcome.error)
            if node_name not in outcome.passed:
                reason = outcome.failed.get(node_name) or outcome.unresolvable.get(node_name)
                raise BindError(f"pod {key} does not fit on node {node_name}: {reason}")
            kept = self.decider.kept(pod_uid, node_name)  # None for a pod without claims
        view = cache.view(pod_uid)
        shape = None
        if view is not None and view.shared and pending_claims:
            with contextlib.suppress(AllocatorError):  # parsed by filter: only a changed claim fails here
                shape = CycleState(pod, view, [self.state.parsed_claim(pc.key) for pc in pending_claims])
        if not keep_view:
            cache.forget(pod_uid)
        decision, ext = kept if kept is not None else (None, None)
        pending = iter(decision.results or () if decision is not None else ())
        planned = tuple((pc, None if is_allocated(pc) else next(pending)) for pc in claims)
        extended = None
        if ext is not None:
            # The extended-resource claim is allocated last (upstream's claim store keeps it last).
            extended = ExtendedBind(ext.obj, next(pending), ext.pod_status())
        return BindPlan(pod, node_name, planned, extended), shape


def _strict_best(node_names: Sequence[str], scores: Sequence[int]) -> str | None:
    """The node with the highest score above 0 when no other node has it, else None."""
    best = max(scores, default=0)
    if best <= 0 or scores.count(best) != 1:
        return None
    return node_names[scores.index(best)]


def _allocating(plan: BindPlan) -> list[str]:
    """Keys of the claims the plan allocates (the others are allocated already)."""
    return [pc.key for pc, allocation in plan.claims if allocation is not None]


def _bind_claims(plan: BindPlan) -> list[tuple[str, Mapping[str, Any] | None]]:
    """(key, allocation) of each claim of the plan: the one it writes, or the one the claim has."""
    claims: list[tuple[str, Mapping[str, Any] | None]] = [
        (pc.key, allocation if allocation is not None else (pc.claim.get("status") or {}).get("allocation"))
        for pc, allocation in plan.claims
    ]
    if plan.extended is not None:
        claims.append((plan.extended.key, plan.extended.allocation))
    return claims


def _planned_devices(plan: BindPlan) -> list[tuple[str, AllocatedDevice]]:
    """(claim key, device) of every allocation the plan writes, the extended-resource claim last."""
    allocations = [(pc.key, allocation) for pc, allocation in plan.claims if allocation is not None]
    if plan.extended is not None:
        allocations.append((plan.extended.key, plan.extended.allocation))
    return [
        (key, device)
        for key, allocation in allocations
        for device in allocated_devices(allocation, f"ResourceClaim {key}")
    ]
