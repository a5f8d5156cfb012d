"""Devices held between prioritize and bind: the bind planned on the node prioritize scored best.

kube-scheduler binds in a goroutine after its cycle, so the next pod's filter and prioritize can arrive
before the previous pod's bind, and so before the bind's early Reserve (``app.scheduling.binding``). That
filter would see the devices the previous pod is about to take as free, and prioritize would rank the same
best-packed node first again, pod after pod; the binds past the node's capacity are refused and
kube-scheduler retries those pods. The in-tree DynamicResources plugin has no such window: it assumes the
allocation in Reserve, inside the cycle.

So when one node scores strictly best, the bind is planned there (from the decision filter kept, or
choosing the devices with a few device checks) and the plan's devices reserved under a token of the hold's
own (``BindCoordinator.hold_best``), right after prioritize's answer is written and before the next
request is read: kube-scheduler's cycle does not wait on the planning. Only claims made for the pod are
held (from its templates, or its extended-resource claim): a claim other pods can name would be held as a
user of its own, and fail them on the very node it is about to be allocated on. A pod with a preemption
hold (``app.scheduling.preemptionholds``) has its devices held already.

kube-scheduler then picks that node unless its own plugins' scores outweigh the extender's; it breaks a
tie at random, so a tied best is not held. The pod's bind takes the hold up when it names that node, the
pod and its claims are still the objects planned from and nothing on the node that could take the plan's
devices or counters away changed (``Inventory.availability_version`` is the one the hold left: other pods'
holds and binds landing on the node meanwhile leave it, a slice, taint or another writer's allocation
does not): the devices stay reserved under the same token while the binder writes. How long a hold
lasts: ``seconds``, the cluster setting ``prioritize_hold_seconds``.

A hold ends unused, its devices free again, when:

* the bind names another node;
* the bind names that node but the pod, a claim or the node's availability changed since (``stale``: the
  bind plans anew there, as without a hold);
* the pod is filtered or prioritized again (its last attempt ended without a bind), deleted, or bound by
  another path;
* ``seconds`` pass (a plugin after Score rejected the pod, or kube-scheduler went away): ``expire`` runs on
  every filter and prioritize, and every ``sweep_seconds`` while none comes (on the cluster runtime's
  clock; offline, ``sweeping_late_holds``' thread);
* more than ``max_holds`` are kept (the oldest ends first).

Then, but for a stale hold (its devices go to the same pod's bind), ``on_freed`` is called: pods rejected
while the devices were held may fit now (the requeuer, ``app.scheduling.requeue``). Holds live in memory
only. Callers hold the service lock.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from allocator.deviceuse import AllocatedDevice
from allocator.inventory import Inventory
from app.scheduling.binder import BindPlan
from app.scheduling.cycle import CycleState

__all__ = ["HOLD_SECONDS", "MAX_HOLDS", "PlannedHold", "PrioritizeHolds", "sweeping_late_holds"]

log = logging.getLogger(__name__)

HOLD_SECONDS = 5.0
"""How long a hold waits for its bind. kube-scheduler sends the bind milliseconds after prioritize unless
a Permit plugin makes the pod wait or PreBind waits for volumes; a bind that comes later plans anew, as
without a hold. 0 turns holds off."""

MAX_HOLDS = 1000
"""Holds kept at most. kube-scheduler has one pod in its cycle at a time and binds within milliseconds, so
only pods whose binds are held up accumulate."""


@dataclass(frozen=True, slots=True)
class PlannedHold:
    """The bind of the pod with ``uid`` planned on ``node``, its ``devices`` reserved under ``token`` until
    ``until`` (the clock's seconds), valid while the node's ``Inventory.availability_version`` is
    ``version``. ``shape``: the claims shape's cycle to patch once written (None: not shared)."""

    uid: str
    node: str
    token: str
    plan: BindPlan
    shape: CycleState | None
    devices: tuple[AllocatedDevice, ...]
    until: float
    version: tuple[int, int]


class PrioritizeHolds:
    """Pod key -> its ``PlannedHold`` (module docstring). ``clock``: monotonic seconds (injectable)."""

    def __init__(
        self,
        inventory: Inventory,
        clock: Callable[[], float] = time.monotonic,
        seconds: float = HOLD_SECONDS,
        max_holds: int = MAX_HOLDS,
    ) -> None:
        self.inventory = inventory
        self.clock = clock
        self.seconds = seconds
        self.max_holds = max_holds
        self.on_freed: Callable[[], None] = lambda: None
        """Called (lock held) when a hold ends unused; set before serving."""
        self.taken = 0
        """Holds a bind took up."""
        self.stale = 0
        """Holds their bind found out of date (it planned anew on the node)."""
        self.unused = 0
        """Holds that ended without their bind."""
        self._holds: OrderedDict[str, PlannedHold] = OrderedDict()
        """Oldest first; with one ``seconds`` for all, that is also earliest deadline first."""
        self._tokens = itertools.count(1)

    def hold(
        self,
        key: str,
        uid: str,
        node: str,
        plan: BindPlan,
        shape: CycleState | None,
        devices: tuple[AllocatedDevice, ...],
    ) -> None:
        """Reserve ``devices`` for pod ``key``'s bind on ``node`` as ``plan`` has it, replacing its hold."""
        self.end(key)
        while len(self._holds) >= self.max_holds:
            self.end(next(iter(self._holds)))  # before the version is taken: it may be the same node
        token = f"prioritized:{next(self._tokens)}:{key}"
        self.inventory.reserve(token, devices)
        until = self.clock() + self.seconds
        version = self.inventory.availability_version(node)
        self._holds[key] = PlannedHold(uid, node, token, plan, shape, devices, until, version)

    def take(self, key: str, uid: str, node: str, usable: Callable[[BindPlan], bool]) -> PlannedHold | None:
        """Pod ``key``'s hold for its bind to ``node``: handed over when it is the pod's (``uid``; ""
        matches any), for that node, its availability unchanged since and ``usable(plan)`` (the devices stay
        reserved under the hold's token, which the bind releases once written or failed). None
        otherwise: a hold for another node or pod is ended; a stale one is left for ``lift``."""
        hold = self._holds.get(key)
        if hold is None:
            return None
        if hold.node != node or (uid and hold.uid != uid):
            self.end(key)
            return None
        if self.inventory.availability_version(node) != hold.version or not usable(hold.plan):
            return None
        del self._holds[key]
        self.taken += 1
        return hold

    def lift(self, key: str) -> PlannedHold | None:
        """Pod ``key``'s stale hold out of the inventory and the table, so that its bind plans anew on the
        node with the devices free (``stale``); ``put_back`` if that planning gives up on the caller's
        thread. None: the pod has no hold."""
        hold = self._holds.pop(key, None)
        if hold is not None:
            self.inventory.release(hold.token)
            self.stale += 1
        return hold

    def put_back(self, key: str, hold: PlannedHold) -> None:
        """Undo ``lift``: the quick attempt to plan anew gave up, and the bind's worker thread will look
        again. Until then the devices stay held, as before the attempt."""
        self.inventory.reserve(hold.token, hold.devices)
        self._holds[key] = hold
        self._holds.move_to_end(key, last=False)  # among the oldest, by its deadline
        self.stale -= 1

    def end(self, key: str) -> None:
        """End pod ``key``'s hold unused, if it has one."""
        hold = self._holds.pop(key, None)
        if hold is not None:
            self._free(hold)

    def expire(self) -> None:
        """End the holds whose time is up."""
        now = self.clock()
        while self._holds:
            key, hold = next(iter(self._holds.items()))
            if hold.until > now:
                return
            self.end(key)

    def sweep(self, lock: Any) -> None:
        """``expire`` under ``lock`` (the service's) when a hold is kept: what runs every
        ``sweep_seconds`` while no filter or prioritize comes."""
        if self._holds:
            with lock:
                self.expire()

    @property
    def sweep_seconds(self) -> float:
        """How often holds are expired while no filter or prioritize comes: a late hold's devices stay
        reserved at most half a hold (half a second when holds are shorter) past its time."""
        return max(self.seconds, 1.0) / 2

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (lock held): a held pod deleted, recreated under its name or bound (by another
        path: its own bind took the hold up first) ends its hold."""
        hold = self._holds.get(key) if kind == "Pod" else None
        if hold is None:
            return
        if (
            obj is None
            or str((obj.get("metadata") or {}).get("uid") or "") != hold.uid
            or (obj.get("spec") or {}).get("nodeName")
        ):
            self.end(key)

    def _free(self, hold: PlannedHold) -> None:
        self.inventory.release(hold.token)
        self.unused += 1
        self.on_freed()

    def __len__(self) -> int:
        return len(self._holds)


@contextlib.contextmanager
def sweeping_late_holds(holds: PrioritizeHolds, lock: Any) -> Iterator[None]:
    """A daemon thread expiring ``holds`` every ``sweep_seconds`` (under ``lock``, the service's) while the
    block runs: offline ``serve`` has no cluster runtime to do it, and without it a hold whose bind never
    came kept its devices in use for explain and the device views until the next filter."""
    stop = threading.Event()

    def sweep() -> None:
        while not stop.wait(holds.sweep_seconds):
            try:
                holds.sweep(lock)
            except Exception:  # logged where the logs go; the next sweep tries again
                log.exception("expiring late prioritize holds")

    thread = threading.Thread(target=sweep, name="late-holds", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
