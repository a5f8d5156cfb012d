"""The command line's flags and the settings they make (``app.config.settings``).

``parser(config_defaults)`` builds every command's flags, with a ``--config`` file's settings as the
defaults (a flag given wins); ``settings_from_args`` and ``cluster_settings`` turn the parsed flags into
``Settings`` / ``ClusterSettings``, raising StartupError naming the flag for a value they reject.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import shtab

from allocator.decide import FILTER_TIMEOUT
from allocator.features import FeatureGates, parse_feature_gates
from allocator.scoring import SCORING_POLICIES, ScoringConfig, parse_weights
from app.cli.explain import add_explain_parser
from app.cli.output import add_output_flag, positive_int
from app.cli.runtime import StartupError
from app.cli.validate import add_validate_parser
from app.config.buildinfo import version_text
from app.config.extenderconfig import FIELDS
from app.config.logs import LOG_FORMATS
from app.config.settings import (
    CEL_ENGINES,
    DEFAULT_MAX_BODY_BYTES,
    DEVICE_SCORING,
    DEVICE_SELECTION_POLICIES,
    LOG_LEVELS,
    MAX_BODY_BYTES,
    ClusterSettings,
    SchedulingSettings,
    ServerSettings,
    Settings,
)

__all__ = ["cluster_settings", "parser", "settings_from_args"]


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


class _VersionAction(argparse.Action):
    """``--version``: ``app.config.buildinfo.version_text``, computed only when asked for (it may run
    git)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version_text(), file=sys.stdout)
        parser.exit()


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


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: an argument it does not know is refused with the command's usage (argparse
    leaves it to the top level, whose usage lists no flag of the command), and no flag may be abbreviated
    (``--stat`` is a typo, not ``--state``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def parser(config_defaults: Mapping[str, Mapping[str, Any]] | None = None) -> argparse.ArgumentParser:
    """The command line; ``config_defaults``: per command, option defaults from the config file (flags
    override them)."""
    parser = argparse.ArgumentParser(
        prog="dra-extender", description="kube-scheduler extender allocating DRA devices", allow_abbrev=False
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version, Python, the Kubernetes API supported and the git commit, and exit",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser
    )

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
            help="ExtenderConfiguration file: settings (flags override them) and cluster-wide "
            "derivedAttributes; serve applies a changed file (what needs a restart is logged)",
        )
        sub.add_argument(
            "--strict",
            action="store_true",
            help="a problem in the state (what validate lists: unknown fields or kinds, CEL selectors that "
            "do not compile, pod claims whose ResourceClaim or template is missing, manifest entries that "
            "are not regular files, no object at all) is an error naming the first (exit 2), not a warning; "
            "validate lists every problem either way (exit 1). What-if files are always strict",
        )

    serve = commands.add_parser("serve", help="serve filter/prioritize/bind over HTTP")
    common(serve, state_required=False)
    defaults = ServerSettings()
    serve.add_argument("--host", default=defaults.host, help=f"interface (default {defaults.host})")
    serve.add_argument("--port", type=int, default=defaults.port, help=f"TCP port (default {defaults.port})")
    serve.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=defaults.log_level,
        help=f"log level (default {defaults.log_level}); -v 1 or more means debug",
    )
    serve.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=int,
        default=defaults.verbosity,
        metavar="N",
        help="klog-style verbosity: 0 (default) logs at --log-level, 1 or more at debug (the more verbose "
        "of the two wins)",
    )
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
        help=f"largest request body in bytes (default {DEFAULT_MAX_BODY_BYTES}, at most {MAX_BODY_BYTES})",
    )
    serve.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        default=0,
        metavar="P",
        help="filter passes on as many of the nodes that fit as kube-scheduler would score with "
        "percentageOfNodesToScore P, P %% of all nodes (default 0: adaptive; 100: every node that fits)",
    )
    serve.add_argument(
        "--scheduler-percentage-of-nodes-to-score",
        type=int,
        default=100,
        metavar="P",
        help="kube-scheduler's own percentageOfNodesToScore (default 100: it filters every node). Below "
        "100 (0: adaptive) it asks about a sample of the nodes: a pod rejected on its whole sample while "
        "another node has the devices is requeued at once, with no preemption for devices",
    )
    serve.add_argument(
        "--device-scoring",
        choices=DEVICE_SCORING,
        default="prioritize",
        help="where the device score ranks nodes: prioritize (default: one of kube-scheduler's scores, at "
        "the extender's weight) or filter (filter passes on only the nodes with the best device score; "
        "kube-scheduler's configuration leaves prioritizeVerb out)",
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
            # shtab's documented hook: an attribute argparse's Action does not declare.
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        for sub in (action.choices or {}).values() if isinstance(action.choices, dict) else ():
            _complete_paths(sub)


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
        "binds and releases orphaned allocations",
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
    defaults = ClusterSettings()
    group.add_argument(
        "--kube-api-qps",
        type=float,
        default=defaults.api_qps,
        metavar="QPS",
        help="API requests a second, as kube-scheduler's clientConnection.qps "
        f"(default {defaults.api_qps:g}); raise both together",
    )
    group.add_argument(
        "--kube-api-burst",
        type=int,
        default=defaults.api_burst,
        metavar="N",
        help=f"API requests at once above --kube-api-qps (default {defaults.api_burst})",
    )
    group.add_argument(
        "--preemption-evictions-per-minute",
        type=int,
        default=defaults.preemption_evictions_per_minute,
        metavar="N",
        help="pods the extender's own preemption (pods short only of devices) evicts per minute at most; "
        f"0 turns it off (default {defaults.preemption_evictions_per_minute})",
    )
    tls = serve.add_argument_group("TLS (kube-scheduler enableHTTPS / tlsConfig)")
    tls.add_argument("--ssl-certfile", type=Path, metavar="PEM", help="serve HTTPS with this certificate")
    tls.add_argument("--ssl-keyfile", type=Path, metavar="PEM", help="key of --ssl-certfile")
    tls.add_argument(
        "--ssl-ca-certs", type=Path, metavar="PEM", help="require client certificates from this CA"
    )
    webhook = serve.add_argument_group("admission webhook (one allocator per DRA pod; docs/webhook.md)")
    webhook.add_argument(
        "--webhook-bind-address",
        metavar="HOST:PORT",
        help="serve the admission webhook over HTTPS on this address (default: none)",
    )
    webhook.add_argument("--webhook-certfile", type=Path, metavar="PEM", help="the webhook's certificate")
    webhook.add_argument("--webhook-keyfile", type=Path, metavar="PEM", help="key of --webhook-certfile")
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


def settings_from_args(args: argparse.Namespace) -> Settings:
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
            filter_timeout_seconds=getattr(args, "filter_timeout_seconds", FILTER_TIMEOUT),
            percentage_of_nodes_to_score=getattr(args, "percentage_of_nodes_to_score", 0),
            scheduler_percentage_of_nodes_to_score=getattr(
                args, "scheduler_percentage_of_nodes_to_score", 100
            ),
            device_scoring=getattr(args, "device_scoring", "prioritize"),
        )
        if args.command == "serve":
            server = ServerSettings(
                args.host,
                args.port,
                args.max_body_bytes,
                args.log_level,
                verbosity=args.verbosity,
                log_format=args.log_format,
                metrics_bind_address=args.metrics_bind_address,
                health_probe_bind_address=args.health_probe_bind_address,
                ssl_certfile=args.ssl_certfile,
                ssl_keyfile=args.ssl_keyfile,
                ssl_ca_certs=args.ssl_ca_certs,
                webhook_bind_address=args.webhook_bind_address,
                webhook_certfile=args.webhook_certfile,
                webhook_keyfile=args.webhook_keyfile,
                delegated_auth=args.delegated_auth,
                scheduler_user=args.scheduler_user,
            )
            return Settings(args.state, server, scheduling, config_file=args.config)
        return Settings(args.state, scheduling=scheduling, config_file=args.config)
    except ValueError as e:
        raise StartupError(str(e)) from e


def cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
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
            api_qps=args.kube_api_qps,
            api_burst=args.kube_api_burst,
            preemption_evictions_per_minute=args.preemption_evictions_per_minute,
            **{name: getattr(args, name) for name in _CONFIG_ONLY_CLUSTER if hasattr(args, name)},
        )
    except ValueError as e:
        raise StartupError(str(e)) from e
