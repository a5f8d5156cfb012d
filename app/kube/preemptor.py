"""The extender's own preemption, for pods short only of devices: evicts, nominates, keeps the devices.

kube-scheduler's DefaultPreemption cannot help a pod whose only shortage is devices (its dry run sees no
in-tree filter fail and never calls ``preemptVerb``). For each pod filter rejected that way
(``app.scheduling.preemptionrequests``), once kube-scheduler's own PostFilter has had its turn, this
controller

1. checks the pod may still preempt: the same UID, not bound or being deleted, ``preemptionPolicy`` not
   ``Never``, no hold of its own yet, and no lower-priority pod still terminating on its
   ``status.nominatedNodeName`` (upstream ``PodEligibleToPreemptOthers``: its earlier victims are still
   going, so it waits rather than evicting more);
2. reads the PodDisruptionBudgets and asks the planner (``app.scheduling.victims.plan``, the one
   kube-scheduler's ``preemptVerb`` path uses too) for the node and victims, among the nodes the rejection
   named;
3. waits for room in the eviction rate limit (``preemption_evictions_per_minute`` in any 60 s; a plan
   needing more is never carried out) and plans again after waiting;
4. keeps the devices the pod would get there for it (``app.scheduling.preemptionholds``) for
   ``preemption_hold_seconds`` plus the victims' longest grace period (at most a day), and sets
   ``status.nominatedNodeName`` on the pod (its UID as precondition; a pod gone gets nobody evicted),
   before the first eviction: an attempt stopped after some evictions leaves the pod nominated, so the
   next one waits for those victims (step 1) rather than evicting others (one stopped before any clears
   the nomination);
5. per victim, the ones a PodDisruptionBudget selects first: an Eviction (``pods/eviction``, the
   victim's UID as precondition), an Event ``Preempted`` on it, then a ``DisruptionTarget`` condition
   with reason ``PreemptionByScheduler`` (as kube-scheduler marks its victims) on ``pods/status``. A 429
   naming a ``DisruptionBudget`` cause (a budget refuses) drops the node: the hold is released and the
   next plan leaves the node out. A victim already gone (404, 409) counts as evicted. Another error,
   priority and fairness's 429 included, stops this attempt (the hold released; the pod's next rejection
   tries again), and so does the hold's end (the pod bound, deleted or recreated meanwhile: nobody more is
   evicted for it);
6. records an Event ``PreemptingForDevices`` on the pod.

Only the replica next to the leading kube-scheduler acts (``app.kube.leader``); a standby drops the
requests. Nobody is evicted twice: the planner never picks a pod being deleted, and the UIDs this replica
evicted are remembered (``MAX_EVICTED``) until the watch shows the deletion. A restart forgets the holds
(they are in memory, with a deadline); the pods it evicted show ``deletionTimestamp`` or are gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from allocator.decide import Policy
from allocator.errors import AllocatorError
from app.config.settings import MAX_SECONDS, ClusterSettings
from app.kube.client import CORE_PODS, DISRUPTION_BUDGET_CAUSE, POLICY_PDBS, KubeAPIError
from app.kube.clock import Clock, SystemClock
from app.kube.leader import SchedulerLease
from app.scheduling.bindingconditions import device_label
from app.scheduling.podevents import PodEvents, preempted, preempting_for_devices
from app.scheduling.preemptionholds import PreemptionHolds
from app.scheduling.preemptionrequests import PreemptionRequest, PreemptionRequests, may_preempt
from app.scheduling.service import SchedulingService
from app.scheduling.victims import Candidate, DisruptionBudgets, plan, pod_priority
from app.state.podclaims import ClaimNotReady

__all__ = ["EvictionWindow", "PreemptionStats", "Preemptor"]

log = logging.getLogger(__name__)

MAX_EVICTED = 10_000
"""Victim UIDs remembered as evicted by this replica (oldest forgotten first)."""

HOLD_CHECK_SECONDS = 5.0
"""How often expired holds are released when no request arrives."""

_GONE = (404, 409, 422)
"""The pod is gone or recreated under its name (a UID precondition fails: 409; a changed UID in a
patch: 422)."""

_REFUSED = 429
"""The Eviction API refuses: a PodDisruptionBudget allows no disruption now."""


@dataclass(slots=True)
class PreemptionStats:
    """Counters for tests, logs and metrics."""

    preempted: int = 0
    """Pods nominated after their victims were evicted."""
    evicted: int = 0
    refused: int = 0
    """Candidates dropped because a PodDisruptionBudget refused an eviction (429)."""
    not_helped: int = 0
    """Requests where no eviction could help (or the pod may not preempt)."""
    not_leader: int = 0
    rate_limited: int = 0
    """Plans that waited for room in the eviction rate limit."""
    failed: int = 0


class EvictionWindow:
    """At most ``per_minute`` evictions in any 60 s of ``clock``."""

    def __init__(self, per_minute: int, clock: Clock) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._times: deque[float] = deque()

    def wait(self, count: int) -> float | None:
        """Seconds until ``count`` more evictions fit (0: now); None when they never will."""
        if count > self.per_minute:
            return None
        now = self.clock.now()
        while self._times and self._times[0] <= now - 60.0:
            self._times.popleft()
        over = len(self._times) + count - self.per_minute
        return 0.0 if over <= 0 else self._times[over - 1] + 60.0 - now

    def record(self) -> None:
        self._times.append(self.clock.now())


class Preemptor:
    """Carries out preemption for the requests of ``requests`` (module docstring)."""

    def __init__(
        self,
        client: Any,
        service: SchedulingService,
        requests: PreemptionRequests,
        holds: PreemptionHolds,
        settings: ClusterSettings,
        leader: SchedulerLease,
        events: PodEvents,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.service = service
        self.requests = requests
        self.holds = holds
        self.settings = settings
        self.leader = leader
        self.events = events
        self.clock: Clock = clock or SystemClock()
        self.window = EvictionWindow(settings.preemption_evictions_per_minute, self.clock)
        self.stats = PreemptionStats()
        self._evicted: OrderedDict[str, None] = OrderedDict()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        requests.on_request = self.wake

    def wake(self) -> None:
        """A request was recorded (any thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        """Serve requests as they settle, and end expired holds, until cancelled."""
        self._loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()  # before reading what is due: a request recorded after it wakes us
            due = self.requests.next_due()
            wait = HOLD_CHECK_SECONDS if due is None else min(due, HOLD_CHECK_SECONDS)
            if wait > 0:
                try:
                    async with self.clock.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self.holds.expire()
            await self.flush()

    async def flush(self) -> None:
        """Serve every request settled now."""
        for request in self.requests.take():
            try:
                await self.preempt(request)
            except Exception:  # one pod's failure must not stop the loop
                self.stats.failed += 1
                log.exception("preemption for pod %s failed", request.key)

    async def preempt(self, request: PreemptionRequest) -> str | None:
        """Preempt for one request; returns the nominated node, or None."""
        if self.settings.preemption_evictions_per_minute == 0:
            return None
        if not await self.leader.is_leader():
            self.stats.not_leader += 1
            return None
        if not self._may_help(request):
            self.stats.not_helped += 1
            return None
        budgets = await self._budgets()
        refused: set[str] = set()
        while True:
            found = self._plan(request, budgets, refused)
            if found is None:
                self.stats.not_helped += 1
                return None
            candidate, devices, pod = found
            wait = self.window.wait(len(candidate.victims))
            if wait is None:
                log.info(
                    "preemption for pod %s needs %d evictions, more than %d a minute: not done",
                    request.key,
                    len(candidate.victims),
                    self.window.per_minute,
                )
                self.stats.not_helped += 1
                return None
            if wait > 0:
                self.stats.rate_limited += 1
                await self.clock.sleep(wait)
                continue  # the state may have changed meanwhile: plan again
            outcome = await self._carry_out(request, pod, candidate, devices)
            if outcome == "refused":
                refused.add(candidate.node)
                continue
            return candidate.node if outcome == "done" else None

    def _plan(
        self, request: PreemptionRequest, budgets: DisruptionBudgets, refused: set[str]
    ) -> tuple[Candidate, tuple[Any, ...], Mapping[str, Any]] | None:
        """The eligible pod's plan and the devices to keep for it, or None. The planner takes the service
        lock one node at a time, so filters and binds wait at most one node's searches."""
        service = self.service
        with service.lock:
            pod = service.state.get("Pod", request.key)
            if pod is None or not self._eligible(request, pod):
                log.debug("pod %s may not preempt now (bound, deleted, held or waiting)", request.key)
                return None
        nodes = [n for n in request.nodes if n not in refused]
        try:
            found = plan(service, pod, nodes, budgets)
            if found is None:
                log.info(
                    "preemption for pod %s: evicting lower-priority pods frees enough devices on none "
                    "of %d nodes",
                    request.key,
                    len(nodes),
                )
                return None
            candidate, eviction = found
            policy = Policy(service.device_selection, service.scoring, service.filter_timeout)
            with service.lock:
                devices = eviction.allocation(candidate.uids, policy)
        except (ClaimNotReady, AllocatorError) as e:
            log.info("no preemption for pod %s: %s", request.key, e)
            return None
        return candidate, devices, pod

    def _may_help(self, request: PreemptionRequest) -> bool:
        """Whether the pod may preempt and some node asked has a pod of lower priority: else no plan, and
        no API call for the budgets (most rejected pods, of equal priority to everyone, end here)."""
        with self.service.lock:
            pod = self.service.state.get("Pod", request.key)
            if pod is None or not self._eligible(request, pod):
                return False
            priority, nodes = pod_priority(pod), set(request.nodes)
            return any(
                (other.get("spec") or {}).get("nodeName") in nodes and pod_priority(other) < priority
                for other in self.service.state.objects["Pod"].values()
            )

    def _eligible(self, request: PreemptionRequest, pod: Mapping[str, Any]) -> bool:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if (
            str(meta.get("uid") or "") != request.uid
            or meta.get("deletionTimestamp")
            or spec.get("nodeName")
            or not may_preempt(pod)
            or request.key in self.holds
        ):
            return False
        nominated = status.get("nominatedNodeName")
        if nominated:
            priority = pod_priority(pod)
            for other in self.service.state.objects["Pod"].values():
                if (
                    (other.get("spec") or {}).get("nodeName") == nominated
                    and (other.get("metadata") or {}).get("deletionTimestamp")
                    and pod_priority(other) < priority
                ):
                    return False  # its victims are still terminating there: wait for them
        return True

    async def _carry_out(
        self,
        request: PreemptionRequest,
        pod: Mapping[str, Any],
        candidate: Candidate,
        devices: tuple[Any, ...],
    ) -> str:
        """Hold, nominate, evict. Returns ``done``, ``refused`` (a budget refused an eviction), ``ended``
        (the hold ended before every victim was evicted) or ``failed``."""
        grace = max((_grace_seconds(v) for v in candidate.victims), default=0.0)
        hold_seconds = self.settings.preemption_hold_seconds + grace
        self.holds.hold(request.key, request.uid, candidate.node, devices, hold_seconds)
        # Nominated before the first eviction, as kube-scheduler nominates before its victims go: should
        # this attempt stop after evicting some (a restart, an eviction answered 500), the nomination makes
        # the pod's next attempt wait for them (``_eligible``) instead of evicting others elsewhere.
        if not await self._nominate(request, candidate.node):
            self.holds.release(request.key)
            return "ended"
        # The pods a budget may protect go first: a refusal then comes before anyone else is evicted.
        ordered = sorted(candidate.victims, key=lambda v: _uid(v) not in candidate.covered)
        evicted: list[str] = []
        for victim in ordered:
            if self.holds.get(request.key) is None:
                # The informer ended the hold: the pod was bound, deleted or recreated while earlier
                # victims were evicted. Nobody more goes for it.
                log.info(
                    "preemption for pod %s stopped: the pod was bound, deleted or recreated%s",
                    request.key,
                    f" after evicting {', '.join(evicted)}" if evicted else "",
                )
                return "ended"
            outcome = await self._evict(victim, request, candidate.node)
            if outcome != "evicted":
                self.holds.release(request.key)
                if not evicted:  # nobody is going there: the pod is not kept waiting for that node
                    await self._nominate(request, None)
                if outcome == "refused":
                    self.stats.refused += 1
                    log.info(
                        "preemption for pod %s: eviction of %s refused (PodDisruptionBudget); node %s "
                        "dropped%s",
                        request.key,
                        _ref(victim),
                        candidate.node,
                        f" after evicting {', '.join(evicted)}" if evicted else "",
                    )
                else:
                    self.stats.failed += 1
                return outcome
            evicted.append(_ref(victim))
        held = [device_label({"driver": d.id[0], "pool": d.id[1], "device": d.id[2]}) for d in devices]
        self.events.record(
            preempting_for_devices(request.key, request.uid, candidate.node, evicted, held, hold_seconds)
        )
        self.stats.preempted += 1
        log.info(
            "preempted for pod %s on node %s: evicted %s",
            request.key,
            candidate.node,
            ", ".join(evicted),
            extra={"pod": request.key, "node": candidate.node},
        )
        return "done"

    async def _nominate(self, request: PreemptionRequest, node: str | None) -> bool:
        """Set (None: clear) the pod's ``status.nominatedNodeName``, its UID as precondition; False when the
        pod is gone. Another failure is logged: the hold keeps the devices free for the pod whether
        kube-scheduler tries the nominated node first or not."""
        namespace, _, name = request.key.partition("/")
        body = {"metadata": {"uid": request.uid}, "status": {"nominatedNodeName": node}}
        try:
            await self.client.patch(CORE_PODS, namespace, name, body, subresource="status")
        except KubeAPIError as e:
            if e.status in _GONE:
                log.info("preemption for pod %s stopped: the pod is gone: %s", request.key, e)
                return False
            log.warning("preemption for pod %s: setting nominatedNodeName failed: %s", request.key, e)
        return True

    async def _evict(self, victim: Mapping[str, Any], request: PreemptionRequest, node: str) -> str:
        """``evicted`` (or already gone), ``refused`` (a budget's 429) or ``failed``."""
        uid = _uid(victim)
        if uid in self._evicted:
            return "evicted"  # this replica evicted it already; the watch has not shown it yet
        meta = victim.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"dra-extender: preempting to free devices for pod {request.key} on node {node}",
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            # Not retried on Retry-After: a wait inside the client would not see the hold end (the pod bound
            # or deleted meanwhile), and would keep every other preemption waiting behind this one.
            await self.client.create(
                CORE_PODS, namespace, eviction, name=name, subresource="eviction", retry=False
            )
        except KubeAPIError as e:
            if e.status in _GONE:
                return "evicted"
            if e.status == _REFUSED and DISRUPTION_BUDGET_CAUSE in e.causes:
                return "refused"
            # Anything else, priority and fairness's 429 included, stops this attempt, the node kept.
            log.warning("preemption for pod %s: evicting %s/%s failed: %s", request.key, namespace, name, e)
            return "failed"
        self.window.record()
        self._evicted[uid] = None
        while len(self._evicted) > MAX_EVICTED:
            self._evicted.popitem(last=False)
        self.stats.evicted += 1
        self.events.record(preempted(f"{namespace}/{name}", uid, request.uid, node))
        try:
            # After the eviction, not before: a refused eviction leaves no condition behind. The Eviction
            # API wrote reason EvictionByEvictionAPI; kube-scheduler recognises its preemption victims by
            # PreemptionByScheduler (a nominated pod waits while they terminate).
            body = {"metadata": {"uid": uid}, "status": {"conditions": [condition]}}
            await self.client.patch(CORE_PODS, namespace, name, body, subresource="status")
        except KubeAPIError as e:
            if e.status not in _GONE:
                log.info("preemption for pod %s: marking %s/%s failed: %s", request.key, namespace, name, e)
        return "evicted"

    async def _budgets(self) -> DisruptionBudgets:
        """Every PodDisruptionBudget (all pages); none when they cannot be read (the Eviction API still
        enforces them: a refusal drops the node)."""
        items: list[Mapping[str, Any]] = []
        continue_: str | None = None
        try:
            while True:
                page = await self.client.list(POLICY_PDBS, continue_=continue_)
                items.extend(page.get("items") or ())
                continue_ = (page.get("metadata") or {}).get("continue") or None
                if not continue_:
                    break
        except KubeAPIError as e:
            log.warning("reading PodDisruptionBudgets failed, planning without them: %s", e)
            return DisruptionBudgets()
        return DisruptionBudgets(items)


def _grace_seconds(pod: Mapping[str, Any]) -> float:
    """The pod's ``terminationGracePeriodSeconds`` (the API's default 30 when unset), within 0 and
    ``MAX_SECONDS``: the API server takes any int64, and a hold that long would keep the devices from every
    other pod for as long as the preemptor stays pending."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 30.0
    return float(min(max(value, 0), MAX_SECONDS))


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
