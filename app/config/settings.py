"""Settings of the extender, one frozen dataclass per concern, filled by the CLI (``app.cli.main``).

* ``ServerSettings``: where the HTTP endpoint listens and what it accepts.
* ``SchedulingSettings``: feature gates and the device selection policy handed to the allocator.
* ``ClusterSettings``: cluster mode (``app.kube``): API server connection, timeouts, backoff, grace periods.
* ``Settings``: the state directory (offline) or the cluster settings, plus the two above.

Every field documents its unit and why the default was chosen. ``__post_init__`` rejects values that
cannot work (``ValueError`` naming the field), so a bad flag fails at startup, not on the first request.
``RANGES`` holds what each numeric field accepts, for the config file to check its values by the same
rules (``app.config.extenderconfig``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from allocator.alignment import DEVICE_SELECTION_POLICIES
from allocator.decide import FILTER_TIMEOUT
from allocator.features import FeatureGates
from allocator.scoring import ScoringConfig

__all__ = [
    "CEL_ENGINES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEVICE_SCORING",
    "DEVICE_SELECTION_POLICIES",
    "LOG_LEVELS",
    "MAX_BODY_BYTES",
    "MAX_LIST_PAGE_SIZE",
    "MAX_SECONDS",
    "RANGES",
    "ClusterSettings",
    "Range",
    "SchedulingSettings",
    "ServerSettings",
    "Settings",
]

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""8 MiB: see ``ServerSettings.max_body_bytes``."""

MAX_BODY_BYTES = 32 * 1024 * 1024
"""32 MiB, the most ``max_body_bytes`` takes: a body parses to ~5.5 times its size (a 64 MiB NodeList:
355 MiB), and four may be read at once (``app.http.api``), so four 32 MiB bodies come to ~850 MiB, beside
the state within the manifests' 2 GiB memory limit. A larger value would take the limit away in effect.
Hostile bodies expand more: 32 MiB of empty arrays parse to about 1 GiB (the default 8 MiB: a quarter),
hence bodies are parsed one at a time (``app.http.wire``)."""

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""Names accepted by both ``logging`` and uvicorn's ``--log-level``."""

CEL_ENGINES = ("cel-expr", "cel-python")
"""CEL engines (``app.cli.runtime.new_engine``): Google's C++ runtime via cel-expr-python, or cel-python."""

DEVICE_SCORING = ("prioritize", "filter")
"""Where the device score ranks nodes (``SchedulingSettings.device_scoring``)."""


@dataclass(frozen=True, slots=True)
class Range:
    """The values a numeric setting accepts: finite, above ``low`` (from it with ``closed``), at most
    ``high`` (``high_note`` says what that is in messages: ``one day``); integers only with ``integer``."""

    low: float = 0.0
    high: float = math.inf
    closed: bool = False
    integer: bool = False
    high_note: str = ""

    def problem(self, value: float) -> str:
        """Why ``value`` is out of the range (``must be positive, got 0``), or "" when it is in."""
        # An int is finite and compares exactly as it is; math.isfinite would convert it to a float, which
        # 10**400 overflows.
        if not isinstance(value, int) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if self.integer and value != int(value):
            return f"must be an integer, got {value}"
        above_low = value >= self.low if self.closed else value > self.low
        if self.closed and self.high < math.inf:
            if not above_low or value > self.high:
                return f"must be in {_bound(self.low)}..{_bound(self.high)}, got {value}"
        elif not above_low:
            wording = "positive" if self.low == 0 and not self.closed else f"at least {_bound(self.low)}"
            return f"must be {wording}, got {value}"
        elif value > self.high:
            note = f" ({self.high_note})" if self.high_note else ""
            return f"must be at most {_bound(self.high)}{note}, got {value}"
        return ""


def _bound(value: float) -> str:
    # Integers as they are: 9223372036854775807 in :g format reads 9.22337e+18.
    return str(value) if isinstance(value, int) else f"{value:g}"


MAX_SECONDS = 86_400
"""One day: the longest timeout, interval or grace period any setting takes."""

MAX_LIST_PAGE_SIZE = 10_000
"""``list_page_size``'s maximum (20x the API server's default page): a page of 10,000 Pods is already
tens of MB of JSON held at once, and a larger one defeats paging."""

_SECONDS = Range(high=MAX_SECONDS, high_note="one day")
_SECONDS_INTEGER = Range(high=MAX_SECONDS, integer=True, high_note="one day")
_RATE = Range(high=10_000)
"""Requests a second: 10,000 is far above what one API server takes from one client."""
_BURST = Range(high=100_000, integer=True)

RANGES: dict[str, Range] = {
    "port": Range(1, 65535, closed=True, integer=True),
    "verbosity": Range(0, 10, closed=True, integer=True),
    "max_body_bytes": Range(high=MAX_BODY_BYTES, integer=True, high_note="32 MiB"),
    "filter_time_budget_seconds": _SECONDS,
    "filter_timeout_seconds": _SECONDS,
    "percentage_of_nodes_to_score": Range(0, 100, closed=True, integer=True),
    "scheduler_percentage_of_nodes_to_score": Range(0, 100, closed=True, integer=True),
    "connect_timeout_seconds": _SECONDS,
    "request_timeout_seconds": _SECONDS,
    "watch_timeout_seconds": _SECONDS_INTEGER,
    "watch_idle_seconds": _SECONDS,
    "list_page_size": Range(high=MAX_LIST_PAGE_SIZE, integer=True),
    "backoff_initial_seconds": _SECONDS,
    "backoff_max_seconds": _SECONDS,
    "backoff_jitter": Range(0, 1, closed=True),
    "bind_timeout_seconds": _SECONDS,
    "binding_timeout_seconds": _SECONDS,
    "binding_poll_seconds": _SECONDS,
    "orphan_grace_period_seconds": _SECONDS,
    "orphan_check_interval_seconds": _SECONDS,
    "scheduler_lease_retry_seconds": _SECONDS,
    "reservation_ttl_seconds": _SECONDS,
    "api_qps": _RATE,
    "api_burst": _BURST,
    "requeue_delay_seconds": _SECONDS,
    "requeue_qps": _RATE,
    "requeue_burst": _BURST,
    "requeue_max_pods": Range(high=1_000_000, integer=True),
    "preemption_evictions_per_minute": Range(0, 100_000, closed=True, integer=True),
    "preemption_hold_seconds": _SECONDS,
    "prioritize_hold_seconds": Range(high=MAX_SECONDS, closed=True),
}
"""Per numeric field of the settings below (by name), the values it accepts. Every one is finite: an
infinite timeout or grace period never ends, and NaN compares false with everything. Every one has a
maximum: integers one well below int64 (a list limit of 2**70 would be sent to the API server as it is),
seconds at most one day (``MAX_SECONDS``: 1e300 s never ends either, and overflows a thread's wait)."""


def _check_ranges(settings: object) -> None:
    """Every numeric field of ``settings`` (a dataclass above) that is set, against ``RANGES``. Raises
    ValueError naming the field."""
    # settings is typed object (any settings dataclass above); mypy's fields() wants a dataclass type.
    for f in fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        problem = RANGES[f.name].problem(value) if f.name in RANGES and value is not None else ""
        if problem:
            raise ValueError(f"{f.name}: {problem}")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP endpoint kube-scheduler calls (``urlPrefix`` in its extender configuration)."""

    host: str = "127.0.0.1"
    """Interface to bind. Loopback by default: the endpoint has no authentication of its own, and the usual
    deployment runs next to a hostNetwork kube-scheduler; listen on ``0.0.0.0`` only behind mTLS/a proxy."""

    port: int = 8888
    """TCP port (1..65535). 8888 is free on control-plane nodes (kube-scheduler uses 10259)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest accepted request body, in bytes; larger bodies get 413 before any parsing.

    With ``nodeCacheCapable: false`` kube-scheduler sends the full Node objects (labels, capacity, conditions,
    images, ...) of every candidate node in each filter/prioritize call, a few KiB to tens of KiB per node,
    so a 100+ node cluster sends several MiB. 8 MiB admits that while capping memory a bogus client can make
    the extender buffer and parse (uvicorn itself has no body limit). At most 32 MiB (``MAX_BODY_BYTES``)."""

    log_level: str = "info"
    """Python ``logging`` / uvicorn level name. ``info`` logs startup and one line per request."""

    verbosity: int = 0
    """klog-style ``-v N`` (0..10): 0 leaves ``log_level`` as it is, 1 or more logs at debug (the extender
    has no finer levels); the more verbose of the two wins (``effective_log_level``)."""

    log_format: str = "text"
    """``text`` or ``json`` (``app.config.logs``): one format for the extender's and uvicorn's records;
    ``json`` has klog-style keys (``ts``, ``level``, ``msg``, ``pod``, ``node``, ``claim``) for log
    collectors."""

    metrics_bind_address: str | None = None
    """``host:port`` of a second listener serving nothing but ``/metrics`` (every other path 404,
    ``app.http.metricsport``), for Prometheus to scrape the pod while the extender's port stays on
    loopback (``manifests/`` uses ``0.0.0.0:9090``, with a NetworkPolicy). None: metrics only at
    ``/metrics`` on the extender's port."""

    health_probe_bind_address: str | None = None
    """``host:port`` of a listener answering only ``/livez``, ``/healthz`` and ``/readyz`` from a child
    process (``app.http.probes``), so probes stay fast while the extender is busy. None: probes only on the
    extender's port."""

    ssl_certfile: Path | None = None
    """PEM server certificate: serve HTTPS (kube-scheduler ``enableHTTPS: true`` with a ``tlsConfig.caFile``;
    without a CA kube-scheduler does not verify). None: plain HTTP, fine on loopback in the sidecar model."""

    ssl_keyfile: Path | None = None
    """PEM key of ``ssl_certfile``; required with it."""

    ssl_ca_certs: Path | None = None
    """PEM CA bundle: require and verify client certificates (mTLS; kube-scheduler ``tlsConfig.certFile`` /
    ``keyFile``). Without ``delegated_auth`` the endpoint has no other authentication, so listen beyond
    loopback only with this. With it, certificates are optional (a bearer token also identifies)."""

    webhook_bind_address: str | None = None
    """``host:port`` of the admission webhook's HTTPS listener (``app.http.webhook``: ``/mutate`` sets the
    extender's ``schedulerName`` on DRA pods of the default scheduler, ``/validate`` refuses DRA pods of
    other schedulers), with ``webhook_certfile`` / ``webhook_keyfile``. None (default): no webhook."""

    webhook_certfile: Path | None = None
    """PEM serving certificate of the webhook listener (the API server only calls webhooks over HTTPS);
    reloaded when it changes, as ``ssl_certfile``."""

    webhook_keyfile: Path | None = None
    """PEM key of ``webhook_certfile``."""

    delegated_auth: bool = False
    """Authenticate callers with the API server (TokenReview, or a verified client certificate) and
    authorize them: ``/scheduler/*`` only for ``scheduler_user``, ``/api/*`` by SubjectAccessReview
    (``app.http.auth``). Cluster mode only. Off by default: the loopback sidecar needs none."""

    scheduler_user: str = "system:kube-scheduler"
    """The user allowed on ``/scheduler/*`` with ``delegated_auth`` (a token's username or a
    certificate's CN; for a scheduler running as a service account: ``system:serviceaccount:NS:NAME``)."""

    @property
    def effective_log_level(self) -> str:
        """The level records are logged at: ``log_level``, or ``debug`` with a ``verbosity`` above 0."""
        return "debug" if self.verbosity > 0 else self.log_level

    def __post_init__(self) -> None:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile, ssl_keyfile: give both or neither")
        if self.ssl_ca_certs is not None and self.ssl_certfile is None:
            raise ValueError("ssl_ca_certs: client certificates need HTTPS (ssl_certfile, ssl_keyfile)")
        if (self.webhook_bind_address is None) != (self.webhook_certfile is None) or (
            self.webhook_certfile is None
        ) != (self.webhook_keyfile is None):
            raise ValueError(
                "webhook_bind_address, webhook_certfile, webhook_keyfile: give all three or none"
            )
        _check_ranges(self)
        for field_name in ("metrics_bind_address", "health_probe_bind_address", "webhook_bind_address"):
            address = getattr(self, field_name)
            if address is not None:
                host, _, port = address.rpartition(":")
                if not host or not port.isdigit() or not 0 < int(port) < 65536:
                    raise ValueError(f"{field_name}: expected host:port, got {address!r}")
        if self.log_format not in ("text", "json"):
            raise ValueError(f"log_format: must be text or json, got {self.log_format!r}")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level: must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")


@dataclass(frozen=True, slots=True)
class SchedulingSettings:
    """What the allocator is allowed to do."""

    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """DRA feature gates by upstream name. Default: Kubernetes 1.37 defaults (``allocator.features``), so
    the extender decides like the in-tree plugin of the matching scheduler release."""

    device_selection: str = "aligned"
    """Which devices are picked among those that fit on a node (``allocator.alignment``). ``aligned``
    (default): devices on one PCIe root, else one NUMA node, in the tightest such group, so whole groups
    stay free for later pods. ``first-fit``: the upstream structured allocator's device order, so a pod gets
    exactly the devices kube-scheduler would pick (use it to compare with the in-tree plugin)."""

    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    """Prioritize: ``binpack`` (default) or ``spread`` and the weights of the NUMA, PCIe, packing,
    intact-group and firstAvailable-rank components (``allocator.scoring``; defaults numa=3, pcie=2,
    packing=2, intact=1, prioritized=8)."""

    cel_engine: str = "cel-expr"
    """CEL implementation evaluating selectors and derived attributes (``CEL_ENGINES``). ``cel-expr``
    (default): Google's C++ runtime, ~5-10 us per uncached evaluation. ``cel-python``: the pure-Python
    cross-check engine, 20-100x slower; the same inputs give the same results (shared conformance corpus)."""

    filter_time_budget_seconds: float | None = None
    """Longest one filter call searches; nodes not decided by then fail with a reason saying so and are
    decided on the next call. None: the service's 3 s (``app.scheduling.service.FILTER_TIME_BUDGET``), below
    kube-scheduler's 5 s extender timeout for filter."""

    filter_timeout_seconds: float = FILTER_TIMEOUT
    """Longest one node's device search runs; a node still undecided then fails with a reason saying it
    timed out. 10 s: kube-scheduler's default ``filterTimeout`` of the DynamicResources plugin, the only
    bound upstream puts on the search (it has no step limit, so neither does the extender)."""

    percentage_of_nodes_to_score: int = 0
    """How many of the nodes that fit filter passes on to kube-scheduler's scoring, with kube-scheduler's
    meaning of ``percentageOfNodesToScore`` (``app.scheduling.sampling``): 0 (default) adaptive, as
    kube-scheduler's default; 100 every node. The extender samples after the device check, so the shipped
    KubeSchedulerConfiguration sets 100 for kube-scheduler itself."""

    scheduler_percentage_of_nodes_to_score: int = 100
    """kube-scheduler's own ``percentageOfNodesToScore`` in the KubeSchedulerConfiguration this extender
    serves (default 100, as shipped: it filters every node). Below 100 (0: adaptive) kube-scheduler asks
    about a sample of the nodes, before the extender sees their devices; a pod rejected on its whole sample
    while a node outside it has the devices is a sample miss (``app.scheduling.sampling.SchedulerSample``):
    no preemption for it, and a retry at once."""

    device_scoring: str = "prioritize"
    """Where the device score (``allocator.scoring``) ranks nodes (``DEVICE_SCORING``). ``prioritize``
    (default): it is one of kube-scheduler's scores, added with the extender's weight. ``filter``: filter
    passes on only the nodes with the best device score, so device placement comes before kube-scheduler's
    own preferences, which break ties among those nodes; kube-scheduler's configuration then leaves
    ``prioritizeVerb`` out, and a pod with one such node skips kube-scheduler's scoring altogether
    (``app.scheduling.besttier``)."""

    def __post_init__(self) -> None:
        _check_ranges(self)
        if self.cel_engine not in CEL_ENGINES:
            raise ValueError(f"cel_engine: must be one of {', '.join(CEL_ENGINES)}, got {self.cel_engine!r}")
        if self.device_scoring not in DEVICE_SCORING:
            raise ValueError(
                f"device_scoring: must be one of {', '.join(DEVICE_SCORING)}, got {self.device_scoring!r}"
            )
        if self.device_selection not in DEVICE_SELECTION_POLICIES:
            raise ValueError(
                f"device_selection: must be one of {', '.join(DEVICE_SELECTION_POLICIES)}, "
                f"got {self.device_selection!r}"
            )


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """Cluster mode: how the extender reaches the API server, keeps its index current
    (``app.kube.informers``), writes binds (``app.kube.binder``) and recovers (``app.kube.recovery``)."""

    kubeconfig: Path | None = None
    """kubeconfig file. None: the files of ``$KUBECONFIG`` when set (merged as kubectl merges them: missing
    and empty ones skipped), else the in-cluster service account."""

    context: str | None = None
    """kubeconfig context; None: its ``current-context``."""

    in_cluster: bool = False
    """Use the pod's service account even when ``$KUBECONFIG`` is set."""

    connect_timeout_seconds: float = 5.0
    """Seconds to open a connection to the API server. 5 s: the API server is near; longer means it is down,
    and the caller (informer backoff, bind rollback) should move on."""

    request_timeout_seconds: float = 10.0
    """Total seconds for one non-watch request (list page, get, put, post). A healthy API server answers in
    milliseconds; 10 s bounds a hung connection well inside ``bind_timeout_seconds``."""

    watch_timeout_seconds: int = 300
    """Server-side ``timeoutSeconds`` of each watch; the stream then ends and is reopened from the last
    resourceVersion (no relist). 300 s: longer values meet client-side timeouts (kubernetes-asyncio #259).
    At most one day (``MAX_SECONDS``)."""

    watch_idle_seconds: float = 90.0
    """Socket read timeout of a watch: a watch that receives nothing (not even a BOOKMARK) for this long is
    taken for dead and replaced at once, re-watching from the last resourceVersion. The API server sends
    bookmarks to watchers that ask for them about once a minute, so 90 s of silence means a half-open
    connection (kubernetes-asyncio #360), not a quiet resource."""

    list_page_size: int = 500
    """``limit`` of each list page (the API server default page size), so a relist of a large kind is many
    small answers instead of one huge one. At most 10,000 (``MAX_LIST_PAGE_SIZE``)."""

    backoff_initial_seconds: float = 0.5
    """First wait after a failed list or watch; doubles per consecutive failure."""

    backoff_max_seconds: float = 30.0
    """Longest wait between attempts: an API server back from an outage is relisted within 30 s."""

    backoff_jitter: float = 0.2
    """Each wait is multiplied by a random factor in [1 - jitter, 1 + jitter] so replicas do not relist in
    lockstep after an API server restart. 0..1."""

    bind_timeout_seconds: float = 20.0
    """Budget for the API writes of one bind; past it the bind is rolled back and answered with ``Error``.
    With ``binding_timeout_seconds`` it must stay below kube-scheduler's extender ``httpTimeout`` (630 s in
    ``manifests/``), so the extender decides the outcome, not the scheduler's client timeout."""

    binding_timeout_seconds: float = 600.0
    """How long a bind waits for device binding conditions (DRADeviceBindingConditions with
    DRAResourceClaimDeviceStatus): when a claim's allocation has result entries with ``bindingConditions``,
    the bind, after writing the claims, waits until a driver sets every one of them ``True`` in the claim's
    ``status.devices[]`` (then binds the pod), or one of the ``bindingFailureConditions`` turns ``True``, or
    this time passes (then rolls back and answers ``Error``). 600 s: kube-scheduler's default
    (``DynamicResourcesArgs.bindingTimeout``), time for a fabric to attach a device to the node.

    The wait holds the bind call open: kube-scheduler only waits ``httpTimeout`` for the answer, so it must
    be above this plus ``bind_timeout_seconds`` (``manifests/`` ships 630 s; ``serve --binding-timeout``).
    Otherwise kube-scheduler gives up on the call and retries the pod, whose next bind is refused while this
    one waits; the waiting bind still binds the pod or rolls back. Each waiting bind also keeps one HTTP
    worker thread (40 by default) busy."""

    binding_poll_seconds: float = 5.0
    """Seconds between two reads of the claims a bind waits for (``binding_timeout_seconds``); the first read
    is right after the claim writes. 5 s: kube-scheduler's interval; one GET per waiting claim each time."""

    orphan_grace_period_seconds: float = 300.0
    """A claim allocated and reserved for a pod that is still not bound after this long (the extender
    stopped between the claim write and the binding) is released. 300 s: far longer than a bind and
    kube-scheduler's retry backoff (10 s max by default), so a retried bind reuses the allocation first."""

    orphan_check_interval_seconds: float = 30.0
    """How often claims are checked for orphaned allocations (and expired reservations)."""

    reservation_ttl_seconds: float = 600.0
    """Devices written by a bind stay reserved until the ResourceClaim watch shows the write. A write whose
    outcome is unknown (sent, never answered, the claim could not be re-read) that the index still does not
    show after this long is taken as not done: its reservation is dropped, with a warning. A write the
    server answered is never dropped this way."""

    scheduler_names: tuple[str, ...] = ("dra-scheduler",)
    """The kube-scheduler profiles (``schedulerName``) configured with this extender. Only claims of pods
    of these schedulers are released as orphans: a pod of another scheduler between that scheduler's claim
    write and its binding looks the same, and its allocation is not ours to undo. ``dra-scheduler`` is the
    profile ``manifests/`` ships; a pod without ``schedulerName`` counts as ``default-scheduler``, as the
    API server defaults it."""

    scheduler_lease: str | None = None
    """``namespace/name`` of the leader-election Lease of the kube-scheduler this extender is a sidecar of.
    When set, only the replica next to the leader binds, releases orphaned allocations and signals rejected
    pods (standbys keep their index warm, refuse binds and write nothing; ``app.kube.leader``). None: this is
    the only replica."""

    scheduler_lease_retry_seconds: float = 2.0
    """How often the Lease is read: at most how long a replica whose kube-scheduler gave the Lease up may
    still bind (a bind that finds it not ours reads it again at once, so taking over waits for nothing).
    2 s: kube-scheduler's default ``leaderElection.retryPeriod``; one GET per period."""

    api_qps: float = 50.0
    """Requests a second the API client sends at most, on average (a token bucket, as client-go's and
    kube-scheduler's ``clientConnection.qps``): every list page, watch, claim write, binding and requeue
    signal takes a token. 50: kube-scheduler's default, so the extender's writes (claims, bindings) get no
    more API budget than the in-tree DynamicResources plugin's, which go through kube-scheduler's client.
    Raise it together with kube-scheduler's ``clientConnection.qps``."""

    api_burst: int = 100
    """Requests the API client may send at once above ``api_qps`` (kube-scheduler's ``clientConnection.burst``
    default)."""

    requeue_delay_seconds: float = 0.2
    """How long the requeuer (``app.kube.requeue``) gathers events before it signals the pods they can help:
    a driver publishing a node's slices one by one, or the resourceclaim controller deallocating the claims
    of a deleted job, is one signal per pod, not one per object. 0.2 s: well inside the second a pod should
    wait, long enough for a burst of watch events."""

    requeue_qps: float = 20.0
    """Requeue signals (one pod annotation patch each) a second, on average: a burst of rejected pods must
    not take the API budget the binds need. 20: 2000 waiting pods are all signalled within about 100 s,
    the first ``requeue_burst`` at once."""

    requeue_burst: int = 100
    """Requeue signals sent at once above ``requeue_qps``."""

    requeue_max_pods: int = 10_000
    """Most pods the requeuer remembers as rejected; the oldest rejection is forgotten first (that pod then
    waits for kube-scheduler's own requeue, as without the requeuer)."""

    preemption_evictions_per_minute: int = 30
    """Most pods the extender's own preemption (``app.kube.preemptor``: pods short only of devices)
    evicts in any 60 s; a plan needing more waits, one needing more than this never runs. 0 turns that
    preemption off (kube-scheduler's ``preemptVerb`` path is unaffected). 30: a few preemptions a minute
    free devices for important pods; a misbehaving priority setup cannot empty a cluster quickly."""

    preemption_hold_seconds: float = 60.0
    """How long the devices freed by a preemption stay kept for the preemptor
    (``app.scheduling.preemptionholds``), counted after its victims' longest
    ``terminationGracePeriodSeconds``: enough for the resourceclaim controller to deallocate their claims
    and for kube-scheduler to try the pod again after its backoff (at most 10 s)."""

    prioritize_hold_seconds: float | None = None
    """How long prioritize holds the devices of the node it scores strictly best for the pod's bind
    (``app.scheduling.prioritizeholds``); 0 turns holds off. None: the service's 5 s
    (``app.scheduling.prioritizeholds.HOLD_SECONDS``), far above the milliseconds kube-scheduler takes
    from prioritize to bind unless a Permit plugin or a volume makes the pod wait."""

    def __post_init__(self) -> None:
        _check_ranges(self)
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise ValueError("backoff_max_seconds: must not be below backoff_initial_seconds")
        if not self.scheduler_names or not all(self.scheduler_names):
            raise ValueError(f"scheduler_names: expected one or more names, got {self.scheduler_names!r}")
        if self.scheduler_lease is not None and len(self.scheduler_lease.split("/")) != 2:
            raise ValueError(f"scheduler_lease: expected namespace/name, got {self.scheduler_lease!r}")
        if self.in_cluster and self.kubeconfig is not None:
            raise ValueError("in_cluster, kubeconfig: give one or the other")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``serve`` and ``simulate`` need."""

    state_dir: Path | None
    """Directory (or single file) of manifests the cluster state is loaded from (``app.state.statedir``); None
    in cluster mode (``cluster``). No default: an extender without a state has nothing to allocate."""

    server: ServerSettings = field(default_factory=ServerSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    config_file: Path | None = None
    """Extender config file (``app.config.derivedconfig``: settings and cluster-wide derived attributes),
    applied by ``serve`` when it changes (``app.cli.reload``). None: no config."""
    cluster: ClusterSettings | None = None
    """Cluster mode (list+watch the API server, write binds to it) instead of ``state_dir``."""
