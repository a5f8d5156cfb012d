"""``EventRecorder``: writes ``app.scheduling.podevents`` Events as ``events.k8s.io/v1`` Events, the way
client-go's event recorders keep them from flooding the API server.

``record`` runs on the caller's thread (a bind's worker thread, filter's, the recovery loop) and only
decides; the writes happen on the API client's event loop (``run``), so no Event ever delays a bind, and a
failed write is logged at debug level and forgotten.

* Series (client-go ``tools/events``): an Event equal to one recorded less than ``series_window_seconds``
  ago (same pod, type, reason, action and note) is a repeat: it bumps that Event's ``series.count``
  (and ``series.lastObservedTime``) instead of creating another. Repeats waiting to be written coalesce into
  one ``PATCH``. A series not seen for the window ends; the next occurrence starts a new Event.
* Spam filter (client-go ``tools/record``): each pod has a token bucket of ``pod_burst`` new Events,
  refilled one per ``pod_refill_seconds``; a new Event beyond it is dropped (repeats of a series are not).
* Writes: a token bucket of ``write_burst`` refilled at ``writes_per_second`` paces the writer, which waits
  for a token; at most ``queue_size`` writes wait, a write beyond that is dropped.
* Bounded memory: at most ``max_series`` series and pod buckets are kept, the least recently seen dropped
  first.

The Event: ``reportingController`` ``dra-extender``, ``reportingInstance`` this replica
(``dra-extender-<host>``), ``regarding`` the pod, name ``<pod name>.<hex time>`` as client-go names them,
``eventTime`` at first occurrence; the note cut to the API's 1024 bytes. The API server's own Event TTL
(kube-apiserver ``--event-ttl``, 1 h by default) removes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.kube.client import EVENTS, KubeAPIError, NotFoundError
from app.kube.clock import Clock, SystemClock
from app.scheduling.podevents import PodEvent

__all__ = ["REPORTING_CONTROLLER", "EventLimits", "EventRecorder", "reporting_instance"]

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "dra-extender"

_NOTE_BYTES = 1024
"""events.k8s.io/v1 ``note``: at most 1 kB (API validation, ``NoteLengthLimit``)."""
_INSTANCE_CHARS = 128
"""``reportingInstance``: at most 128 characters (``ReportingInstanceLengthLimit``)."""
_NAME_CHARS = 253
"""``metadata.name``: a DNS subdomain."""


@dataclass(frozen=True, slots=True)
class EventLimits:
    """How many Events are written and how fast (module docstring)."""

    series_window_seconds: float = 360.0
    """A repeat within this many seconds of the last occurrence joins its series (client-go's 6 min)."""
    pod_burst: int = 25
    """New Events per pod before the spam filter drops them (client-go ``record``: burst 25) ..."""
    pod_refill_seconds: float = 300.0
    """... then one more per this many seconds (client-go ``record``: 1/300 qps)."""
    writes_per_second: float = 10.0
    """Sustained Event writes to the API server: Events are a courtesy, binds and watches share the
    connection."""
    write_burst: int = 50
    """Writes sent at once before ``writes_per_second`` applies (a burst of failed binds)."""
    queue_size: int = 1000
    """Writes waiting at most (client-go's broadcaster queue: 1000)."""
    max_series: int = 4096
    """Series and pod buckets kept (client-go's LRU caches: 4096 entries)."""

    def __post_init__(self) -> None:
        for name in ("series_window_seconds", "pod_refill_seconds", "writes_per_second"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")
        for name in ("pod_burst", "write_burst", "queue_size", "max_series"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")


def reporting_instance(identity: str) -> str:
    """``dra-extender-<identity>`` (client-go: controller, dash, hostname), cut to the API's limit."""
    return f"{REPORTING_CONTROLLER}-{identity}"[:_INSTANCE_CHARS]


class _Bucket:
    """A token bucket: ``burst`` tokens, one more every ``1 / rate`` seconds."""

    __slots__ = ("at", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.at = now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self._refill(now)
        return max(0.0, (1 - self.tokens) / self.rate)


@dataclass(slots=True)
class _Series:
    event: PodEvent
    name: str
    first: datetime
    last: datetime
    seen: float
    """``Clock.now()`` of the last occurrence."""
    count: int = 1
    created: bool = False
    queued: bool = False


def _micro_time(at: datetime) -> str:
    """A ``MicroTime``: RFC 3339 with microseconds, UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` UTF-8 bytes, ending in ``...`` when cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EventRecorder:
    """``PodEvents`` for cluster mode (module docstring). ``client``: set once connected; ``run`` writes
    on the client's event loop until cancelled; ``dropped`` counts Events not written, by cause
    (``pod-rate``, ``queue-full``, ``write-failed``)."""

    def __init__(
        self,
        client: Any,
        instance: str,
        *,
        clock: Clock | None = None,
        wall: Callable[[], datetime] = _utc_now,
        limits: EventLimits | None = None,
    ) -> None:
        self.client = client
        self.instance = instance
        self.clock: Clock = clock or SystemClock()
        self.wall = wall
        self.limits = limits or EventLimits()
        self.dropped: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self._pods: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self._queue: deque[_Series] = deque()
        self._writes = _Bucket(self.limits.writes_per_second, self.limits.write_burst, self.clock.now())
        self._last_ns = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    # --- any thread ---------------------------------------------------------------------------------------

    def record(self, event: PodEvent) -> None:
        key = (event.namespace, event.name, event.uid, event.type, event.reason, event.action, event.note)
        now = self.clock.now()
        with self._lock:
            self._forget_ended(now)
            series = self._series.get(key)
            if series is not None:
                series.count += 1
                series.last = self.wall()
                series.seen = now
                self._series.move_to_end(key)
            else:
                if not self._pod_bucket(key[:3], now).take(now):
                    self.dropped["pod-rate"] += 1
                    log.debug("event dropped (too many for its pod): %s", event)
                    return
                at = self.wall()
                series = _Series(event, self._name(event.name, at), at, at, now)
                self._series[key] = series
                while len(self._series) > self.limits.max_series:
                    self._series.popitem(last=False)
            if series.queued:
                return  # the write waiting will carry this count
            if len(self._queue) >= self.limits.queue_size:
                self.dropped["queue-full"] += 1
                log.debug("event dropped (queue full): %s", event)
                return
            series.queued = True
            self._queue.append(series)
        self._wake_writer()

    def _forget_ended(self, now: float) -> None:
        window = self.limits.series_window_seconds
        while self._series:
            oldest = next(iter(self._series.values()))
            if now - oldest.seen < window:
                return
            self._series.popitem(last=False)

    def _pod_bucket(self, pod: tuple[str, ...], now: float) -> _Bucket:
        """The spam filter's bucket of ``pod`` (namespace, name, UID)."""
        bucket = self._pods.get(pod)
        if bucket is None:
            bucket = self._pods[pod] = _Bucket(1 / self.limits.pod_refill_seconds, self.limits.pod_burst, now)
            while len(self._pods) > self.limits.max_series:
                self._pods.popitem(last=False)
        else:
            self._pods.move_to_end(pod)
        return bucket

    def _name(self, pod_name: str, at: datetime) -> str:
        """``<pod name>.<hex nanoseconds>``, unique in this process (two Events in one nanosecond)."""
        ns = max(int(at.timestamp() * 1e9), self._last_ns + 1)
        self._last_ns = ns
        suffix = f".{ns:x}"
        return pod_name[: _NAME_CHARS - len(suffix)].rstrip(".-") + suffix

    def _wake_writer(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return  # not running yet: run() starts with what is queued
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            loop.call_soon_threadsafe(wake.set)

    # --- the client's event loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Write what is queued, as it comes, until cancelled."""
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        try:
            while True:
                await self.flush()
                await self._wake.wait()
                self._wake.clear()
        finally:
            self._loop = None

    async def flush(self) -> None:
        """Write everything queued, at the pace of the write bucket."""
        while (series := self._next()) is not None:
            await self._paced()
            await self._write(series)

    def _next(self) -> _Series | None:
        with self._lock:
            if not self._queue:
                return None
            series = self._queue.popleft()
            series.queued = False
            return series

    async def _paced(self) -> None:
        """Take a write token, waiting for one."""
        while not self._writes.take(self.clock.now()):
            await self.clock.sleep(self._writes.wait(self.clock.now()))

    async def _write(self, series: _Series) -> None:
        with self._lock:
            count, last, created = series.count, series.last, series.created
        event = series.event
        body = self._body(series, count, last)
        try:
            if created:
                try:
                    patch = {"series": body["series"]}
                    await self.client.patch(EVENTS, event.namespace, series.name, patch)
                    return
                except NotFoundError:
                    pass  # expired on the server (--event-ttl): write it anew
            await self.client.create(EVENTS, event.namespace, body)
            with self._lock:
                series.created = True
        except KubeAPIError as e:
            self.dropped["write-failed"] += 1
            log.debug("writing event %s/%s failed: %s", event.namespace, series.name, e)

    def _body(self, series: _Series, count: int, last: datetime) -> dict[str, Any]:
        event = series.event
        body: dict[str, Any] = {
            "apiVersion": EVENTS.api_version,
            "kind": "Event",
            "metadata": {"name": series.name, "namespace": event.namespace},
            "eventTime": _micro_time(series.first),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": event.action,
            "reason": event.reason,
            "type": event.type,
            "note": _cut(event.note, _NOTE_BYTES),
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": event.namespace,
                "name": event.name,
                "uid": event.uid,
            },
        }
        if count > 1:
            body["series"] = {"count": count, "lastObservedTime": _micro_time(last)}
        return body
