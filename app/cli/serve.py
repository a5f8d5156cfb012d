"""``dra-extender serve``: the extender on a state directory, or on a live cluster (cluster mode).

``serve --state DIR``: load the state, print a banner to stderr, serve the extender with uvicorn (one
worker: the cluster state lives in this process). ``serve --kubeconfig PATH`` / ``--in-cluster`` /
``$KUBECONFIG`` (``app.kube``): list+watch the API server and write binds to it; ``/readyz`` is 503 until
every informer has synced. The port is bound before the state loads, the files the options name (TLS,
kubeconfig: ``app.config.files``) are checked before anything else (``--ssl-certfile`` / ``--ssl-keyfile``
serve HTTPS, ``--ssl-ca-certs`` also requires client certificates); the metrics and probe listeners
(``--metrics-bind-address``, ``--health-probe-bind-address``) share one binder that names the flag when
an address cannot be bound, and so does the admission webhook's HTTPS listener (``--webhook-bind-address``,
``app.http.webhook``) on a thread of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from allocator.selectors import SelectorCache
from app.cli.flags import cluster_settings, settings_from_args
from app.cli.reload import config_watcher
from app.cli.runtime import (
    EXIT_OK,
    StartupError,
    apply_policies,
    freeze_long_lived,
    install_config,
    load_runtime,
    new_engine,
    state_summary,
)
from app.config.derivedconfig import ConfigError, ConfigWatcher, load_config
from app.config.extenderconfig import PATH_FIELDS
from app.config.files import file_problems
from app.config.logs import configure as configure_logging
from app.config.settings import ClusterSettings, ServerSettings, Settings
from app.http.metrics import ConfigReloadCollector, Metrics
from app.http.probes import ProbeListener
from app.scheduling.prioritizeholds import sweeping_late_holds
from app.scheduling.service import SchedulingService

__all__ = ["run_serve"]


log = logging.getLogger(__name__)

_T = TypeVar("_T")


def _scoring_note(settings: Settings) -> str:
    """The startup line's word on device scoring in filter, which kube-scheduler's configuration must
    match (no ``prioritizeVerb``); nothing for the default."""
    if settings.scheduling.device_scoring != "filter":
        return ""
    return "; device scoring in filter: only the best-scored nodes are passed on (no prioritizeVerb)"


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
        f"dra-extender: serving {url} (kube-scheduler urlPrefix: {url}/scheduler; API docs: {url}/docs)"
        + _scoring_note(settings),
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


def _announce(server: ServerSettings, banner: str) -> None:
    """The startup banner: as it is on stderr for a person, one info record with ``--log-format json`` (a
    log collector reads every line of the stream as JSON)."""
    if server.log_format == "json":
        log.info("%s", banner)
    else:
        print(banner, file=sys.stderr, flush=True)


def _bind_example(service: SchedulingService) -> tuple[Mapping[str, Any] | None, str | None]:
    """The first pending pod and a node it fits on (for the banner's bind example), or (None, None)."""
    pending = service.state.pending_pods()
    if not pending:
        return None, None
    passed = service.filter(pending[0], sorted(service.state.objects["Node"])).passed
    return (pending[0], passed[0]) if passed else (None, None)


def _listen(server: ServerSettings) -> socket.socket:
    """The bound listening socket of ``serve``. Raises StartupError naming the address."""
    from app.http.server import listen

    try:
        return listen(server.host, server.port)
    except OSError as e:
        raise StartupError(f"cannot listen on {server.host}:{server.port}: {e.strerror or e}") from e


SWITCH_INTERVAL_SECONDS = 0.0005
"""How long a thread holding the GIL may keep it while another thread waits for it, in cluster mode."""


def run_serve(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """``serve`` with ``args`` parsed from ``argv`` (None: ``sys.argv``; parsed again when the config file
    changes, ``app.cli.reload``)."""
    settings = settings_from_args(args)
    _check_files(args)  # before the state loads: a bad file must not cost minutes, then a traceback
    configure_logging(settings.server.effective_log_level, settings.server.log_format)
    cluster = cluster_settings(args)
    if cluster is None and settings.server.delegated_auth:
        raise StartupError("--delegated-auth needs cluster mode: it asks the API server about callers")
    started = _StartedWith(args, sys.argv[1:] if argv is None else list(argv))
    if cluster is not None:
        return _serve_cluster(dataclasses.replace(settings, state_dir=None, cluster=cluster), started)
    with _listen(settings.server) as sock:
        return _serve_state(settings, started, sock)


@dataclasses.dataclass(frozen=True, slots=True)
class _StartedWith:
    """The command line ``serve`` started with: its options and its words (``app.cli.reload``)."""

    args: argparse.Namespace
    argv: list[str]

    def config_watcher(self, settings: Settings, service: SchedulingService) -> ConfigWatcher | None:
        """The watcher applying config file changes to ``service`` (call ``start()``); None without
        ``--config``. Raises StartupError for an unusable file."""
        if settings.config_file is None:
            return None
        try:
            config = load_config(settings.config_file)
        except ConfigError as e:
            raise StartupError(str(e)) from e
        return config_watcher(self.argv, self.args, config, service)


def _metrics(
    service: SchedulingService,
    watcher: ConfigWatcher | None,
    informers: Any = None,
    collectors: Sequence[Any] = (),
) -> Metrics:
    """``Metrics`` of ``service`` with the config file's reload state (``watcher``) and, in cluster mode,
    the ``informers`` and the API client's ``collectors``."""
    reload_state = [ConfigReloadCollector(watcher)] if watcher is not None else []
    return Metrics(service, informers, collectors=[*collectors, *reload_state])


def _serve_state(settings: Settings, started: _StartedWith, sock: socket.socket) -> int:
    """Load the state directory, print the banner and serve on ``sock``."""
    from app.http.api import create_app
    from app.http.server import serve, server_config

    runtime = load_runtime(settings, started.args.strict)
    for note in runtime.notes:
        log.debug("%s", note)
    example_pod, example_node = _bind_example(runtime.service)
    nodes = sorted(runtime.state.objects["Node"])
    _announce(
        settings.server, _banner(settings, state_summary(runtime.state), example_pod, example_node, nodes)
    )
    watcher = started.config_watcher(settings, runtime.service)
    if watcher is not None:
        watcher.start()
    metrics = _metrics(runtime.service, watcher)
    with (
        _serve_metrics(settings.server, metrics),
        _serve_webhook(settings, runtime.service, metrics),
        _serve_probes(settings.server, lambda: True) as probes,
        sweeping_late_holds(runtime.service.binding.holds, runtime.service.lock),
    ):
        # One worker: the cluster state and the in-flight allocations live in this process.
        serve(
            create_app(runtime.service, settings, metrics=metrics, heartbeat=probes),
            sock,
            host=settings.server.host,
            port=settings.server.port,
            log_level=settings.server.effective_log_level,
            log_config=None,  # uvicorn's records go through the handler configure_logging installed
            workers=1,
            **server_config(),
            **_ssl_options(settings.server),
        )
    return EXIT_OK


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


@contextlib.contextmanager
def _serve_metrics(server: ServerSettings, metrics: Metrics) -> Iterator[None]:
    """The ``--metrics-bind-address`` listener (``app.http.metricsport``: ``/metrics`` only) while the
    block runs, when asked for. Raises StartupError when the address cannot be bound."""
    if server.metrics_bind_address is None:
        yield
        return
    from app.http.metricsport import MetricsListener

    listener = _listen_on(
        "--metrics-bind-address",
        server.metrics_bind_address,
        lambda host, port: MetricsListener(host, port, metrics.registry),
    )
    with listener:
        yield


@contextlib.contextmanager
def _serve_webhook(settings: Settings, service: SchedulingService, metrics: Metrics) -> Iterator[None]:
    """The ``--webhook-bind-address`` listener (``app.http.webhook``, HTTPS) while the block runs, when asked
    for. Raises StartupError when the address cannot be bound."""
    server = settings.server
    if server.webhook_bind_address is None:
        yield
        return
    from app.http.server import ServerThread, listen, server_config
    from app.http.webhook import create_webhook_app

    names = (settings.cluster or ClusterSettings()).scheduler_names
    sock = _listen_on("--webhook-bind-address", server.webhook_bind_address, listen)
    app = create_webhook_app(service, names, server.max_body_bytes, metrics.admission_reviews)
    log.info(
        "admission webhook on https://%s (/mutate, /validate): DRA pods go to schedulerName %s",
        server.webhook_bind_address,
        names[0],
    )
    with (
        sock,
        ServerThread(
            "webhook",
            app,
            sock,
            log_level=server.effective_log_level,
            log_config=None,
            ssl_certfile=str(server.webhook_certfile),
            ssl_keyfile=str(server.webhook_keyfile),
            **server_config(),
        ),
    ):
        yield


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


def _check_files(args: argparse.Namespace) -> None:
    """The files the options name (TLS, kubeconfig) must be usable (``app.config.files``): a StartupError
    names the flag and the file. Those a config file gave were checked naming its field when it was read
    (``app.cli.main.parse_args``)."""
    flags = {spec.dest: spec.flag for spec in PATH_FIELDS}
    files = {dest: getattr(args, dest) for dest in flags}
    problems = file_problems(files)
    if problems:
        dest, problem = problems[0]
        raise StartupError(f"{flags[dest]} {files[dest]}: {problem}")


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


def _serve_cluster(settings: Settings, started: _StartedWith) -> int:
    """Cluster mode: the informers and the bind writes on their own thread, uvicorn on the main one."""
    from app.kube.runtime import ClusterRuntime

    assert settings.cluster is not None
    selectors = SelectorCache(new_engine(settings.scheduling.cel_engine))
    runtime = ClusterRuntime(
        settings.cluster,
        settings.scheduling.feature_gates,
        selectors=selectors,
        on_synced=freeze_long_lived,
    )
    if settings.config_file is not None:  # cluster-wide derived attributes, before the first slice arrives
        install_config(settings.config_file, runtime.state, selectors)
    apply_policies(runtime.service, settings.scheduling)
    with _listen(settings.server) as sock:
        return _run_cluster(settings, started, runtime, sock)


def _run_cluster(settings: Settings, started: _StartedWith, runtime: Any, sock: socket.socket) -> int:
    """Start the informers (``runtime``: an ``app.kube.runtime.ClusterRuntime``) and serve on ``sock``."""
    from app.http.api import create_app
    from app.http.auth import DelegatedAuth
    from app.http.server import serve, server_config
    from app.kube.runtime import BackgroundRuntime

    watcher = started.config_watcher(settings, runtime.service)
    if watcher is not None:
        watcher.start()
    # The informers' thread turns watch events into state while the event loop answers kube-scheduler:
    # a loop thread back from a socket wait would otherwise wait up to the default 5 ms for the GIL, at
    # every wait of every request.
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    background = BackgroundRuntime(runtime)
    try:
        background.start()
    except Exception as e:  # kubeconfig or service account missing or unreadable
        raise StartupError(f"cannot load the Kubernetes client configuration: {e}") from e
    server = settings.server
    url = _url(server)
    _announce(
        server,
        f"dra-extender: cluster mode, API server {runtime.client.host}; serving {url} (kube-scheduler "
        f"urlPrefix: {url}/scheduler); ready (/readyz) once every informer has synced and the state is "
        "frozen" + _scoring_note(settings),
    )
    auth = None
    if server.delegated_auth:
        auth = DelegatedAuth(_reviewer(background), server.scheduler_user)
    collectors = [*runtime.api_metrics.collectors(), *runtime.conflicts.collectors()]
    metrics = _metrics(runtime.service, watcher, runtime.informers, collectors)
    try:
        with (
            _serve_metrics(server, metrics),
            _serve_webhook(settings, runtime.service, metrics),
            _serve_probes(server, runtime.ready) as probes,
        ):
            serve(
                create_app(
                    runtime.service,
                    settings,
                    ready=runtime.ready,
                    auth=auth,
                    metrics=metrics,
                    heartbeat=probes,
                    rejected=runtime.rejected,
                    preemptions=runtime.preemption_requests,
                ),
                sock,
                host=server.host,
                port=server.port,
                log_level=server.effective_log_level,
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
