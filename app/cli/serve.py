"""``dra-extender serve``: the extender on a state directory, or on a live cluster (cluster mode).

``serve --state DIR``: load the state, print a banner to stderr, serve the extender with uvicorn (one
worker: the cluster state lives in this process). ``serve --kubeconfig PATH`` / ``--in-cluster`` /
``$KUBECONFIG`` (``app.kube``): list+watch the API server and write binds to it; ``/readyz`` is 503 until
every informer has synced. The port is bound before the state loads, TLS files are checked before
anything else (``--ssl-certfile`` / ``--ssl-keyfile`` serve HTTPS, ``--ssl-ca-certs`` also requires
client certificates); the metrics and probe listeners (``--metrics-bind-address``,
``--health-probe-bind-address``) share one binder that names the flag when an address cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import socket
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from allocator.selectors import SelectorCache
from app.cli.flags import cluster_settings, settings_from_args
from app.cli.runtime import (
    EXIT_OK,
    StartupError,
    apply_policies,
    install_config,
    load_runtime,
    new_engine,
    state_summary,
    watch_config,
)
from app.config.logs import configure as configure_logging
from app.config.settings import ServerSettings, Settings
from app.http.metrics import Metrics
from app.http.probes import ProbeListener
from app.scheduling.service import SchedulingService

__all__ = ["run_serve"]


log = logging.getLogger(__name__)

_T = TypeVar("_T")


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


def run_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    _check_tls(settings.server)  # before the state loads: a bad file must not cost minutes, then a traceback
    configure_logging(settings.server.log_level, settings.server.log_format)
    cluster = cluster_settings(args)
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

    runtime = load_runtime(settings, strict_fields)
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
        if path is not None:
            _check_tls_file(flag, path)
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


MAX_TLS_FILE_BYTES = 4 << 20
"""4 MiB: a CA bundle of every public root is ~250 KiB. OpenSSL reads the whole file, and a device or a
sparse file would be read into memory."""


def _check_tls_file(flag: str, path: Path) -> None:
    """A TLS file must be a readable regular file of at most ``MAX_TLS_FILE_BYTES``: OpenSSL (and uvicorn,
    which opens it again) waits forever on a FIFO without a writer and reads /dev/zero without end.
    Raises StartupError naming the flag and the file."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise StartupError(f"{flag} {path}: not a regular file")
        if info.st_size > MAX_TLS_FILE_BYTES:
            raise StartupError(
                f"{flag} {path}: larger than {MAX_TLS_FILE_BYTES >> 20} MiB ({info.st_size} bytes): "
                "not a PEM file"
            )
        with path.open("rb") as file:
            file.read(1)
    except OSError as e:
        raise StartupError(f"{flag} {path}: cannot read it: {e.strerror or e}") from e


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
    apply_policies(runtime.service, settings.scheduling)
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
                    metrics=_serve_metrics(
                        server, Metrics(runtime.service, runtime.informers, runtime.conflicts)
                    ),
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
