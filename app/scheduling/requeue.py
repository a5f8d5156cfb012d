"""Which rejected pods an event can help: the decision half of the requeuer, the extender's queueing hints.

kube-scheduler v1.37.2 puts a pod whose filter an extender failed on every node into its unschedulable
pool with the pseudo-plugin ``Extender`` as the rejector (``schedule_one.go`` ``findNodesThatFitPod``), and
moves it back on the events ``Extender`` registers (``framework.UnrollWildCardResource``: Pods, Nodes,
ResourceClaims, DeviceClasses, storage kinds). ResourceSlices and DeviceTaintRules are not among them, and
a ResourceClaim event may reach kube-scheduler before the extender's own watch, so the retry sees the old
devices and fails again. So the extender tells kube-scheduler itself, after its own index has the change:
an update of the pod moves it back (``PriorityQueue.Update``; docs/operations.md "Requeue of rejected pods").

``RejectedPods`` keeps the pods the last filter answer failed on every node (only pods of the configured
schedulers, at most ``max_pods``, the oldest rejection forgotten first) and, as informer events arrive
(``observe``, called under the service lock after the change is applied), moves the pods an event can
help to the *due* set that ``app.kube.requeue.Requeuer`` signals:

====================================  ==========================================================
event                                 pods it can help
====================================  ==========================================================
ResourceSlice added or changed        pods asking for a DeviceClass that matches one of its
                                      devices (a new slice, more devices, a device taint removed)
DeviceTaintRule event                 every rejected pod (a rule narrowed or gone; an observer
                                      cannot tell an added rule from a changed one)
ResourceClaim deallocated or deleted  every rejected pod (its devices are free; a deleted holder
                                      pod's claims end this way)
DeviceClass added or changed          pods asking for that class
devices held at prioritize freed      every rejected pod (``devices_freed``: the pod they were
unused                                held for was bound elsewhere or not at all)
====================================  ==========================================================

A pod whose DeviceClasses cannot be told (its claims not resolved yet, DRA-backed extended resources)
counts as asking for every class. A pod leaves the set when it is due, bound, deleted or passes a filter;
a later rejection brings it back. A helpful event during a filter's decision (``mark`` before, ``filtered``
after) makes the rejected pod due at once: the answer may predate the change.

Thread-safe: filters record from the HTTP threads, informers observe on the cluster runtime's thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from allocator.errors import CELError
from allocator.selectors import SelectorCache
from app.scheduling.claimrules import has_allocation, needs_no_devices
from app.scheduling.decisions import FilterOutcome
from app.state.cluster import ClusterState
from app.state.podclaims import ClaimNotReady, pod_key, state_pod_claims

__all__ = ["PodRef", "RejectedPods"]

ANY_CLASS = None
"""A pod's classes when they cannot be told: every event can help it."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod to signal: the UID guards against a pod recreated under the same name."""

    namespace: str
    name: str
    uid: str


class RejectedPods:
    """The rejected pods and which of them are due for a requeue signal (see the module docstring).

    ``scheduler_names``: only pods of these kube-scheduler profiles are kept. ``on_due``: called (from any
    thread) when pods become due. ``max_pods``: most rejected pods kept."""

    def __init__(
        self,
        state: ClusterState,
        selectors: SelectorCache,
        scheduler_names: Iterable[str],
        max_pods: int,
        on_due: Callable[[], None] = lambda: None,
    ) -> None:
        self.state = state
        self.selectors = selectors
        self.scheduler_names = frozenset(scheduler_names)
        self.max_pods = max_pods
        self.on_due = on_due
        self._lock = threading.Lock()
        self._rejected: OrderedDict[str, PodRef] = OrderedDict()
        """Pod key -> the pod, oldest rejection first."""
        self._due: dict[str, PodRef] = {}
        self._events = 0
        """Helpful events seen so far (``mark``)."""
        self._allocated: set[str] = set()
        """Keys of the ResourceClaims the index shows allocated, to tell a deallocation from other updates
        (as many as the state holds claims)."""
        self.evicted = 0
        """Rejections forgotten because the set was full."""

    # --- from filter ------------------------------------------------------------------------------

    def mark(self) -> int:
        """Taken before a filter decides; given back to ``filtered``."""
        return self._events

    def filtered(
        self, pod: Mapping[str, Any], outcome: FilterOutcome, mark: int, *, retry_now: bool = False
    ) -> None:
        """Record the filter answer ``outcome`` for ``pod``: remembered when no node passed, forgotten when
        some did. ``retry_now``: due at once (kube-scheduler's sample missed the pod's devices,
        ``app.scheduling.sampling.SchedulerSample``)."""
        key = pod_key(pod)
        if outcome.passed or needs_no_devices(pod):
            self._forget(key)
            return
        spec = pod.get("spec") or {}
        if str(spec.get("schedulerName") or "default-scheduler") not in self.scheduler_names:
            return
        meta = pod.get("metadata") or {}
        ref = PodRef(
            str(meta.get("namespace") or "default"), str(meta.get("name")), str(meta.get("uid") or "")
        )
        with self._lock:
            if retry_now or mark != self._events:
                # kube-scheduler's sample missed, or a helpful event came while this answer was decided
                self._due[key] = ref
                self._rejected.pop(key, None)
            else:
                self._rejected[key] = ref
                self._rejected.move_to_end(key)
                while len(self._rejected) > self.max_pods:
                    self._rejected.popitem(last=False)
                    self.evicted += 1
                return
        self.on_due()

    # --- from the informers -----------------------------------------------------------------------

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (the service lock held, the change applied)."""
        if kind == "Pod":
            if obj is None or (obj.get("spec") or {}).get("nodeName"):
                self._forget(key)
            return
        if kind == "ResourceClaim":
            if obj is not None and has_allocation(obj):
                self._allocated.add(key)
            elif key in self._allocated:
                self._allocated.discard(key)
                self._helped(None)
        elif kind == "DeviceTaintRule":
            self._helped(None)
        elif kind == "DeviceClass" and obj is not None:
            self._helped(lambda classes: classes is ANY_CLASS or key in classes)
        elif kind == "ResourceSlice" and obj is not None:
            self._helped(self._matches_slice(key))

    def devices_freed(self) -> None:
        """Devices held for a pod are free again with no event of their own
        (``app.scheduling.prioritizeholds``)."""
        self._helped(None)

    def _helped(self, helps: Callable[[frozenset[str] | None], bool] | None) -> None:
        """Move the rejected pods whose DeviceClasses ``helps`` accepts (None: all of them, their classes
        not looked up) to the due set."""
        with self._lock:
            self._events += 1
            candidates = list(self._rejected.items())
        if not candidates:
            return
        due = {key: ref for key, ref in candidates if helps is None or helps(self._classes(key))}
        if not due:
            return
        with self._lock:
            for key, ref in due.items():
                if self._rejected.pop(key, None) is not None:
                    self._due[key] = ref
        self.on_due()

    def _matches_slice(self, key: str) -> Callable[[frozenset[str] | None], bool]:
        """Whether a pod asking for these classes can use a device of ResourceSlice ``key``."""
        published = self.state.inventory.slice(key)
        devices = published.devices if published is not None else ()
        known: dict[str, bool] = {}

        def matches(name: str) -> bool:
            device_class = self.state.inventory.device_class(name)
            if device_class is None:
                return False  # the class's own arrival will count
            for device in devices:
                try:
                    if self.state.inventory.class_matches(device_class, device, self.selectors):
                        return True
                except CELError:
                    return True  # the filter reports the error; let the pod see it
            return False

        def helps(classes: frozenset[str] | None) -> bool:
            if classes is ANY_CLASS:
                return True
            for name in classes:
                if name not in known:
                    known[name] = matches(name)
                if known[name]:
                    return True
            return False

        return helps

    def _classes(self, key: str) -> frozenset[str] | None:
        """The DeviceClasses the pod's unallocated claims ask for, or ANY_CLASS when they cannot be told."""
        pod = self.state.get("Pod", key)
        if pod is None:
            return ANY_CLASS
        spec = pod.get("spec") or {}
        if not spec.get("resourceClaims"):
            return ANY_CLASS  # DRA-backed extended resources: their classes come from the DeviceClasses
        try:
            claims = state_pod_claims(self.state, pod)
        except ClaimNotReady:
            return ANY_CLASS
        names: set[str] = set()
        for pod_claim in claims:
            if has_allocation(pod_claim.claim):
                continue
            for request in ((pod_claim.claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
                exactly = request.get("exactly") or {}
                names.update(
                    str(alternative.get("deviceClassName"))
                    for alternative in [exactly, *(request.get("firstAvailable") or ())]
                    if alternative.get("deviceClassName")
                )
        return frozenset(names) if names else ANY_CLASS

    def _forget(self, key: str) -> None:
        with self._lock:
            self._rejected.pop(key, None)
            self._due.pop(key, None)

    # --- for the requeuer -------------------------------------------------------------------------

    def take_due(self) -> list[PodRef]:
        """The pods due for a signal, oldest first; they leave the set."""
        with self._lock:
            due = list(self._due.values())
            self._due.clear()
        return due

    def __len__(self) -> int:
        """Rejected pods remembered (not yet due)."""
        return len(self._rejected)
