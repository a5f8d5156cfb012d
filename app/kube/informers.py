"""List+watch of the kinds the extender needs, feeding ``ClusterState.apply`` / ``remove`` incrementally.

One ``Informer`` per kind (Namespace, Node, Pod, and the ``resource.k8s.io`` kinds), each an endless loop
(ecosystem-aesthetics.md §2.6, the recipe kopf and client-go follow):

1. **List** in pages (``limit``/``continue``), apply every item, remove the objects of that kind the list
   no longer has (deleted while disconnected), remember the list's resourceVersion; the informer is then
   *synced*.
2. **Watch** from that resourceVersion with bookmarks. ADDED / MODIFIED apply the object, DELETED removes
   it, BOOKMARK only advances the resourceVersion; every event's resourceVersion is remembered. An object
   whose resourceVersion is not newer than the indexed one (a replayed or reordered event) is ignored, as
   is the deletion of an older object of that name.
3. The stream ends (server ``timeoutSeconds``), drops, or receives nothing, not even a bookmark, for
   ``ClusterSettings.watch_idle_seconds`` (a dead connection; the client's socket read timeout, or only
   keep-alive blank lines for that long, raises ``WatchIdle``) → watch again from the last
   resourceVersion, no relist; a silent watch at once, without backoff and not counted as an error.
4. **410 Gone** (the resourceVersion was compacted), as an ERROR event or an HTTP status → relist at once.
5. Other errors (5xx, 429, network, an answer that does not read as watch events) → wait (jittered
   exponential backoff, or ``Retry-After`` when it is a longer number of seconds, at most the backoff's
   maximum) and retry the step that failed.
6. Any other exception (a bug) → logged with its traceback, then as 5.: an informer ends only when
   cancelled. An observer that raises is logged and counted, and the others still see the object.

``resource.k8s.io`` objects are converted to v1 (``app.state.convert.to_v1``) from whichever version the
server serves (``discover_dra``: v1, else v1beta2, v1beta1, v1alpha3, per kind). An object that does not
convert or parse is logged and skipped; the previous version of it stays (for a ResourceClaim, forgetting its
allocation would free devices still in use), except for a ResourceSlice: its previous devices are dropped and
the node's filter reasons name the slice and the field (``ClusterState.reject``). ``metadata.managedFields``
are dropped on arrival.

Every change is applied holding the scheduling service's lock, so filter and bind see either the old or
the new object, never a half-applied one. ``observers`` are called under the same lock after each change
(the binder's reservations watch ResourceClaims through this).

Informers depend only on the ``ListWatcher`` protocol (``app.kube.client.KubeClient`` implements it), and
on an injectable ``Clock`` for waits.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

from allocator.errors import InvalidInputError
from app.config.settings import ClusterSettings
from app.kube.client import (
    CORE_NAMESPACES,
    CORE_NODES,
    CORE_PODS,
    GoneError,
    KubeAPIError,
    NotFoundError,
    Resource,
    WatchIdle,
)
from app.kube.clock import Clock, SystemClock
from app.state.cluster import ClusterState, object_key, object_version
from app.state.convert import DRA_GROUP, SUPPORTED_VERSIONS, ConversionError, to_v1
from app.state.podgroups import GROUP as POD_GROUP_API
from app.state.podgroups import POD_GROUP_VERSIONS

__all__ = [
    "CORE_KINDS",
    "DRA_KINDS",
    "DRA_VERSIONS",
    "REQUIRED_DRA_KINDS",
    "Backoff",
    "Informer",
    "InformerStats",
    "Informers",
    "ListWatcher",
    "Observer",
    "discover_dra",
    "discover_pod_groups",
]

log = logging.getLogger(__name__)

DRA_VERSIONS = SUPPORTED_VERSIONS
"""``resource.k8s.io`` versions in order of preference (those ``to_v1`` reads); each kind is read at the
first one served."""

DRA_KINDS = {
    "resourceslices": "ResourceSlice",
    "deviceclasses": "DeviceClass",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "devicetaintrules": "DeviceTaintRule",
}
REQUIRED_DRA_KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")
"""Without these the extender cannot work; DeviceTaintRule is optional (alpha 1.33, beta 1.36)."""

CORE_KINDS = {"Namespace": CORE_NAMESPACES, "Node": CORE_NODES, "Pod": CORE_PODS}

Observer = Callable[[str, str, Mapping[str, Any] | None], None]
"""``(kind, key, object or None when deleted)``, called under the lock after each change."""


class ListWatcher(Protocol):
    """The two reads an informer needs (``KubeClient`` implements them)."""

    async def list(
        self, resource: Resource, *, limit: int = ..., continue_: str | None = ...
    ) -> dict[str, Any]: ...

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Raises WatchIdle when the stream stays silent for ``ClusterSettings.watch_idle_seconds``."""
        ...


async def discover_dra(client: Any) -> dict[str, Resource]:
    """Kind → Resource for the ``resource.k8s.io`` kinds the server serves, each at its preferred version.

    ``client``: has ``api_group(group)`` and ``api_resources(group, version)`` (``KubeClient``).
    Returns {} when the group is not served at all. Raises KubeAPIError on other failures.
    """
    try:
        group = await client.api_group(DRA_GROUP)
    except NotFoundError:
        return {}
    served = {str(v.get("version")) for v in group.get("versions") or () if isinstance(v, Mapping)}
    found: dict[str, Resource] = {}
    for version in DRA_VERSIONS:
        if version not in served:
            continue
        listing = await client.api_resources(DRA_GROUP, version)
        for entry in listing.get("resources") or ():
            kind = DRA_KINDS.get(str(entry.get("name")))
            if kind is not None and kind not in found:
                found[kind] = Resource(
                    DRA_GROUP, version, str(entry["name"]), kind, bool(entry.get("namespaced"))
                )
    return found


async def discover_pod_groups(client: Any) -> dict[str, Resource]:
    """``{"PodGroup": Resource}`` at the first ``scheduling.k8s.io`` version serving PodGroups (v1beta1,
    v1alpha3), or {} when none does (the API is off without the GenericWorkload gate)."""
    try:
        group = await client.api_group(POD_GROUP_API)
    except NotFoundError:
        return {}
    served = {str(v.get("version")) for v in group.get("versions") or () if isinstance(v, Mapping)}
    for version in POD_GROUP_VERSIONS:
        if version not in served:
            continue
        listing = await client.api_resources(POD_GROUP_API, version)
        if any(entry.get("name") == "podgroups" for entry in listing.get("resources") or ()):
            return {"PodGroup": Resource(POD_GROUP_API, version, "podgroups", "PodGroup", True)}
    return {}


class Backoff:
    """Jittered exponential backoff: ``initial * 2**n`` capped at ``maximum``, times ``1 ± jitter``."""

    def __init__(
        self, initial: float, maximum: float, jitter: float, rng: random.Random | None = None
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        base = min(self.maximum, self.initial * 2 ** min(self.failures, 30))
        self.failures += 1
        return base * (1 + self._rng.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self.failures = 0

    @classmethod
    def from_settings(cls, settings: ClusterSettings, rng: random.Random | None = None) -> Backoff:
        """The backoff ``settings`` configure (their ``backoff_*`` fields)."""
        return cls(
            settings.backoff_initial_seconds, settings.backoff_max_seconds, settings.backoff_jitter, rng
        )


@dataclass(slots=True)
class InformerStats:
    """Counters for tests, logs and metrics."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    gone: int = 0
    idle_timeouts: int = 0
    errors: int = 0
    skipped: int = 0
    stale: int = 0
    """Events not newer than the indexed object (ignored)."""
    last_error: str = ""
    last_event_at: float | None = None
    """``Clock.now()`` of the last watch event, bookmarks included (None: none yet)."""
    waits: list[float] = field(default_factory=list)


class Informer:
    """List+watch one kind into ``state`` (see the module docstring)."""

    def __init__(
        self,
        source: ListWatcher,
        resource: Resource,
        state: ClusterState,
        lock: AbstractContextManager[Any],
        settings: ClusterSettings,
        *,
        clock: Clock | None = None,
        observers: Iterable[Observer] = (),
        rng: random.Random | None = None,
        step_aside: Callable[[], None] = lambda: None,
    ) -> None:
        self.source = source
        self.resource = resource
        self.step_aside = step_aside
        """Called before each watch event (``app.scheduling.answerfirst``)."""
        self.kind = resource.kind
        self.state = state
        self.lock = lock
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.observers = list(observers)
        self.backoff = Backoff.from_settings(settings, rng)
        self.resource_version = ""
        self.synced = False
        self.stats = InformerStats()

    # --- the loop -------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        while True:
            try:
                if not self.resource_version:
                    await self.relist()
                await self.watch_once()
            except GoneError as e:
                self.stats.gone += 1
                log.info(
                    "%s: resourceVersion %s expired (%s); relisting", self.kind, self.resource_version, e
                )
                self.resource_version = ""
            except KubeAPIError as e:
                await self._wait_after_error(e, self._retry_delay(e.retry_after))
            except Exception as e:
                # A bug, or an answer the client let through: ending here would freeze this kind's index
                # while readiness still says synced. (CancelledError is no Exception: it still stops.)
                await self._wait_after_error(e, self.backoff.next())

    def _retry_delay(self, retry_after: int | None) -> float:
        """The backoff's next delay, or the server's ``Retry-After`` when it is longer, up to the backoff's
        maximum: a server saying 0 must not make a tight loop, and one saying a day must not stop the
        watch that long."""
        delay = self.backoff.next()
        if retry_after is not None and retry_after > delay:
            return min(float(retry_after), self.backoff.maximum)
        return delay

    async def _wait_after_error(self, error: Exception, delay: float) -> None:
        """Count ``error``, log it, and wait ``delay`` seconds."""
        self.stats.errors += 1
        self.stats.waits.append(delay)
        if isinstance(error, KubeAPIError):
            self.stats.last_error = str(error)
            log.warning("%s: %s; retrying in %.1fs", self.kind, error, delay)
        else:
            self.stats.last_error = f"{type(error).__name__}: {error}"
            log.exception("%s: unexpected error; retrying in %.1fs", self.kind, delay, exc_info=error)
        await self.clock.sleep(delay)

    async def relist(self) -> None:
        """List every page, apply, drop what the list no longer has; then synced. Raises KubeAPIError."""
        self.stats.lists += 1
        seen: set[str] = set()
        continue_: str | None = None
        resource_version = ""
        while True:
            try:
                page = await self.source.list(
                    self.resource, limit=self.settings.list_page_size, continue_=continue_
                )
            except GoneError:
                if continue_ is None:
                    raise
                # The continue token expired mid-list: start over (client-go does the same).
                seen.clear()
                continue_ = None
                continue
            meta = page.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion") or resource_version)
            items = page.get("items") or ()
            # Listed but unusable counts as seen too: a rejected slice keeps its reason.
            seen.update(object_key(self.kind, item) for item in items)
            objects = [o for o in (self._convert(item) for item in items) if o is not None]
            with self.lock:
                for obj in objects:
                    self._apply(obj)
            continue_ = meta.get("continue") or None
            if not continue_:
                break
        with self.lock:
            for key in [k for k in self.state.keys(self.kind) if k not in seen]:
                self.state.remove(self.kind, key)
                self._notify(key, None)
        self.resource_version = resource_version
        self.backoff.reset()
        if not self.synced:
            log.info("%s: synced (%d objects)", self.kind, len(self.state.objects[self.kind]))
        self.synced = True

    async def watch_once(self) -> None:
        """One watch stream from ``resource_version`` until it ends, dies or goes silent. Raises
        KubeAPIError (GoneError for 410)."""
        self.stats.watches += 1
        events = self.source.watch(
            self.resource,
            resource_version=self.resource_version,
            timeout_seconds=self.settings.watch_timeout_seconds,
        )
        try:
            # No deadline here: the source raises WatchIdle (``KubeClient.watch``'s read timeout says why).
            async for event in events:
                self._handle(event)
                # After the event, not before: one that cannot be handled comes back with every watch,
                # and must not start the backoff over each time.
                self.backoff.reset()
        except WatchIdle:
            self.stats.idle_timeouts += 1
            log.warning(
                "%s: no watch event for %ss; replacing the watch", self.kind, self.settings.watch_idle_seconds
            )
        finally:
            # The watch stream is an async generator; its declared type (AsyncIterator) has no aclose.
            await events.aclose()  # type: ignore[attr-defined]

    # --- events ---------------------------------------------------------------------------------------

    def _handle(self, event: Mapping[str, Any]) -> None:
        self.step_aside()
        kind = event.get("type")
        obj = event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        self.stats.last_event_at = self.clock.now()
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
        elif kind in ("ADDED", "MODIFIED"):
            self.stats.events += 1
            converted = self._convert(obj)
            if converted is not None:
                with self.lock:
                    self._apply(converted)
        elif kind == "DELETED":
            self.stats.events += 1
            key = object_key(self.kind, obj)
            with self.lock:
                if 0 <= object_version(obj) < object_version(self.state.get(self.kind, key)):
                    self.stats.stale += 1  # the deletion of an earlier object of that name
                else:
                    self.state.remove(self.kind, key)
                    self._notify(key, None)
        else:
            log.warning("%s: unknown watch event type %r", self.kind, kind)
        if version:
            self.resource_version = version

    def _convert(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object as the state keeps it, or None (logged) when it cannot be used."""
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.kind)
        if self.resource.group != DRA_GROUP:
            return obj
        try:
            return to_v1(obj, owned=True)
        except ConversionError as e:
            self.stats.skipped += 1
            key = object_key(self.kind, obj)
            log.warning("%s %s: skipped: %s", self.kind, key, e)
            with self.lock:
                self.state.reject(self.kind, obj, f"{self.kind} {key}: {e}")
            return None

    def _apply(self, obj: dict[str, Any]) -> str:
        """Apply under the (held) lock; returns the key. A parse error is logged; the old object stays."""
        key = object_key(self.kind, obj)
        version = object_version(obj)
        if version >= 0 and version <= object_version(self.state.get(self.kind, key)):
            # Not newer than what the index holds (a replayed or reordered event): applying it would roll
            # the object back, e.g. free an allocated claim's devices. kube-scheduler's assume cache skips
            # these the same way.
            self.stats.stale += 1
            return key
        try:
            self.state.apply(self.kind, obj)
        except InvalidInputError as e:
            self.stats.skipped += 1
            log.warning("%s %s: skipped: %s", self.kind, key, e)
            return key
        self._notify(key, obj)
        return key

    def _notify(self, key: str, obj: Mapping[str, Any] | None) -> None:
        for observer in self.observers:
            try:
                observer(self.kind, key, obj)
            except Exception:
                # The object is applied already: the event will not come again (a replay is stale), so
                # the observers after this one must see it now. A raising observer is a bug, logged.
                self.stats.errors += 1
                log.exception("%s %s: an observer failed on this version", self.kind, key)


class Informers:
    """Discovery, then one running ``Informer`` per kind. ``synced`` once every informer listed once."""

    def __init__(
        self,
        source: Any,
        state: ClusterState,
        lock: AbstractContextManager[Any],
        settings: ClusterSettings,
        *,
        clock: Clock | None = None,
        observers: Iterable[Observer] = (),
        rng: random.Random | None = None,
        step_aside: Callable[[], None] = lambda: None,
    ) -> None:
        self.source = source
        self.state = state
        self.step_aside = step_aside
        self.lock = lock
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.observers = list(observers)
        self.rng = rng
        self.resources: dict[str, Resource] = {}
        self.informers: dict[str, Informer] = {}
        self.discovered = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def synced(self) -> bool:
        return self.discovered.is_set() and all(i.synced for i in self.informers.values())

    def not_synced(self) -> list[str]:
        """Kinds still waiting for their first list (all of them before discovery)."""
        if not self.discovered.is_set():
            return ["discovery"]
        return [kind for kind, informer in self.informers.items() if not informer.synced]

    async def discover(self) -> None:
        """Find the served ``resource.k8s.io`` versions, retrying with backoff until the required kinds are
        served. Then ``resources`` maps every watched kind to its Resource."""
        backoff = Backoff.from_settings(self.settings, self.rng)
        while True:
            try:
                dra = await discover_dra(self.source)
            except KubeAPIError as e:
                delay = backoff.next()
                log.warning("API discovery failed: %s; retrying in %.1fs", e, delay)
                await self.clock.sleep(delay)
                continue
            missing = [kind for kind in REQUIRED_DRA_KINDS if kind not in dra]
            if not missing:
                break
            delay = backoff.next()
            log.error(
                "the API server does not serve %s (resource.k8s.io %s); retrying in %.1fs",
                ", ".join(missing),
                "/".join(DRA_VERSIONS),
                delay,
            )
            await self.clock.sleep(delay)
        if "DeviceTaintRule" not in dra:
            log.info("DeviceTaintRule is not served; device taints come from ResourceSlices only")
        groups = await self._discover_pod_groups(backoff)
        self.resources = {**CORE_KINDS, **dra, **groups}
        for kind, resource in self.resources.items():
            log.info("watching %s at %s", kind, resource.api_version)
        self.informers = {
            kind: Informer(
                self.source,
                resource,
                self.state,
                self.lock,
                self.settings,
                clock=self.clock,
                observers=self.observers,
                rng=self.rng,
                step_aside=self.step_aside,
            )
            for kind, resource in self.resources.items()
        }
        self.discovered.set()

    async def _discover_pod_groups(self, backoff: Backoff) -> dict[str, Resource]:
        """PodGroups are watched only with workload claims on (``app.state.podgroups``), when served."""
        if not self.state.gates.workload_claims:
            return {}
        while True:
            try:
                found = await discover_pod_groups(self.source)
                break
            except KubeAPIError as e:
                delay = backoff.next()
                log.warning("API discovery of PodGroups failed: %s; retrying in %.1fs", e, delay)
                await self.clock.sleep(delay)
        if not found:
            log.warning(
                "DRAWorkloadResourceClaims is on but the API server serves no PodGroups (%s %s); "
                "pods of pod groups cannot use group claims",
                POD_GROUP_API,
                "/".join(POD_GROUP_VERSIONS),
            )
        return found

    async def start(self) -> None:
        """Discover (blocking until the API answers) and start every informer in the background."""
        await self.discover()
        self._tasks = [
            asyncio.create_task(informer.run(), name=f"informer-{kind}")
            for kind, informer in self.informers.items()
        ]

    async def wait_synced(self, poll: float = 0.01) -> None:
        """Return once every informer has listed once (checked every ``poll`` seconds)."""
        while not self.synced:
            await asyncio.sleep(poll)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        self._tasks = []
