"""Command line: ``dra-extender serve`` and ``dra-extender simulate`` (also ``python -m app``).

``serve --state DIR``: load the state, print a banner to stderr, serve the extender with uvicorn (one
worker: the cluster state lives in this process).

``serve --kubeconfig PATH`` / ``serve --in-cluster`` / ``serve`` with ``$KUBECONFIG`` set (cluster mode,
``app.kube``): list+watch the API server and write binds to it; ``/readyz`` is 503 until every informer
has synced. ``--ssl-certfile``/``--ssl-keyfile`` serve HTTPS, ``--ssl-ca-certs`` also requires client
certificates.

``simulate --state DIR``: schedule every pending pod of the state offline, one at a time, and print one
JSON document to stdout (see ``simulate``); ``-o yaml`` the same in YAML, ``-o table`` tables instead
(``app.cli.explain``).

``--version`` prints the installed package's version.

``explain --state DIR ns/pod | claim.yaml``: why a pod (or a what-if claim) fits or not on each node
(``app.cli.explain``): a summary by default, ``--node`` / ``--all`` in full.

``simulate`` and ``explain`` read a live cluster instead of ``--state`` with ``--kubeconfig`` /
``--context`` (``app.kube.snapshot``: a read-only list of every kind they need).

``validate [--state DIR] [--config FILE]``: check them without serving (``app.cli.validate``).

``completion bash|zsh|tcsh|fish|powershell``: the shell completion script (shtab, from this parser).

``serve``, ``simulate`` and ``explain`` take ``--device-selection aligned|first-fit`` (default aligned),
``--scoring-policy binpack|spread`` and ``--score-weights`` (``app.config.settings.SchedulingSettings``).

Exit codes: 0 when the command ran (pods may stay pending), 2 on unusable input (missing directory,
invalid manifests or DRA objects, bad flags, an unknown ``--nodes`` name, a port in use, a cluster that
cannot be read; with ``--strict`` also unknown fields and DeviceClass CEL that does not compile) with the
message on stderr. Warnings (unknown fields, such CEL, a state without objects) go to stderr too. Ctrl-C:
130 (``app.cli.run``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import orjson
import shtab

from allocator.errors import AllocatorError
from allocator.features import FeatureGates, parse_feature_gates
from allocator.scoring import SCORING_POLICIES, ScoringConfig, parse_weights
from allocator.selectors import SelectorCache
from app.cli.explain import (
    add_explain_parser,
    add_output_flag,
    positive_int,
    render_simulation,
    render_simulation_summary,
    run_explain,
    write_document,
)
from app.cli.progress import progress_bar
from app.cli.runtime import (
    Runtime,
    StartupError,
    build_runtime,
    install_config,
    new_engine,
    runtime_from_objects,
    state_summary,
    watch_config,
)
from app.cli.validate import add_validate_parser, run_validate
from app.config.derivedconfig import ConfigError, load_config
from app.config.extenderconfig import COMMAND_SECTIONS, FIELDS
from app.config.logs import LOG_FORMATS
from app.config.logs import configure as configure_logging
from app.config.settings import (
    CEL_ENGINES,
    DEFAULT_MAX_BODY_BYTES,
    DEVICE_SELECTION_POLICIES,
    LOG_LEVELS,
    ClusterSettings,
    SchedulingSettings,
    ServerSettings,
    Settings,
)
from app.http.metrics import Metrics
from app.http.probes import ProbeListener
from app.scheduling.binder import BindError
from app.scheduling.extended import missing_extended_resources
from app.scheduling.service import FilterOutcome, SchedulingService
from app.state.podclaims import claim_names
from app.state.statedir import ClusterObjects

__all__ = ["choose_node", "main", "parse_args", "simulate"]

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_USAGE = 2

_T = TypeVar("_T")


# --- simulate ---------------------------------------------------------------------------------------------


def _claims(service: SchedulingService, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{"name", "allocation"}]`` for the pod's existing claims; allocation in API shape or None.

    ``allocationTimestamp`` is left out: it is wall-clock time, and equal inputs must give equal output.
    """
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    result = []
    for name in claim_names(pod):
        claim = service.state.get("ResourceClaim", f"{namespace}/{name}")
        if claim is None:
            continue
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            allocation = {k: v for k, v in allocation.items() if k != "allocationTimestamp"}
        result.append({"name": name, "allocation": allocation or None})
    return result


def choose_node(service: SchedulingService, pod: Mapping[str, Any], passed: list[str]) -> str:
    """The node kube-scheduler would pick from the extender's view: prioritize only with more than one node
    (as kube-scheduler), highest score, ties to the first node in candidate order."""
    if len(passed) == 1:
        return passed[0]
    scores = service.prioritize(pod, passed)
    return passed[max(range(len(passed)), key=scores.__getitem__)]  # max keeps the first of equals


def _missing_extended_resources(
    service: SchedulingService, pod: Mapping[str, Any], candidates: list[str]
) -> dict[str, str]:
    """node → NodeResourcesFit-style reason for the candidates missing a requested extended resource."""
    state = service.state
    classes = state.objects["DeviceClass"].values()
    try:
        # What a node without any allocatable misses, every node lacking it may miss; nothing: no node.
        if not missing_extended_resources(pod, None, classes, state.gates):
            return {}
        missing = {
            n: missing_extended_resources(pod, state.get("Node", n), classes, state.gates) for n in candidates
        }
    except AllocatorError:
        return {}  # a malformed quantity: filter reports it as the pod's error
    return {
        n: "Insufficient " + ", ".join(names) + " (not in node allocatable and no DeviceClass backs it)"
        for n, names in missing.items()
        if names
    }


def _schedule(
    service: SchedulingService, pod: Mapping[str, Any], candidates: list[str], order: Mapping[str, int]
) -> dict[str, Any]:
    """One pod through filter → prioritize → bind; ``order``: candidate → position (reasons in order)."""
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", str(meta.get("name"))
    # kube-scheduler's NodeResourcesFit runs before the extender: nodes lacking an extended resource
    # that no DeviceClass backs never reach filter (and with no node left, filter is not called).
    misfit = _missing_extended_resources(service, pod, candidates)
    fitting = [node for node in candidates if node not in misfit] if misfit else candidates
    outcome = service.filter(pod, fitting) if fitting else FilterOutcome()
    failed = {**misfit, **outcome.failed, **outcome.unresolvable}  # unresolvable wins (kube-scheduler)
    reasons = dict(sorted(failed.items(), key=lambda item: order[item[0]]))
    node, error = None, outcome.error or None
    if error is None and outcome.passed:
        chosen = choose_node(service, pod, outcome.passed)
        try:
            service.bind(namespace, name, str(meta.get("uid") or ""), chosen)
            node = chosen
        except (BindError, AllocatorError) as e:
            error = str(e)
    current = service.state.get("Pod", f"{namespace}/{name}") or pod
    return {
        "namespace": namespace,
        "name": name,
        "node": node,
        "claims": _claims(service, current),
        "reasons": reasons,
        "error": error,
    }


def simulate(
    service: SchedulingService,
    candidates: Sequence[str] | None = None,
    advance: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Schedule every pending pod, as kube-scheduler would call the extender, and bind it (in memory).

    Pods in ``ClusterState.pending_pods()`` order (creationTimestamp, then namespace/name); each goes
    through ``filter`` on ``candidates`` (default: all node names, sorted) → ``prioritize`` (only with more
    than one passing node) → ``bind`` on the best node (ties: first in candidate order). Returns::

        {"pods": [{"namespace", "name", "node": str | None,
                   "claims": [{"name": <ResourceClaim>, "allocation": <status.allocation> | None}],
                   "reasons": {<node>: <why not>},    # FailedNodes + FailedAndUnresolvableNodes
                   "error": str | None}]}             # filter Error (fatal) or the bind error

    ``advance`` is called after each pod (a progress bar).
    """
    names = list(candidates) if candidates is not None else sorted(service.state.objects["Node"])
    order = {name: i for i, name in enumerate(dict.fromkeys(names))}
    placements = []
    for pod in service.state.pending_pods():
        placements.append(_schedule(service, pod, names, order))
        advance()
    return {"pods": placements}


# --- argument parsing -------------------------------------------------------------------------------------


def _feature_gates(text: str) -> FeatureGates:
    try:
        return parse_feature_gates(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _node_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected node names separated by commas")
    return names


def _score_weights(text: str) -> dict[str, float]:
    try:
        return parse_weights(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _policy_flags(sub: argparse.ArgumentParser) -> None:
    """Device selection and scoring (``allocator.alignment``, ``allocator.scoring``)."""
    sub.add_argument(
        "--device-selection",
        choices=DEVICE_SELECTION_POLICIES,
        default="aligned",
        help="devices chosen on a node: aligned (default: one PCIe root / NUMA node, tightest group) "
        "or first-fit (upstream's order, the devices kube-scheduler would pick)",
    )
    sub.add_argument(
        "--scoring-policy",
        choices=SCORING_POLICIES,
        default="binpack",
        help="prioritize: binpack (default) prefers nodes the pod fills; spread prefers emptier nodes",
    )
    sub.add_argument(
        "--score-weights",
        type=_score_weights,
        default=None,
        metavar="numa=3,pcie=2,packing=2,intact=1,prioritized=8",
        help="weights of the score components (the defaults shown; a subset keeps the others)",
    )


def _parser(config_defaults: Mapping[str, Mapping[str, Any]] | None = None) -> argparse.ArgumentParser:
    """The command line; ``config_defaults``: per command, option defaults from the config file (flags
    override them)."""
    parser = argparse.ArgumentParser(
        prog="dra-extender", description="kube-scheduler extender allocating DRA devices"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('dra-extender')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sub: argparse.ArgumentParser, state_required: bool = True) -> None:
        sub.add_argument(
            "--state",
            required=state_required,
            type=Path,
            metavar="DIR",
            help="directory (or file) of Kubernetes manifests to load",
        )
        sub.add_argument(
            "--feature-gates",
            type=_feature_gates,
            default=FeatureGates(),
            metavar="A=true,B=false",
            help="DRA feature gates by upstream name (default: Kubernetes 1.37 defaults)",
        )
        sub.add_argument(
            "--cel-engine",
            choices=CEL_ENGINES,
            default="cel-expr",
            help="CEL engine for selectors and derived attributes (default cel-expr)",
        )
        sub.add_argument(
            "--config",
            type=Path,
            metavar="FILE",
            help="ExtenderConfiguration file: settings (flags override them; read at start) and cluster-wide "
            "derivedAttributes (serve reloads those when the file changes)",
        )
        sub.add_argument(
            "--strict",
            action="store_true",
            help="unknown fields in the state and DeviceClass selectors that do not compile are errors "
            "(exit 2), not warnings",
        )

    serve = commands.add_parser("serve", help="serve filter/prioritize/bind over HTTP")
    common(serve, state_required=False)
    defaults = ServerSettings()
    serve.add_argument("--host", default=defaults.host, help=f"interface (default {defaults.host})")
    serve.add_argument("--port", type=int, default=defaults.port, help=f"TCP port (default {defaults.port})")
    serve.add_argument("--log-level", choices=LOG_LEVELS, default=defaults.log_level)
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=defaults.log_format,
        help=f"text or json (klog-style keys), for the extender and uvicorn (default {defaults.log_format})",
    )
    serve.add_argument(
        "--metrics-bind-address",
        metavar="HOST:PORT",
        help="also serve /metrics alone on this address (e.g. 0.0.0.0:9090 for Prometheus; default: none)",
    )
    serve.add_argument(
        "--health-probe-bind-address",
        metavar="HOST:PORT",
        help="also answer /livez, /healthz and /readyz on this address from a process of their own, fast "
        "while the extender is busy (e.g. 127.0.0.1:8081 for the kubelet's probes; default: none)",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"largest request body in bytes (default {DEFAULT_MAX_BODY_BYTES})",
    )
    _cluster_flags(serve)

    sim = commands.add_parser("simulate", help="schedule the pending pods offline")
    common(sim, state_required=False)
    _snapshot_flags(sim)
    sim.add_argument(
        "--nodes",
        type=_node_list,
        metavar="n1,n2",
        help="candidate nodes in this order (default: every node, sorted by name)",
    )
    add_output_flag(sim, "json")
    for sub in (serve, sim):
        _policy_flags(sub)

    def explain_common(sub: argparse.ArgumentParser) -> None:
        common(sub, state_required=False)
        _snapshot_flags(sub)

    add_explain_parser(commands, explain_common, _policy_flags)
    add_validate_parser(commands, common)
    sim.epilog = (
        "Exit status: 0 when it ran (pods may stay pending), 2 on unusable input (message on stderr)."
    )
    for name, values in (config_defaults or {}).items():
        commands.choices[name].set_defaults(**values)
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print the completion script for SHELL, e.g. `source <(dra-extender completion bash)` "
        "or, for zsh, save it as _dra-extender in a directory of $fpath.",
    )
    completion.add_argument("shell", choices=shtab.SUPPORTED_SHELLS, metavar="SHELL", help="bash, zsh, ...")
    _complete_paths(parser)
    return parser


def _complete_paths(parser: argparse.ArgumentParser) -> None:
    """Flags taking a ``Path`` complete file names (shtab reads ``action.complete``)."""
    for action in parser._actions:
        if action.type is Path:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        for sub in (action.choices or {}).values() if isinstance(action.choices, dict) else ():
            _complete_paths(sub)


# --- commands ---------------------------------------------------------------------------------------------


def _banner(
    settings: Settings,
    summary: Mapping[str, int],
    example_pod: Mapping[str, Any] | None,
    example_node: str | None,
    node_names: Sequence[str] = (),
) -> str:
    url = _url(settings.server)
    lines = [
        f"dra-extender: state {settings.state_dir}: {summary['nodes']} nodes, {summary['resource_slices']} "
        f"ResourceSlices ({summary['devices']} devices), {summary['resource_claims']} ResourceClaims, "
        f"{summary['pending_pods']} pending pods",
        f"dra-extender: serving {url} (kube-scheduler urlPrefix: {url}/scheduler; API docs: {url}/docs)",
        "try:",
        f"  curl -s {url}/healthz",
    ]
    if example_pod is not None and example_node is not None:
        meta = example_pod.get("metadata") or {}
        # The fields the extender reads; kube-scheduler sends the whole Pod.
        pod = {
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta},
            "spec": {"resourceClaims": (example_pod.get("spec") or {}).get("resourceClaims") or []},
            "status": {
                "resourceClaimStatuses": (example_pod.get("status") or {}).get("resourceClaimStatuses") or []
            },
        }
        args = orjson.dumps({"Pod": pod, "NodeNames": list(node_names)}).decode()
        lines.append(
            f"  curl -s -XPOST {url}/scheduler/filter -H 'Content-Type: application/json' -d '{args}'"
        )
        bind = orjson.dumps(
            {
                "PodName": meta.get("name"),
                "PodNamespace": meta.get("namespace"),
                "PodUID": meta.get("uid") or "",
                "Node": example_node,
            }
        ).decode()
        lines.append(f"  curl -s -XPOST {url}/scheduler/bind -H 'Content-Type: application/json' -d '{bind}'")
    return "\n".join(lines)


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from the flags. Raises StartupError for a value the settings reject (e.g. port 0)."""
    try:
        weights = args.score_weights  # every command has the policy flags (_policy_flags)
        scoring = ScoringConfig(args.scoring_policy, **({"weights": weights} if weights else {}))
        scheduling = SchedulingSettings(
            args.feature_gates,
            args.device_selection,
            scoring=scoring,
            cel_engine=args.cel_engine,
            # set only by a config file (app.config.extenderconfig), like the cluster settings without a flag
            filter_time_budget_seconds=getattr(args, "filter_time_budget_seconds", None),
        )
        if args.command == "serve":
            server = ServerSettings(
                args.host,
                args.port,
                args.max_body_bytes,
                args.log_level,
                log_format=args.log_format,
                metrics_bind_address=args.metrics_bind_address,
                health_probe_bind_address=args.health_probe_bind_address,
                ssl_certfile=args.ssl_certfile,
                ssl_keyfile=args.ssl_keyfile,
                ssl_ca_certs=args.ssl_ca_certs,
                delegated_auth=args.delegated_auth,
                scheduler_user=args.scheduler_user,
            )
            return Settings(args.state, server, scheduling, config_file=args.config)
        return Settings(args.state, scheduling=scheduling, config_file=args.config)
    except ValueError as e:
        raise StartupError(str(e)) from e


def _bind_example(service: SchedulingService) -> tuple[Mapping[str, Any] | None, str | None]:
    """The first pending pod and a node it fits on (for the banner's bind example), or (None, None)."""
    pending = service.state.pending_pods()
    if not pending:
        return None, None
    passed = service.filter(pending[0], sorted(service.state.objects["Node"])).passed
    return (pending[0], passed[0]) if passed else (None, None)


MAX_PROBLEMS_SHOWN = 20
"""Warnings, and config problems (failed derived attributes), printed at startup; the rest are counted."""


def _print_limited(level: str, lines: Sequence[str], what: str) -> None:
    """The first ``MAX_PROBLEMS_SHOWN`` lines on stderr, then how many more there are."""
    for line in lines[:MAX_PROBLEMS_SHOWN]:
        print(f"dra-extender: {level}: {line}", file=sys.stderr)
    if len(lines) > MAX_PROBLEMS_SHOWN:
        print(
            f"dra-extender: {level}: ... and {len(lines) - MAX_PROBLEMS_SHOWN} more {what}", file=sys.stderr
        )


def _apply_policies(service: SchedulingService, scheduling: SchedulingSettings) -> None:
    """Device selection and scoring of the settings, on the service."""
    service.device_selection = scheduling.device_selection
    service.scoring = scheduling.scoring
    if scheduling.filter_time_budget_seconds is not None:
        service.filter_time_budget = scheduling.filter_time_budget_seconds


def _runtime(
    settings: Settings, strict_fields: bool = False, objects: ClusterObjects | None = None
) -> Runtime:
    """Build the runtime from the settings (the state directory, or ``objects`` of a cluster snapshot);
    print its warnings and the devices where a config attribute failed."""
    scheduling = settings.scheduling
    if objects is None:
        runtime = build_runtime(
            settings.state_dir,  # type: ignore[arg-type]
            scheduling.feature_gates,
            strict_fields=strict_fields,
            cel_engine=scheduling.cel_engine,
            config=settings.config_file,
        )
    else:
        runtime = runtime_from_objects(
            objects,
            Path("cluster"),
            scheduling.feature_gates,
            strict_fields=strict_fields,
            cel_engine=scheduling.cel_engine,
            config=settings.config_file,
        )
    _print_limited("warning", runtime.warnings, "warnings")
    _print_limited("error", runtime.problems, "derived attribute errors")
    _apply_policies(runtime.service, settings.scheduling)
    # The loaded state is long-lived: keep the cyclic collector from rescanning it on every full collection
    # (with 10^6 objects each one costs tens of ms on the request path).
    gc.collect()
    gc.freeze()
    return runtime


def _listen(server: ServerSettings) -> socket.socket:
    """The bound listening socket of ``serve``. Raises StartupError naming the address."""
    from app.http.server import listen

    try:
        return listen(server.host, server.port)
    except OSError as e:
        raise StartupError(f"cannot listen on {server.host}:{server.port}: {e.strerror or e}") from e


def _serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    _check_tls(settings.server)  # before the state loads: a bad file must not cost minutes, then a traceback
    configure_logging(settings.server.log_level, settings.server.log_format)
    cluster = _cluster_settings(args)
    if cluster is None and settings.server.delegated_auth:
        raise StartupError("--delegated-auth needs cluster mode: it asks the API server about callers")
    if cluster is not None:
        return _serve_cluster(dataclasses.replace(settings, state_dir=None, cluster=cluster))
    with _listen(settings.server) as sock:
        return _serve_state(settings, args.strict, sock)


def _serve_state(settings: Settings, strict_fields: bool, sock: socket.socket) -> int:
    """Load the state directory, print the banner and serve on ``sock``."""
    from app.http.api import create_app
    from app.http.server import serve, server_config

    runtime = _runtime(settings, strict_fields)
    for note in runtime.notes:
        log.debug("%s", note)
    example_pod, example_node = _bind_example(runtime.service)
    print(
        _banner(
            settings,
            state_summary(runtime.state),
            example_pod,
            example_node,
            sorted(runtime.state.objects["Node"]),
        ),
        file=sys.stderr,
        flush=True,
    )
    if runtime.watcher is not None:
        runtime.watcher.start()
    metrics = _serve_metrics(settings.server, Metrics(runtime.service))
    with _serve_probes(settings.server, lambda: True) as probes:
        # One worker: the cluster state and the in-flight allocations live in this process.
        serve(
            create_app(runtime.service, settings, metrics=metrics, heartbeat=probes),
            sock,
            host=settings.server.host,
            port=settings.server.port,
            log_level=settings.server.log_level,
            log_config=None,  # uvicorn's records go through the handler configure_logging installed
            workers=1,
            **server_config(),
            **_ssl_options(settings.server),
        )
    return EXIT_OK


# --- cluster mode (app.kube) ------------------------------------------------------------------------------


def _cluster_flags(serve: argparse.ArgumentParser) -> None:
    """``serve`` flags for cluster mode and TLS (``app.config.settings.ClusterSettings``,
    ``ServerSettings``)."""
    group = serve.add_argument_group("cluster mode (instead of --state; $KUBECONFIG is used when set)")
    group.add_argument("--kubeconfig", type=Path, metavar="PATH", help="kubeconfig file")
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default: current-context)")
    group.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    group.add_argument(
        "--scheduler-lease",
        metavar="NS/NAME",
        help="Lease of the kube-scheduler this extender is a sidecar of: only the replica next to the leader "
        "releases orphaned allocations",
    )
    names = ",".join(ClusterSettings().scheduler_names)
    group.add_argument(
        "--scheduler-name",
        metavar="NAME[,NAME]",
        default=names,
        help=f"kube-scheduler profiles configured with this extender (default {names}); only their pods' "
        "claims are released as orphans",
    )
    grace = ClusterSettings().orphan_grace_period_seconds
    group.add_argument(
        "--orphan-grace-period",
        type=float,
        default=grace,
        metavar="SECONDS",
        help=f"release an allocation whose pod is still unbound after this long (default {grace:g})",
    )
    wait = ClusterSettings().binding_timeout_seconds
    group.add_argument(
        "--binding-timeout",
        type=float,
        default=wait,
        metavar="SECONDS",
        help=f"how long a bind waits for devices' binding conditions (default {wait:g}, kube-scheduler's "
        "bindingTimeout); keep kube-scheduler's extender httpTimeout above it",
    )
    tls = serve.add_argument_group("TLS (kube-scheduler enableHTTPS / tlsConfig)")
    tls.add_argument("--ssl-certfile", type=Path, metavar="PEM", help="serve HTTPS with this certificate")
    tls.add_argument("--ssl-keyfile", type=Path, metavar="PEM", help="key of --ssl-certfile")
    tls.add_argument(
        "--ssl-ca-certs", type=Path, metavar="PEM", help="require client certificates from this CA"
    )
    auth = serve.add_argument_group("authentication (when listening beyond loopback; cluster mode)")
    auth.add_argument(
        "--delegated-auth",
        action="store_true",
        help="check callers with the API server (TokenReview / client certificate, SubjectAccessReview)",
    )
    user = ServerSettings().scheduler_user
    auth.add_argument(
        "--scheduler-user",
        default=user,
        metavar="USER",
        help=f"the only user allowed on /scheduler/* with --delegated-auth (default {user})",
    )


_CONFIG_ONLY_CLUSTER = tuple(
    spec.dest for spec in FIELDS if spec.path.startswith("cluster.") and not spec.flag
)
"""ClusterSettings fields only a config file sets (no flag): their option dest is the field name."""


def _cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
    """``ClusterSettings`` when ``serve`` runs in cluster mode, else None (``--state``). Raises StartupError
    when neither or both are asked for, or for a value the settings reject."""
    explicit = args.kubeconfig is not None or args.in_cluster
    if args.state is not None:
        if explicit:
            raise StartupError("--state and --kubeconfig/--in-cluster exclude each other")
        return None
    if not explicit and not os.environ.get("KUBECONFIG"):
        raise StartupError(
            "serve needs --state DIR, or a cluster: --kubeconfig PATH, --in-cluster or $KUBECONFIG"
        )
    try:
        return ClusterSettings(
            kubeconfig=args.kubeconfig,
            context=args.context,
            in_cluster=args.in_cluster,
            scheduler_lease=args.scheduler_lease,
            scheduler_names=tuple(n.strip() for n in args.scheduler_name.split(",") if n.strip()),
            orphan_grace_period_seconds=args.orphan_grace_period,
            binding_timeout_seconds=args.binding_timeout,
            **{name: getattr(args, name) for name in _CONFIG_ONLY_CLUSTER if hasattr(args, name)},
        )
    except ValueError as e:
        raise StartupError(str(e)) from e


@contextlib.contextmanager
def _serve_probes(server: ServerSettings, ready: Callable[[], bool]) -> Iterator[ProbeListener | None]:
    """The ``--health-probe-bind-address`` listener while the block runs, when asked for: the app's event
    loop must tick it. Raises StartupError when the address cannot be bound."""
    from app.http.server import listen

    if server.health_probe_bind_address is None:
        yield None
        return
    sock = _listen_on("--health-probe-bind-address", server.health_probe_bind_address, listen)
    with ProbeListener(sock, ready) as probes:
        yield probes


def _serve_metrics(server: ServerSettings, metrics: Metrics) -> Metrics:
    """Start the ``--metrics-bind-address`` listener (a daemon thread) when asked for; returns ``metrics``.
    Raises StartupError when the address cannot be bound."""
    if server.metrics_bind_address is not None:
        from prometheus_client import start_http_server

        _listen_on(
            "--metrics-bind-address",
            server.metrics_bind_address,
            lambda host, port: start_http_server(port, host, registry=metrics.registry),
        )
    return metrics


def _listen_on(flag: str, address: str, start: Callable[[str, int], _T]) -> _T:
    """``start(host, port)`` for a ``host:port`` flag value (IPv6 hosts in brackets); a bind failure is a
    StartupError naming the flag and the address."""
    host, _, port = address.rpartition(":")
    try:
        return start(host.strip("[]"), int(port))
    except OSError as e:
        raise StartupError(f"{flag} {address}: {e.strerror or e}") from e


def _url(server: ServerSettings) -> str:
    return f"{'https' if server.ssl_certfile else 'http'}://{server.host}:{server.port}"


def _check_tls(server: ServerSettings) -> None:
    """Load the TLS files as uvicorn will. Raises StartupError naming the flag and the file: unreadable,
    not PEM, or a key that does not belong to the certificate."""
    if server.ssl_certfile is None:
        return
    import ssl

    files = {
        "--ssl-certfile": server.ssl_certfile,
        "--ssl-keyfile": server.ssl_keyfile,
        "--ssl-ca-certs": server.ssl_ca_certs,
    }
    for flag, path in files.items():
        try:
            if path is not None:
                path.read_bytes()
        except OSError as e:
            raise StartupError(f"{flag} {path}: cannot read it: {e.strerror or e}") from e
    for flag in ("--ssl-certfile", "--ssl-ca-certs"):
        try:  # as a trust store: fails unless the file holds PEM certificates
            if files[flag] is not None:
                ssl.create_default_context(cafile=files[flag])
        except ssl.SSLError as e:
            raise StartupError(f"{flag} {files[flag]}: no PEM certificate in it ({e.reason or e})") from e
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            server.ssl_certfile, server.ssl_keyfile
        )
    except ssl.SSLError as e:
        raise StartupError(
            f"--ssl-keyfile {server.ssl_keyfile}: not a PEM private key of the certificate "
            f"{server.ssl_certfile} ({e.reason or e})"
        ) from e


def _ssl_options(server: ServerSettings) -> dict[str, Any]:
    """uvicorn's TLS arguments: HTTPS with a certificate, client certificates required with a CA."""
    if server.ssl_certfile is None:
        return {}
    import ssl

    options: dict[str, Any] = {
        "ssl_certfile": str(server.ssl_certfile),
        "ssl_keyfile": str(server.ssl_keyfile),
    }
    if server.ssl_ca_certs is not None:
        # With delegated authentication a bearer token identifies as well: certificates become optional.
        required = ssl.CERT_OPTIONAL if server.delegated_auth else ssl.CERT_REQUIRED
        options.update(ssl_ca_certs=str(server.ssl_ca_certs), ssl_cert_reqs=required)
    return options


def _serve_cluster(settings: Settings) -> int:
    """Cluster mode: the informers and the bind writes on their own thread, uvicorn on the main one."""
    from app.kube.runtime import ClusterRuntime

    assert settings.cluster is not None
    selectors = SelectorCache(new_engine(settings.scheduling.cel_engine))
    runtime = ClusterRuntime(settings.cluster, settings.scheduling.feature_gates, selectors=selectors)
    if settings.config_file is not None:  # cluster-wide derived attributes, before the first slice arrives
        install_config(settings.config_file, runtime.state, selectors)
    _apply_policies(runtime.service, settings.scheduling)
    with _listen(settings.server) as sock:
        return _run_cluster(settings, runtime, sock)


def _run_cluster(settings: Settings, runtime: Any, sock: socket.socket) -> int:
    """Start the informers (``runtime``: an ``app.kube.runtime.ClusterRuntime``) and serve on ``sock``."""
    from app.http.api import create_app
    from app.http.auth import DelegatedAuth
    from app.http.server import serve, server_config
    from app.kube.runtime import BackgroundRuntime

    if settings.config_file is not None:
        watch_config(settings.config_file, runtime.service).start()  # re-derive on change, as offline
    background = BackgroundRuntime(runtime)
    try:
        background.start()
    except Exception as e:  # kubeconfig or service account missing or unreadable
        raise StartupError(f"cannot load the Kubernetes client configuration: {e}") from e
    server = settings.server
    url = _url(server)
    print(
        f"dra-extender: cluster mode, API server {runtime.client.host}; serving {url} (kube-scheduler "
        f"urlPrefix: {url}/scheduler); ready (/readyz) once every informer has synced",
        file=sys.stderr,
        flush=True,
    )
    auth = None
    if server.delegated_auth:
        auth = DelegatedAuth(_reviewer(background), server.scheduler_user)
    try:
        with _serve_probes(server, runtime.ready) as probes:
            serve(
                create_app(
                    runtime.service,
                    settings,
                    ready=runtime.ready,
                    auth=auth,
                    metrics=_serve_metrics(server, Metrics(runtime.service, runtime.informers)),
                    heartbeat=probes,
                ),
                sock,
                host=server.host,
                port=server.port,
                log_level=server.log_level,
                log_config=None,
                workers=1,
                **server_config(),
                **_ssl_options(server),
            )
    finally:
        background.stop()
    return EXIT_OK


def _reviewer(background: Any) -> Any:
    """``app.http.auth.Review`` through the cluster runtime's client, on its event loop (its own thread)."""
    from app.kube.client import review as kube_review

    async def review(plural: str, body: dict[str, Any]) -> Any:
        coroutine = kube_review(background.runtime.client, plural, body)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, background.loop))

    return review


def _snapshot_flags(sub: argparse.ArgumentParser) -> None:
    """``simulate`` / ``explain`` on a live cluster instead of ``--state`` (``app.kube.snapshot``)."""
    group = sub.add_argument_group("a live cluster instead of --state (read-only: lists, never writes)")
    group.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)",
    )
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default: current-context)")


def _offline(args: argparse.Namespace) -> Runtime:
    """The runtime of ``simulate`` and ``explain``: the state directory, or a snapshot of the live cluster
    with ``--kubeconfig`` / ``--context``. No kube-scheduler waits for their answers, so every node is
    decided (filter's time budget is for the HTTP path). Raises StartupError."""
    settings = _settings(args)
    live = args.kubeconfig is not None or args.context is not None
    if live == (args.state is not None):
        raise StartupError(
            "--state and --kubeconfig/--context exclude each other"
            if live
            else f"{args.command} needs --state DIR, or a live cluster: --kubeconfig PATH, --context NAME"
        )
    objects = None
    if live:
        from app.kube.snapshot import SnapshotError, take_snapshot

        try:
            objects = take_snapshot(args.kubeconfig, args.context, strict_fields=args.strict)
        except SnapshotError as e:
            raise StartupError(str(e)) from e
    runtime = _runtime(settings, args.strict, objects)
    runtime.service.filter_time_budget = math.inf
    return runtime


def _simulate(args: argparse.Namespace) -> int:
    runtime = _offline(args)
    for note in runtime.notes:
        log.debug("%s", note)
    unknown = [name for name in args.nodes or () if name not in runtime.state.objects["Node"]]
    if unknown:
        raise StartupError(f"--nodes: no such node in the state: {', '.join(unknown)}")
    pending = len(runtime.state.pending_pods())
    with progress_bar(pending, f"scheduling {pending} pending pod(s)") as advance:
        document = simulate(runtime.service, args.nodes, advance)
    if args.output == "table":
        render_simulation(document, runtime.service, sys.stdout)
    else:
        write_document(document, args.output, sys.stdout)
        if sys.stderr.isatty():  # an operator watching: the summary beside the document
            render_simulation_summary(document, runtime.service, sys.stderr)
    sys.stdout.flush()
    return EXIT_OK


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options, with a ``--config`` file's settings as the defaults of the command's flags (a flag
    given on the command line wins). Raises SystemExit (argparse) or StartupError (unusable config)."""
    args = _parser().parse_args(argv)
    if args.command not in COMMAND_SECTIONS or args.config is None:
        return args
    try:
        config = load_config(args.config)
    except ConfigError as e:
        raise StartupError(str(e)) from e
    return _parser({args.command: config.defaults_for(args.command)}).parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ran, 2 unusable input or bad flags)."""
    try:
        args = parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), message already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    except StartupError as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "completion":
            print(shtab.complete(_parser(), shell=args.shell))
            return EXIT_OK
        if args.command == "validate":
            return run_validate(args)
        if args.command == "explain":
            return run_explain(args, _offline(args).service)
        return _serve(args) if args.command == "serve" else _simulate(args)
    except StartupError as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return EXIT_USAGE
