"""The requeuer: tells kube-scheduler to retry the pods the extender rejected once an event can help them,
as the in-tree DynamicResources plugin's queueing hints do (docs/operations.md "Requeue of rejected pods").

The signal is an update of the pod itself: a strategic-merge patch of one annotation,
``dra-extender.resource.k8s.io/requeue: <RFC 3339 time>``, with the pod's UID in the patch: the API server
refuses the patch of a pod recreated under the name (its UID differs: 422, an immutable field), and one
deleted meanwhile is 404. kube-scheduler v1.37.2 turns any update of an unscheduled pod into
the event ``TargetPod/Update`` (``framework.PodSchedulingPropertiesChange``: an annotation is none of the
specific changes); ``PriorityQueue.Update`` asks the pod's rejectors whether it is worth a retry, and the
``Extender`` pseudo-plugin registers every ``TargetPod`` action with no hint function, so the answer is
yes: the pod goes to the backoff queue while its backoff (1 s doubling to 10 s per failed attempt) runs,
else to the active queue; with ``SchedulerPopFromBackoffQ`` (beta, on) an idle scheduler takes it from the
backoff queue at once. A pod in flight records the event and is retried when its attempt fails.
Annotations are read by no scheduling rule, so the pod's scheduling is unchanged.

Which pods and when is ``app.scheduling.requeue.RejectedPods``; this class writes: it waits
``ClusterSettings.requeue_delay_seconds`` after the first due pod so a burst of events is one signal per
pod, sends at most ``requeue_qps`` signals a second (``requeue_burst`` at once), and only from the replica
next to the leader kube-scheduler (``app.kube.leader``; a standby drops its due pods: the leader's
extender, which answered the filters, has its own).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.config.settings import ClusterSettings
from app.kube.client import CORE_PODS, KubeAPIError
from app.kube.clock import Clock, SystemClock
from app.kube.leader import SchedulerLease
from app.kube.ratelimit import TokenBucket
from app.scheduling.requeue import PodRef, RejectedPods

__all__ = ["REQUEUE_ANNOTATION", "RequeueStats", "Requeuer"]

log = logging.getLogger(__name__)

REQUEUE_ANNOTATION = "dra-extender.resource.k8s.io/requeue"

_GONE = (404, 409, 422)
"""The pod is deleted (404), or recreated under its name (the UID in the patch changes an immutable field:
422; 409 as a UID precondition would answer)."""


@dataclass(slots=True)
class RequeueStats:
    """Counters for tests, logs and metrics."""

    signalled: int = 0
    gone: int = 0
    """Pods deleted or recreated before their signal."""
    failed: int = 0
    not_leader: int = 0
    """Due pods dropped because this replica is a standby."""


class Requeuer:
    """Signals the due pods of ``pods`` through ``client`` (``KubeClient``; see the module docstring)."""

    def __init__(
        self,
        client: Any,
        pods: RejectedPods,
        settings: ClusterSettings,
        leader: SchedulerLease,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.pods = pods
        self.settings = settings
        self.leader = leader
        self.clock: Clock = clock or SystemClock()
        self.bucket = TokenBucket(settings.requeue_qps, settings.requeue_burst, self.clock)
        self.stats = RequeueStats()
        self._due = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        pods.on_due = self.wake

    def wake(self) -> None:
        """Pods became due (any thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._due.set)

    async def run(self) -> None:
        """Signal due pods until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._due.set()  # pods that became due before the loop ran
        while True:
            await self._due.wait()
            await self.clock.sleep(self.settings.requeue_delay_seconds)
            self._due.clear()
            await self.flush()

    async def flush(self) -> None:
        """Signal every pod due now (leader only), at the configured rate."""
        due = self.pods.take_due()
        if not due:
            return
        if not await self.leader.is_leader():
            self.stats.not_leader += len(due)
            return
        for ref in due:
            await self.bucket.take()
            await self._signal(ref)

    async def _signal(self, ref: PodRef) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {"metadata": {"uid": ref.uid, "annotations": {REQUEUE_ANNOTATION: now}}}
        try:
            await self.client.patch(CORE_PODS, ref.namespace, ref.name, body)
        except KubeAPIError as e:
            if e.status in _GONE:
                self.stats.gone += 1
                return
            self.stats.failed += 1
            log.warning("requeue signal failed: %s", e, extra={"pod": f"{ref.namespace}/{ref.name}"})
            return
        self.stats.signalled += 1
        log.debug("requeue signal sent", extra={"pod": f"{ref.namespace}/{ref.name}"})
