"""The settings sections of the config file (``--config FILE``): ``kind: ExtenderConfiguration``.

A versioned file carries every setting of ``serve`` besides the cluster-wide ``derivedAttributes``
(``app.config.derivedconfig`` reads those and calls ``parse_sections`` for the rest)::

    apiVersion: dra-extender.io/v1alpha1
    kind: ExtenderConfiguration
    server: {port: 8888, logFormat: json, metricsBindAddress: "0.0.0.0:9090"}
    scheduling: {deviceSelection: aligned, scoringPolicy: binpack, scoreWeights: {numa: 3}}
    cluster: {bindingTimeoutSeconds: 600, schedulerNames: [dra-scheduler]}
    derivedAttributes: [...]

``FIELDS`` lists every field with its type and meaning (checked against docs/configuration.md's table).
Each value becomes the default of the command-line option it stands for (``FieldSpec.dest``, an ``argparse``
destination), so a flag given on the command line overrides the file. ``server`` and ``cluster`` apply to
``serve``; ``scheduling`` to ``serve``, ``simulate`` and ``explain``. Values are checked for their type
here, numbers also for their range (``app.config.settings.RANGES``), the score weights as the settings
check them: an error names the field's path. The settings check the ranges again (naming the setting),
since flags set them too.

Reload: when the file changes while ``serve`` runs, ``app.cli.reload`` applies the settings it can at once
(device selection, scoring, the filter time budget, the log level, verbosity and format, the derived
attributes) and logs every other changed field as needing a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.alignment import DEVICE_SELECTION_POLICIES
from allocator.features import parse_feature_gates
from allocator.scoring import SCORING_POLICIES, ScoringConfig, parse_weights
from app.config.logs import LOG_FORMATS
from app.config.settings import CEL_ENGINES, DEVICE_SCORING, LOG_LEVELS, RANGES

__all__ = [
    "API_VERSION",
    "COMMAND_SECTIONS",
    "FIELDS",
    "KIND",
    "PATH_FIELDS",
    "SECTIONS",
    "FieldSpec",
    "parse_sections",
]

API_VERSION = "dra-extender.io/v1alpha1"
KIND = "ExtenderConfiguration"
SECTIONS = ("server", "scheduling", "cluster")

COMMAND_SECTIONS = {"serve": SECTIONS, "simulate": ("scheduling",), "explain": ("scheduling",)}
"""Which sections give defaults to which command."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field: ``path`` in the file, ``kind`` of value, the option ``dest`` it sets, what it means."""

    path: str
    kind: str
    """``string``, ``integer``, ``number``, ``boolean``, ``path``, ``strings`` (a list), ``gates`` (name ->
    bool), ``weights`` (name -> number), or ``one of a|b|c``."""
    dest: str
    doc: str
    flag: str = ""
    """The command-line option that overrides it ("" when there is none)."""
    setting: str = ""
    """The settings field it fills (``app.config.settings``), when its name is not ``dest``."""


def _one_of(values: tuple[str, ...]) -> str:
    return "one of " + "|".join(values)


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("server.host", "string", "host", "interface to listen on (default 127.0.0.1)", "--host"),
    FieldSpec("server.port", "integer", "port", "TCP port (default 8888)", "--port"),
    FieldSpec(
        "server.maxBodyBytes",
        "integer",
        "max_body_bytes",
        "largest request body, at most 32 MiB (default 8 MiB)",
        "--max-body-bytes",
    ),
    FieldSpec("server.logLevel", _one_of(LOG_LEVELS), "log_level", "log level (default info)", "--log-level"),
    FieldSpec(
        "server.verbosity",
        "integer",
        "verbosity",
        "klog-style verbosity 0..10: 1 or more logs at debug whatever logLevel says (default 0)",
        "-v",
    ),
    FieldSpec(
        "server.logFormat",
        _one_of(LOG_FORMATS),
        "log_format",
        "text or json logs (default text)",
        "--log-format",
    ),
    FieldSpec(
        "server.metricsBindAddress",
        "string",
        "metrics_bind_address",
        "host:port of a listener serving nothing but the metrics (default none)",
        "--metrics-bind-address",
    ),
    FieldSpec(
        "server.healthProbeBindAddress",
        "string",
        "health_probe_bind_address",
        "host:port of a listener answering only the probes, from a process of its own (default none)",
        "--health-probe-bind-address",
    ),
    FieldSpec(
        "server.webhookBindAddress",
        "string",
        "webhook_bind_address",
        "host:port of the admission webhook's HTTPS listener (default none)",
        "--webhook-bind-address",
    ),
    FieldSpec(
        "server.webhookCertFile",
        "path",
        "webhook_certfile",
        "PEM certificate of the webhook listener",
        "--webhook-certfile",
    ),
    FieldSpec(
        "server.webhookKeyFile", "path", "webhook_keyfile", "PEM key of webhookCertFile", "--webhook-keyfile"
    ),
    FieldSpec("server.sslCertFile", "path", "ssl_certfile", "PEM certificate: serve HTTPS", "--ssl-certfile"),
    FieldSpec("server.sslKeyFile", "path", "ssl_keyfile", "PEM key of sslCertFile", "--ssl-keyfile"),
    FieldSpec(
        "server.sslCACerts", "path", "ssl_ca_certs", "PEM CA: require client certificates", "--ssl-ca-certs"
    ),
    FieldSpec(
        "server.delegatedAuth",
        "boolean",
        "delegated_auth",
        "check callers with the API server (TokenReview, SubjectAccessReview)",
        "--delegated-auth",
    ),
    FieldSpec(
        "server.schedulerUser",
        "string",
        "scheduler_user",
        "the only user allowed on /scheduler/* with delegatedAuth (default system:kube-scheduler)",
        "--scheduler-user",
    ),
    FieldSpec(
        "scheduling.featureGates",
        "gates",
        "feature_gates",
        "DRA feature gates by upstream name, e.g. {DRAListTypeAttributes: true} (default: Kubernetes 1.37's)",
        "--feature-gates",
    ),
    FieldSpec(
        "scheduling.deviceSelection",
        _one_of(DEVICE_SELECTION_POLICIES),
        "device_selection",
        "devices chosen on a node (default aligned)",
        "--device-selection",
    ),
    FieldSpec(
        "scheduling.scoringPolicy",
        _one_of(SCORING_POLICIES),
        "scoring_policy",
        "prioritize policy (default binpack)",
        "--scoring-policy",
    ),
    FieldSpec(
        "scheduling.scoreWeights",
        "weights",
        "score_weights",
        "weights of numa, pcie, packing, intact, prioritized (defaults 3, 2, 2, 1, 8; a subset is fine; "
        "each 0..1000)",
        "--score-weights",
    ),
    FieldSpec(
        "scheduling.celEngine",
        _one_of(CEL_ENGINES),
        "cel_engine",
        "CEL engine (default cel-expr)",
        "--cel-engine",
    ),
    FieldSpec(
        "scheduling.filterTimeBudgetSeconds",
        "number",
        "filter_time_budget_seconds",
        "longest one filter call searches; undecided nodes fail saying so (default 3; kube-scheduler: 5)",
    ),
    FieldSpec(
        "scheduling.filterTimeoutSeconds",
        "number",
        "filter_timeout_seconds",
        "longest one node's device search runs; the node then fails as timed out (default 10, as "
        "kube-scheduler's filterTimeout)",
    ),
    FieldSpec(
        "scheduling.percentageOfNodesToScore",
        "integer",
        "percentage_of_nodes_to_score",
        "filter passes on as many nodes that fit as kube-scheduler would score: this % of all nodes "
        "(default 0: adaptive; 100: every node that fits)",
        "--percentage-of-nodes-to-score",
    ),
    FieldSpec(
        "scheduling.schedulerPercentageOfNodesToScore",
        "integer",
        "scheduler_percentage_of_nodes_to_score",
        "kube-scheduler's own percentageOfNodesToScore (default 100); below 100 a pod rejected on its "
        "whole sample while another node has the devices is requeued at once, with no preemption for devices",
        "--scheduler-percentage-of-nodes-to-score",
    ),
    FieldSpec(
        "scheduling.deviceScoring",
        _one_of(DEVICE_SCORING),
        "device_scoring",
        "where the device score ranks nodes: prioritize (default: one of kube-scheduler's scores, at the "
        "extender's weight) or filter (only the nodes with the best device score are passed on)",
        "--device-scoring",
    ),
    FieldSpec("cluster.kubeconfig", "path", "kubeconfig", "kubeconfig file (cluster mode)", "--kubeconfig"),
    FieldSpec("cluster.context", "string", "context", "kubeconfig context", "--context"),
    FieldSpec("cluster.inCluster", "boolean", "in_cluster", "use the pod's service account", "--in-cluster"),
    FieldSpec(
        "cluster.schedulerNames",
        "strings",
        "scheduler_name",
        "kube-scheduler profiles served; only their pods' claims are released (default [dra-scheduler])",
        "--scheduler-name",
    ),
    FieldSpec(
        "cluster.schedulerLease",
        "string",
        "scheduler_lease",
        "namespace/name of the kube-scheduler's Lease: only the replica next to the leader binds and "
        "releases orphans",
        "--scheduler-lease",
    ),
    FieldSpec(
        "cluster.schedulerLeaseRetryPeriodSeconds",
        "number",
        "scheduler_lease_retry_seconds",
        "how often the Lease is read (default 2)",
    ),
    FieldSpec(
        "cluster.bindingTimeoutSeconds",
        "number",
        "binding_timeout",
        "how long a bind waits for binding conditions (default 600); httpTimeout must exceed it + 20 s",
        "--binding-timeout",
        "binding_timeout_seconds",
    ),
    FieldSpec(
        "cluster.orphanGracePeriodSeconds",
        "number",
        "orphan_grace_period",
        "release an allocation whose pod is still unbound after this long (default 300)",
        "--orphan-grace-period",
        "orphan_grace_period_seconds",
    ),
    FieldSpec(
        "cluster.bindTimeoutSeconds",
        "number",
        "bind_timeout_seconds",
        "budget of one bind's writes (default 20)",
    ),
    FieldSpec(
        "cluster.bindingPollSeconds",
        "number",
        "binding_poll_seconds",
        "re-read interval while waiting (default 5)",
    ),
    FieldSpec(
        "cluster.connectTimeoutSeconds",
        "number",
        "connect_timeout_seconds",
        "API server connect timeout (default 5)",
    ),
    FieldSpec(
        "cluster.requestTimeoutSeconds",
        "number",
        "request_timeout_seconds",
        "one API request's timeout (default 10)",
    ),
    FieldSpec(
        "cluster.watchTimeoutSeconds",
        "integer",
        "watch_timeout_seconds",
        "server-side watch timeout, at most one day (default 300)",
    ),
    FieldSpec(
        "cluster.watchIdleSeconds",
        "number",
        "watch_idle_seconds",
        "a watch silent this long is replaced (default 90)",
    ),
    FieldSpec(
        "cluster.listPageSize",
        "integer",
        "list_page_size",
        "objects per list page, at most 10,000 (default 500)",
    ),
    FieldSpec(
        "cluster.backoffInitialSeconds", "number", "backoff_initial_seconds", "first retry wait (default 0.5)"
    ),
    FieldSpec(
        "cluster.backoffMaxSeconds", "number", "backoff_max_seconds", "longest retry wait (default 30)"
    ),
    FieldSpec("cluster.backoffJitter", "number", "backoff_jitter", "retry wait jitter, 0..1 (default 0.2)"),
    FieldSpec(
        "cluster.orphanCheckIntervalSeconds",
        "number",
        "orphan_check_interval_seconds",
        "orphan scan interval (default 30)",
    ),
    FieldSpec(
        "cluster.reservationTtlSeconds",
        "number",
        "reservation_ttl_seconds",
        "an unconfirmed write's reservation is dropped after this long (default 600)",
    ),
    FieldSpec(
        "cluster.kubeAPIQPS",
        "number",
        "kube_api_qps",
        "API requests a second, as kube-scheduler's clientConnection.qps (default 50)",
        "--kube-api-qps",
        "api_qps",
    ),
    FieldSpec(
        "cluster.kubeAPIBurst",
        "integer",
        "kube_api_burst",
        "API requests at once above kubeAPIQPS, as clientConnection.burst (default 100)",
        "--kube-api-burst",
        "api_burst",
    ),
    FieldSpec(
        "cluster.requeueDelaySeconds",
        "number",
        "requeue_delay_seconds",
        "events gathered this long before rejected pods are signalled (default 0.2)",
    ),
    FieldSpec("cluster.requeueQPS", "number", "requeue_qps", "requeue signals a second (default 20)"),
    FieldSpec("cluster.requeueBurst", "integer", "requeue_burst", "requeue signals at once (default 100)"),
    FieldSpec(
        "cluster.requeueMaxPods",
        "integer",
        "requeue_max_pods",
        "rejected pods remembered for requeue signals (default 10,000)",
    ),
    FieldSpec(
        "cluster.preemptionEvictionsPerMinute",
        "integer",
        "preemption_evictions_per_minute",
        "pods the extender's own preemption evicts per minute at most; 0 turns it off (default 30)",
        "--preemption-evictions-per-minute",
    ),
    FieldSpec(
        "cluster.preemptionHoldSeconds",
        "number",
        "preemption_hold_seconds",
        "freed devices kept for the preemptor this long after its victims' grace period (default 60)",
    ),
    FieldSpec(
        "cluster.prioritizeHoldSeconds",
        "number",
        "prioritize_hold_seconds",
        "the best-scored node's devices held for the pod's bind at most this long; 0 turns holds off "
        "(default 5)",
    ),
)


PATH_FIELDS = tuple(spec for spec in FIELDS if spec.kind == "path")
"""The fields that name a file (``app.config.files`` checks it can be used)."""


def _typed(spec: FieldSpec, value: Any) -> Any:
    """The option value for ``value``. Raises ValueError (without the path; the caller adds it)."""
    kind = spec.kind
    if kind.startswith("one of "):
        choices = kind.removeprefix("one of ").split("|")
        if value not in choices:
            raise ValueError(f"must be {kind.replace('|', ', ')}, got {value!r}")
        return value
    if kind in ("string", "path"):
        if not isinstance(value, str) or not value:
            raise ValueError(f"must be a non-empty string, got {value!r}")
        return Path(value) if kind == "path" else value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {value!r}")
        return value
    if kind in ("integer", "number"):
        numeric = isinstance(value, int) if kind == "integer" else isinstance(value, int | float)
        if isinstance(value, bool) or not numeric:
            raise ValueError(f"must be a{'n integer' if kind == 'integer' else ' number'}, got {value!r}")
        problem = RANGES[spec.setting or spec.dest].problem(value)
        if problem:
            raise ValueError(problem)
        return value
    if kind == "strings":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"must be a list of names, got {value!r}")
        return ",".join(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping, got {type(value).__name__}")
    if kind == "gates":
        if not all(isinstance(v, bool) for v in value.values()):
            raise ValueError("every gate must be true or false")
        return parse_feature_gates(",".join(f"{k}={str(v).lower()}" for k, v in value.items()))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()):
        raise ValueError("every weight must be a number")
    weights = parse_weights(",".join(f"{k}={v}" for k, v in value.items()))
    ScoringConfig(weights=weights)  # raises ValueError for weights it refuses
    return weights


_BY_SECTION: dict[str, dict[str, FieldSpec]] = {
    section: {s.path.partition(".")[2]: s for s in FIELDS if s.path.startswith(section + ".")}
    for section in SECTIONS
}


def parse_sections(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per section, option dest -> value of the fields set. Raises ValueError naming the field's path
    (``cluster.bindingTimeoutSeconds: must be a number, got 'x'``; an unknown field lists the known ones)."""
    values: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        raw = document.get(section)
        if raw is None:
            continue
        if not isinstance(raw, Mapping):
            raise ValueError(f"{section}: must be a mapping, got {type(raw).__name__}")
        known = _BY_SECTION[section]
        values[section] = {}
        for name, value in raw.items():
            spec = known.get(str(name))
            if spec is None:
                raise ValueError(f"{section}.{name}: unknown field (known: {', '.join(sorted(known))})")
            try:
                values[section][spec.dest] = _typed(spec, value)
            except ValueError as e:
                raise ValueError(f"{spec.path}: {e}") from None
    return values
