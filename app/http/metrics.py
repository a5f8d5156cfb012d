"""``GET /metrics``: the Prometheus exposition (prometheus-client), named after kube-scheduler's conventions:
``_seconds`` histograms with its bucket shapes, ``_total`` counters, a ``result`` label.

Counted on the request path (a counter increment or a histogram observation each):

* ``dra_extender_request_duration_seconds{verb, result}``: filter / prioritize / bind / preempt latency,
  buckets of kube-scheduler's ``framework_extension_point_duration_seconds`` (0.1 ms doubling to 205 ms) plus
  those of its ``scheduling_attempt_duration_seconds`` above them (to 16 s: a bind writing to the API
  server); ``result`` ``success`` or ``error`` (a non-200 answer or one with ``Error`` set);
* ``dra_extender_binds_total{result}``: bind outcomes (``success``, ``error``);
* ``dra_extender_filter_nodes_total{result}``: nodes filter answered ``passed``, ``failed`` or
  ``unresolvable``;
* ``dra_extender_sample_misses_total``: filters that rejected a pod on every node of kube-scheduler's
  sample while a node outside it had the devices, answered so that the pod is retried at once
  (``app.scheduling.sampling.SchedulerSample``; only when kube-scheduler samples).

Read when scraped (``_StateCollector``: copied under the service lock, counted after), never maintained
per request:

* decisions: ``dra_extender_decision_cache_hits_total`` / ``_misses_total`` (nodes answered from a kept
  decision / decided anew), ``dra_extender_filter_budget_exhausted_total`` (filter calls cut by the time
  budget) and ``dra_extender_filter_budget_undecided_nodes_total``;
* ``dra_extender_reservations_in_flight``: device reservations held for binds in flight (or planned at
  prioritize) or written but not seen back;
* ``dra_extender_prioritize_holds_total{result}``: binds planned at prioritize with their devices held
  (``app.scheduling.prioritizeholds``), ``taken`` up by their bind, ``stale`` (the bind found the node
  changed and planned anew) or ended ``unused`` (the bind named another node, came late or never);
* inventory (``allocator.usage``): ``dra_extender_devices{device_class, driver, pool, state}`` with
  ``state`` one of ``allocated``, ``reserved``, ``tainted``, ``free`` (a pool's total is the sum), and
  ``dra_extender_namespace_allocated_devices{namespace, device_class, driver}``: devices the allocated
  claims of each namespace hold, by the DeviceClass their request asked for;
* cluster mode, per informer (``resource`` = kind): ``dra_extender_informer_synced`` (0/1),
  ``dra_extender_informer_events_total``, ``dra_extender_informer_relists_total``,
  ``dra_extender_informer_seconds_since_last_event`` (absent before the first event);
* unchanged since the first ``/metrics``: ``dra_extender_derived_attribute_errors{attribute}``,
  ``dra_extender_cel_program_bytes``, ``dra_extender_cel_results``, ``dra_extender_kept_pod_decisions``.

About the process (``Metrics`` registers prometheus-client's collectors, as its default registry would):

* ``process_*`` (CPU seconds, resident and virtual memory, open file descriptors, start time; Linux),
  ``python_info`` and ``python_gc_*`` (collections, objects collected, uncollectable);
* ``dra_extender_build_info{version, python, git}``: 1, with the version, the Python version and the git
  commit (``app.config.buildinfo``);
* cluster mode: the API client's ``dra_extender_rest_client_*`` (``app.kube.apimetrics``) and
  ``dra_extender_device_conflicts_total`` (``app.kube.conflicts``: devices another writer put in two
  claims; alert on anything above 0), passed in as ``collectors``;
* with ``--config`` (``ConfigReloadCollector``, as Prometheus and Alertmanager expose their own):
  ``dra_extender_config_hash{sha256}`` 1 (the SHA-256 of the file in force),
  ``dra_extender_config_last_reload_successful`` (0 while the file on disk is not in force: invalid,
  refused, gone) and ``dra_extender_config_last_reload_success_timestamp_seconds``.

Counters have no ``_created`` series (``disable_created_metrics``): one more series per counter that
Prometheus does not use. Each ``Metrics`` has its own registry: one per app, so tests and processes do
not share counters.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from allocator.usage import UsageSnapshot
from app.config import buildinfo
from app.config.derivedconfig import ConfigWatcher
from app.scheduling.service import SchedulingService

__all__ = [
    "CONTENT_TYPE",
    "NODE_RESULTS",
    "REQUEST_BUCKETS",
    "RESULTS",
    "VERBS",
    "ConfigReloadCollector",
    "Metrics",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

disable_created_metrics()


def _exponential(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


REQUEST_BUCKETS = tuple(
    sorted({*_exponential(0.0001, 2, 12), *(b for b in _exponential(0.001, 2, 15) if b > 0.2048)})
)
"""kube-scheduler's ExponentialBuckets(0.0001, 2, 12) (extension points), continued by its
ExponentialBuckets(0.001, 2, 15) (scheduling attempts) above 205 ms: 0.1 ms .. 16.4 s."""

_PREFIX = "dra_extender_"
VERBS = ("filter", "prioritize", "bind", "preempt")
RESULTS = ("success", "error")
NODE_RESULTS = ("passed", "failed", "unresolvable")


class _StateCollector(Collector):
    """Metrics read from the service (and the informers) at scrape time."""

    def __init__(self, service: SchedulingService, informers: Any = None) -> None:
        self.service = service
        self.informers = informers

    def collect(self) -> Iterator[Metric]:
        service = self.service
        # Under the lock only copies (references to immutable objects); the counting runs without it, so
        # a scrape holds filters up only for the copy.
        with service.lock:
            inventory = service.state.inventory
            snapshot = UsageSnapshot.take(inventory, service.selectors)
            claims = list(service.state.objects["ResourceClaim"].items())  # replaced on change, never edited
            reservations = len(inventory.reservations())
            errors = inventory.derivation_counts()
            cache = service.selectors.report()
            kept = service.kept_decisions()
            stats = service.stats
            counters = (stats.hits, stats.misses, stats.budget_cuts, stats.budget_undecided_nodes)
            holds = service.binding.holds
            hold_results = {"taken": holds.taken, "stale": holds.stale, "unused": holds.unused}
        usage = snapshot.count()
        by_namespace = _namespace_devices(claims)
        yield from _decision_metrics(*counters)
        yield _gauge(
            "reservations_in_flight", "Device reservations of binds in flight or not seen back.", reservations
        )
        yield _labelled(
            CounterMetricFamily,
            "prioritize_holds",
            "Binds planned at prioritize with their devices held, by whether their bind took them up.",
            ["result"],
            (((result,), count) for result, count in hold_results.items()),
        )
        yield _labelled(
            GaugeMetricFamily,
            "devices",
            "Devices per DeviceClass, driver, pool and state (allocated, reserved, tainted, free).",
            ["device_class", "driver", "pool", "state"],
            sorted(usage.items()),
        )
        yield _labelled(
            GaugeMetricFamily,
            "namespace_allocated_devices",
            "Devices held by the allocated ResourceClaims of a namespace, per requested DeviceClass.",
            ["namespace", "device_class", "driver"],
            sorted(by_namespace.items()),
        )
        if self.informers is not None:
            yield from _informer_metrics(self.informers)
        yield _labelled(
            GaugeMetricFamily,
            "derived_attribute_errors",
            "Devices a cluster-wide derived attribute failed on.",
            ["attribute"],
            (((attribute,), count) for attribute, count in errors.items()),
        )
        program_bytes = cache["program_bytes"]
        yield _gauge("cel_program_bytes", "Estimated bytes of the compiled CEL programs kept.", program_bytes)
        yield _gauge("cel_results", "CEL results kept per expression and device.", cache["results"])
        yield _gauge("kept_pod_decisions", "Per-pod views and private decisions kept for bind.", kept)


def _labelled(
    family: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    documentation: str,
    labels: list[str],
    rows: Iterable[tuple[Sequence[str], float]],
) -> Metric:
    """A metric family with one sample per row: its label values, its value."""
    metric = family(_PREFIX + name, documentation, labels=labels)
    for values, value in rows:
        metric.add_metric(list(values), value)
    return metric


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(_PREFIX + name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(_PREFIX + name, documentation, value=value)


def _decision_metrics(hits: int, misses: int, cuts: int, undecided: int) -> Iterator[Metric]:
    yield _counter("decision_cache_hits", "Nodes filter answered from a kept, current decision.", hits)
    yield _counter("decision_cache_misses", "Nodes filter decided anew (counts or a search).", misses)
    yield _counter("filter_budget_exhausted", "Filter calls whose time budget ran out.", cuts)
    yield _counter("filter_budget_undecided_nodes", "Nodes failed as the time budget ran out.", undecided)


def _informer_metrics(informers: Any) -> Iterator[Metric]:
    labels = ["resource"]
    synced = GaugeMetricFamily(_PREFIX + "informer_synced", "1 once the informer has listed.", labels=labels)
    events = CounterMetricFamily(_PREFIX + "informer_events", "Watch events applied.", labels=labels)
    relists = CounterMetricFamily(_PREFIX + "informer_relists", "Lists of the whole kind.", labels=labels)
    quiet = GaugeMetricFamily(
        _PREFIX + "informer_seconds_since_last_event",
        "Seconds since the informer's last watch event (bookmarks included).",
        labels=labels,
    )
    for kind, informer in sorted(informers.informers.items()):
        synced.add_metric([kind], 1 if informer.synced else 0)
        events.add_metric([kind], informer.stats.events)
        relists.add_metric([kind], informer.stats.lists)
        if informer.stats.last_event_at is not None:
            quiet.add_metric([kind], max(0.0, informer.clock.now() - informer.stats.last_event_at))
    yield from (synced, events, relists, quiet)


def _request_classes(spec: Mapping[str, Any]) -> dict[str, str]:
    """Request (and ``request/subrequest``) name -> the DeviceClass it asks for."""
    classes: dict[str, str] = {}
    for request in (spec.get("devices") or {}).get("requests") or ():
        name = str(request.get("name") or "")
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName"):
            classes[name] = str(exactly["deviceClassName"])
        for sub in request.get("firstAvailable") or ():
            classes[f"{name}/{sub.get('name')}"] = str(sub.get("deviceClassName") or "")
    return classes


def _namespace_devices(claims: Iterable[tuple[str, Mapping[str, Any]]]) -> Tally[tuple[str, str, str]]:
    """Devices of allocated claims per (namespace, requested DeviceClass, driver); admin access holds none."""
    counts: Tally[tuple[str, str, str]] = Tally()
    for key, claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results: Iterable[Mapping[str, Any]] = (allocation.get("devices") or {}).get("results") or ()
        if not results:
            continue
        classes = _request_classes(claim.get("spec") or {})
        namespace = key.partition("/")[0]
        for result in results:
            if result.get("adminAccess") is True:
                continue
            device_class = classes.get(str(result.get("request") or ""), "")
            counts[(namespace, device_class, str(result.get("driver") or ""))] += 1
    return counts


class ConfigReloadCollector(Collector):
    """The config file's reload state, read from its ``app.config.derivedconfig.ConfigWatcher``."""

    def __init__(self, watcher: ConfigWatcher) -> None:
        self.watcher = watcher

    def collect(self) -> Iterator[Metric]:
        watcher = self.watcher
        config_hash = GaugeMetricFamily(
            _PREFIX + "config_hash",
            "1, labelled with the SHA-256 of the config file in force.",
            labels=["sha256"],
        )
        config_hash.add_metric([watcher.digest], 1)
        yield config_hash
        yield _gauge(
            "config_last_reload_successful",
            "1 when the config file on disk is the one in force, 0 when its last change was not applied.",
            1 if watcher.last_reload_successful else 0,
        )
        yield _gauge(
            "config_last_reload_success_timestamp_seconds",
            "Unix time the config in force was applied (startup or reload).",
            watcher.last_success_seconds,
        )


class Metrics:
    """The extender's metrics. ``informers``: cluster mode's ``app.kube.informers.Informers``;
    ``collectors``: more to expose (the API client's metrics, the config reload's state)."""

    def __init__(
        self, service: SchedulingService, informers: Any = None, *, collectors: Sequence[Collector] = ()
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for process_collector in (ProcessCollector, PlatformCollector, GCCollector):
            process_collector(registry=self.registry)
        Gauge(
            _PREFIX + "build_info",
            "1, labelled with the version, the Python version and the git commit of the extender",
            ["version", "python", "git"],
            registry=self.registry,
        ).labels(buildinfo.version(), buildinfo.python_version(), buildinfo.git_commit()).set(1)
        for collector in collectors:
            self.registry.register(collector)
        self.requests = Histogram(
            _PREFIX + "request_duration_seconds",
            "Latency of the extender verbs kube-scheduler calls.",
            ["verb", "result"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.binds = Counter(_PREFIX + "binds", "Bind outcomes.", ["result"], registry=self.registry)
        self.filter_nodes = Counter(
            _PREFIX + "filter_nodes",
            "Nodes filter answered, by result (passed, failed, unresolvable).",
            ["result"],
            registry=self.registry,
        )
        # Every series from the start (rates need the zero before the first event), kept: looking a
        # series up by its labels on each request takes a lock and builds keys, on the filter's hot path.
        self._request_series = {
            (verb, ok): self.requests.labels(verb, result)
            for verb in VERBS
            for ok, result in zip((True, False), RESULTS, strict=True)
        }
        for result in RESULTS:
            self.binds.labels(result)
        self._node_series = tuple(self.filter_nodes.labels(result) for result in NODE_RESULTS)
        self.sample_misses = Counter(
            _PREFIX + "sample_misses",
            "Filters that rejected a pod on all of kube-scheduler's sample of nodes while another node had "
            "the devices (the pod retried at once).",
            registry=self.registry,
        )
        self.admission_reviews = Counter(
            _PREFIX + "admission_reviews",
            "Pod creations the admission webhook answered (app.http.webhook), by endpoint (mutate, validate) "
            "and outcome (patched, refused, allowed: unchanged).",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        for endpoint in ("mutate", "validate"):
            for outcome in ("patched", "refused", "allowed"):
                self.admission_reviews.labels(endpoint, outcome)
        self.registry.register(_StateCollector(service, informers))

    def observe_request(self, verb: str, ok: bool, seconds: float) -> None:
        self._request_series[verb, ok].observe(seconds)

    def observe_filter(self, passed: int, failed: int, unresolvable: int) -> None:
        for series, count in zip(self._node_series, (passed, failed, unresolvable), strict=True):
            if count:
                series.inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
