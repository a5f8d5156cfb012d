"""Cluster mode wiring: client → informers → ``ClusterState`` → ``SchedulingService`` with ``KubeBinder``,
plus written-bind reservations, the orphan releaser, the scheduler Lease, the device conflict check, the
Events on pods (``app.kube.events``), the requeuer of rejected pods and the preemptor of pods short of
devices (``app.kube.preemptor``, with the device holds of ``app.scheduling.preemptionholds``).

``ClusterRuntime.start()`` runs in the event loop that will own the API client: it connects (kubeconfig or
in-cluster), then discovers the served ``resource.k8s.io`` versions and starts the informers in the
background (retrying until the API server answers). ``ready()`` is true once every informer has listed once
and ``on_synced`` (``serve``: the collector's freeze) has returned; the HTTP layer answers ``/readyz`` and
refuses filter/bind before that.

``serve`` runs the runtime on its own thread and event loop (``BackgroundRuntime``), apart from uvicorn's:
informers apply events under the service lock, which a filter may hold for milliseconds, and that must not
stall the HTTP event loop (probes) — nor must a burst of HTTP requests delay the watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from allocator.cel.expr_engine import ExprEngine
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.config.derivationlog import DerivationLog
from app.config.settings import ClusterSettings
from app.kube.apimetrics import APIMetrics
from app.kube.binder import KubeBinder
from app.kube.client import KubeClient
from app.kube.clock import Clock, SystemClock
from app.kube.conflicts import DeviceConflicts
from app.kube.events import EventRecorder, reporting_instance
from app.kube.informers import Informers
from app.kube.leader import SchedulerLease
from app.kube.preemptor import Preemptor
from app.kube.ratelimit import TokenBucket
from app.kube.recovery import OrphanReleaser
from app.kube.requeue import Requeuer
from app.kube.reservations import WrittenReservations
from app.scheduling.preemptionholds import PreemptionHolds
from app.scheduling.preemptionrequests import PreemptionRequests
from app.scheduling.requeue import RejectedPods
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState

__all__ = ["BackgroundRuntime", "ClusterRuntime"]

log = logging.getLogger(__name__)


class ClusterRuntime:
    """Everything cluster mode runs. ``client``: an existing client (tests); else ``start`` connects one."""

    def __init__(
        self,
        settings: ClusterSettings,
        gates: FeatureGates | None = None,
        *,
        client: Any = None,
        clock: Clock | None = None,
        selectors: SelectorCache | None = None,
        identity: str | None = None,
        on_synced: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.on_synced = on_synced
        """Called once, on the runtime's event loop, when every informer has listed for the first time;
        the runtime is ready once it returns."""
        self._synced = False
        self.clock: Clock = clock or SystemClock()
        self.state = ClusterState(gates)
        self.service = SchedulingService(self.state, selectors or SelectorCache(ExprEngine()))
        # DeviceClass selectors are evaluated as slices and classes arrive, not in filter.
        self.state.inventory.attach_selectors(self.service.selectors)
        lock = self.service.lock
        self.reservations = WrittenReservations(
            self.state, lock, self.clock, settings.reservation_ttl_seconds
        )
        self.client = client
        self._owns_client = client is None
        self.api_metrics = APIMetrics()
        """What the client ``connect`` creates counts (``app.kube.apimetrics``); ``serve`` exposes it."""
        self.lease = SchedulerLease(
            client,
            settings.scheduler_lease,
            identity,
            clock=self.clock,
            retry_seconds=settings.scheduler_lease_retry_seconds,
        )
        self.binder = KubeBinder(
            client, self.state, lock, self.reservations, settings, clock=self.clock, lease=self.lease
        )
        self.service.binder = self.binder
        self.service.binding_timeout_seconds = settings.binding_timeout_seconds
        self.events = EventRecorder(client, reporting_instance(self.lease.identity), clock=self.clock)
        self.service.events = self.events
        self.rejected = RejectedPods(
            self.state, self.service.selectors, settings.scheduler_names, settings.requeue_max_pods
        )
        """The pods filter rejected, for the requeuer (the HTTP layer records filter answers in it)."""
        holds = self.service.binding.holds
        holds.on_freed = self.rejected.devices_freed
        holds.clock = self.clock.now
        if settings.prioritize_hold_seconds is not None:
            holds.seconds = settings.prioritize_hold_seconds
        self.preemption_requests = PreemptionRequests(settings.scheduler_names, clock=self.clock.now)
        """The pods filter rejected for want of devices, for the preemptor (recorded by the HTTP layer)."""
        self.service.preemption_holds = PreemptionHolds(self.state, lock, self.clock.now)
        self.informers = Informers(
            client,
            self.state,
            lock,
            settings,
            clock=self.clock,
            observers=[
                self.reservations.observe,
                self.service.observe,
                self.rejected.observe,
                self.service.preemption_holds.observe,
            ],
            step_aside=self.service.answer_first.step_aside,
        )
        self.releaser = OrphanReleaser(
            client,
            self.state,
            lock,
            self.reservations,
            settings,
            self.binder.in_flight,
            clock=self.clock,
            leader=self.lease,
            events=self.events,
        )
        self.conflicts = DeviceConflicts(
            self.state, lock, settings.orphan_check_interval_seconds, clock=self.clock
        )
        self.requeuer = Requeuer(client, self.rejected, settings, self.lease, clock=self.clock)
        self.preemptor = Preemptor(
            client,
            self.service,
            self.preemption_requests,
            self.service.preemption_holds,
            settings,
            self.lease,
            self.events,
            clock=self.clock,
        )
        self.derivation_log = DerivationLog(self.state.inventory, lock)
        self._tasks: list[asyncio.Task[None]] = []

    async def connect(self) -> None:
        """Load the configuration and create the client (no request yet). Raises ConfigException/OSError."""
        if self.client is None:
            self.client = await KubeClient.connect(
                self.settings.kubeconfig,
                context=self.settings.context,
                in_cluster=self.settings.in_cluster,
                request_timeout=self.settings.request_timeout_seconds,
                connect_timeout=self.settings.connect_timeout_seconds,
                watch_read_timeout=self.settings.watch_idle_seconds,
                metrics=self.api_metrics,
                rate_limit=TokenBucket(self.settings.api_qps, self.settings.api_burst),
                step_aside=self.service.answer_first.step_aside,
            )
        for user in (self.binder, self.releaser, self.lease, self.events, self.requeuer, self.preemptor):
            user.client = self.client
        self.informers.source = self.client

    async def start(self) -> None:
        """Connect, then discover and sync in the background. Raises only for an unusable configuration."""
        await self.connect()
        self.binder.loop = asyncio.get_running_loop()
        self._tasks.append(asyncio.create_task(self._run(), name="cluster-runtime"))
        self._tasks.append(asyncio.create_task(self.events.run(), name="pod-events"))
        self._tasks.append(asyncio.create_task(self.lease.run(), name="scheduler-lease"))

    async def _run(self) -> None:
        await self.informers.start()
        claims = self.informers.resources["ResourceClaim"]
        self.binder.claims = claims
        self.releaser.claims = claims
        await asyncio.gather(
            self.releaser.run(),
            self.requeuer.run(),
            self.preemptor.run(),
            self.conflicts.run(),
            self._report_derivation_errors(),
            self._end_late_holds(),
            self._first_synced(),
        )

    async def _first_synced(self) -> None:
        await self.informers.wait_synced()
        try:
            self.on_synced()
        except Exception:
            log.exception("after the first sync")
        self._synced = True

    async def _end_late_holds(self) -> None:
        """End the holds made at prioritize whose bind did not come in time also while no filter or
        prioritize comes to do it (``app.scheduling.prioritizeholds``): their devices are free again and
        the pods they kept out are requeued."""
        holds = self.service.binding.holds
        while True:
            await self.clock.sleep(holds.sweep_seconds)
            holds.sweep(self.service.lock)

    async def _report_derivation_errors(self) -> None:
        """Log cluster-wide derived attribute errors as slices bring them (``app.config.derivationlog``), at
        the orphan check's pace."""
        while True:
            await self.clock.sleep(self.settings.orphan_check_interval_seconds)
            self.derivation_log.report()

    def ready(self) -> bool:
        return self._synced

    def not_ready(self) -> list[str]:
        """What readiness still waits for (kinds, or ``discovery``; then ``on_synced``)."""
        return self.informers.not_synced() or ([] if self._synced else ["on_synced"])

    async def wait_ready(self, poll: float = 0.005) -> None:
        while not self.ready():
            for task in self._tasks:
                if task.done():
                    task.result()  # surface a crashed runtime
            await asyncio.sleep(poll)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.informers.stop()
        if self._owns_client and self.client is not None:
            await self.client.close()


class BackgroundRuntime:
    """Runs a ``ClusterRuntime`` on a daemon thread with its own event loop (``serve``)."""

    def __init__(self, runtime: ClusterRuntime) -> None:
        self.runtime = runtime
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="dra-extender-kube", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            try:
                self.loop.run_until_complete(self.runtime.start())
            except BaseException as e:  # reported to start()
                self._error = e
                return
            finally:
                self._started.set()
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def start(self, timeout: float = 30.0) -> None:
        """Start and wait until connected. Re-raises the configuration error of ``ClusterRuntime.start``."""
        self._thread.start()
        self._started.wait(timeout)
        if self._error is not None:
            raise self._error

    def stop(self, timeout: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.runtime.stop(), self.loop).result(timeout)
        except Exception as e:  # shutting down anyway
            log.warning("stopping the cluster runtime: %s", e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
