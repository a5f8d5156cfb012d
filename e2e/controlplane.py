"""The e2e control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from
their Go modules (``e2e/build.sh``), plus the extender, every one a child process on 127.0.0.1 with its
log in the run directory.

Identities are the ones a cluster gives them: the harness (a client certificate in ``system:masters``)
applies the shipped ``manifests/`` (the Helm chart rendered: ``e2e/chart.py``) namespace, ServiceAccount
and RBAC, then asks the TokenRequest API for a token of that ServiceAccount; kube-scheduler and the
extender run with it, so a permission missing from ``manifests/base/rbac.yaml`` fails the tests as it
would fail a deployment. kube-controller-manager, which is not under test, uses its own certificate, and
so does the kube-scheduler with the in-tree plugin that the benchmarks compare against (the user
``system:kube-scheduler``, authorized by RBAC's bootstrap roles as in a cluster).
kube-scheduler reads the configuration of the shipped ``manifests/base/kube-scheduler-config.yaml``
ConfigMap with only its kubeconfig and the extender's address changed; the extender is started with the
sidecar's arguments from ``manifests/base/deployment.yaml``.

Children get SIGTERM when the process that started them dies (``PR_SET_PDEATHSIG``), so nothing outlives
a test run."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from e2e import pki
from e2e.kube import Kube, poll, tls_context

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests" / "base"
BUILD = Path(__file__).with_name("build.sh")
EXTENDER_NAMESPACE = "dra-extender"
EXTENDER_ACCOUNT = "dra-scheduler"
EXTENDER_ONLY_ACCOUNT = "dra-extender-e2e"
EXTENDER_ROLES = (
    "dra-extender",
    "dra-scheduler-leader-election",
)  # manifests/base/rbac.yaml: the extender's own
SERVICE_RANGE = "10.0.0.0/24"  # only allocated from: no traffic ever goes there
START_TIMEOUT = 120.0
FEATURE_GATES = (
    "--feature-gates=GenericWorkload=true,DRAWorkloadResourceClaims=true,DRANodeAllocatableResources=true"
)
"""Gates off by default in 1.37 that scenarios need: PodGroups and their ResourceClaims (beta) and
node-allocatable resources through DRA (alpha), on in every component as a cluster enables them:
kube-apiserver (which also needs the scheduling.k8s.io/v1beta1 API and otherwise drops the gated fields),
the resourceclaim controller, which generates group claims, the extender, and kube-scheduler, whose
DynamicResources PreEnqueue accepts a PodGroup's claim for the group's pods only with
DRAWorkloadResourceClaims on. The benchmarks run kube-scheduler and the extender at 1.37's defaults
(``ControlPlane.scheduling_gates``): with DRANodeAllocatableResources on, the in-tree plugin's Filter lists
every ResourceSlice for every node it checks, which would handicap it."""


def build_binaries() -> Path:
    """Build (or reuse) the pinned components; returns their directory. Raises with the build's own
    message when Go is missing or the build fails."""
    done = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD} failed (exit {done.returncode}); its messages are above")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Component:
    """One child process: started, stopped and restarted with the same arguments, its log appended to."""

    name: str
    argv: list[str]
    log: Path
    ready: Callable[[], bool]
    env: dict[str, str] | None = None
    hostname: str | None = None
    """Run in a UTS namespace with this hostname (None: the machine's)."""
    process: subprocess.Popen[bytes] | None = None
    wanted: bool = False  # restart it when it exits by itself (a kubelet's restartPolicy: Always)
    exits: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)

    def start(self) -> None:
        with self.lock:
            self.wanted = True
            self._spawn()

    def _spawn(self) -> None:
        argv = self.argv
        if self.hostname is not None:
            # A hostname of its own, as a pod has: kube-scheduler's leader identity and the extender's
            # view of it (app.kube.leader) start with it.
            argv = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname, *argv]
        with self.log.open("ab") as out:
            out.write(f"\n===== start {time.strftime('%H:%M:%S')}: {' '.join(argv)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                preexec_fn=_die_with_parent,
            )
        poll(self._ready_or_dead, timeout=START_TIMEOUT, interval=0.2, what=f"{self.name} ready")

    def _ready_or_dead(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode}; log: {self.log}\n{self.tail()}"
            )
        try:
            return self.ready()
        except (httpx.HTTPError, OSError):
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        with self.lock:
            self.wanted = False
            if self.process is None or self.process.poll() is not None:
                return
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop it with ``sig`` (SIGKILL: a crash, nothing flushed or released) and start it again."""
        with self.lock:
            self.stop(sig)
            self.start()

    def revive(self) -> None:
        """Start it again if it exited although it is wanted (kube-scheduler exits when it loses its
        leader Lease, e.g. while kube-apiserver restarts; in a pod the kubelet would restart it)."""
        with self.lock:
            if self.wanted and self.process is not None and self.process.poll() is not None:
                self.exits += 1
                with self.log.open("ab") as out:
                    out.write(f"\n===== exited with {self.process.returncode}; restarting\n".encode())
                self._spawn()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _get_ok(url: str, **kwargs: Any) -> bool:
    return httpx.get(url, timeout=2.0, **kwargs).status_code == 200


def _kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}
                ],
                "users": [{"name": "e2e", "user": user}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
                "current-context": "e2e",
            }
        )
    )
    path.chmod(0o600)
    return path


def shipped(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def shipped_scheduler_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration the shipped ConfigMap mounts into kube-scheduler."""
    [configmap] = shipped("kube-scheduler-config.yaml")
    return yaml.safe_load(configmap["data"]["config.yaml"])


@dataclass
class ControlPlane:
    """A running control plane in ``directory`` (certificates, kubeconfigs, etcd data, ``logs/``)."""

    directory: Path
    binaries: Path
    components: dict[str, Component] = field(default_factory=dict)
    server: str = ""
    extender_url: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    """ServiceAccount name -> the token its kubeconfig holds."""
    extender_urls: dict[str, str] = field(default_factory=dict)
    """Extender component name -> its URL (``extender_url``: the first pair's, ``dra-extender``)."""
    scheduler_urls: dict[str, str] = field(default_factory=dict)
    """kube-scheduler component name -> its secure port's URL."""
    probe_urls: dict[str, str] = field(default_factory=dict)
    """Extender component name -> its probe listener's URL (``--health-probe-bind-address``)."""
    scheduling_gates: str | None = FEATURE_GATES
    """The ``--feature-gates`` flag of every kube-scheduler and extender started (None: 1.37's defaults)."""
    _watchdog_stop: threading.Event = field(default_factory=threading.Event)

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self._watchdog, name="e2e-watchdog", daemon=True).start()
        pkidir = self.directory / "pki"
        ca = pki.Authority(pkidir)
        self.ca = ca.cert
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            server_ips=("127.0.0.1", "10.0.0.1"),
        )
        self.admin = ca.issue("admin", "e2e-admin", organization="system:masters")
        controller_manager = ca.issue("controller-manager", "system:kube-controller-manager")
        # The in-tree plugin's kube-scheduler as clusters run it: the system:kube-scheduler user, authorized
        # by RBAC's bootstrap roles. As system:masters it would skip the authorization the extender path's
        # ServiceAccounts go through on every request: the comparison would not be like for like.
        in_tree_scheduler = ca.issue("kube-scheduler", "system:kube-scheduler")
        sa = pki.service_account_keys(pkidir)

        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._add(
            "etcd",
            [
                str(self.binaries / "etcd"),
                "--data-dir",
                str(self.directory / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
            lambda: _get_ok(f"{etcd_url}/health"),
        )
        self.server = f"https://127.0.0.1:{api_port}"
        self._add(
            "kube-apiserver",
            [
                str(self.binaries / "kube-apiserver"),
                "--etcd-servers",
                etcd_url,
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--endpoint-reconciler-type=none",
                "--authorization-mode=Node,RBAC",
                # The front-proxy settings every cluster publishes in extension-apiserver-authentication;
                # without them kube-scheduler's authentication keeps logging a missing CA bundle. No
                # certificate for the allowed name is ever issued.
                f"--requestheader-client-ca-file={ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--profiling=false",
                FEATURE_GATES,
                "--runtime-config=scheduling.k8s.io/v1beta1=true",
            ],
            lambda: _get_ok(
                f"{self.server}/readyz", verify=tls_context(ca.cert, (self.admin.cert, self.admin.key))
            ),
        )
        self.admin_kubeconfig = self._certificate_kubeconfig("admin.kubeconfig", self.admin)
        self.in_tree_scheduler_kubeconfig = self._certificate_kubeconfig(
            "kube-scheduler-in-tree.kubeconfig", in_tree_scheduler
        )
        kcm_kubeconfig = self._certificate_kubeconfig("controller-manager.kubeconfig", controller_manager)
        kcm_port = free_port()
        self._add(
            "kube-controller-manager",
            [
                str(self.binaries / "kube-controller-manager"),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                # The resourceclaim controller writes a claim and a pod status per pod: at the default
                # 20 QPS it, not a scheduler, would set the pace of every bulk scenario.
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.cert}",
                "--controllers=resourceclaim-controller,serviceaccount-controller,garbage-collector-controller,"
                "namespace-controller,serviceaccount-token-controller,disruption-controller",
                FEATURE_GATES,
            ],
            lambda: _get_ok(f"https://127.0.0.1:{kcm_port}/healthz", verify=tls_context(None)),
        )
        self._apply_shipped_identity()

    def _add(
        self,
        name: str,
        argv: list[str],
        ready: Callable[[], bool],
        env: dict[str, str] | None = None,
        hostname: str | None = None,
    ) -> Component:
        component = Component(name, argv, self.logs / f"{name}.log", ready, env, hostname)
        self.components[name] = component
        component.start()
        return component

    def client(self) -> Kube:
        return Kube(self.server, self.ca, cert=(self.admin.cert, self.admin.key))

    def _apply_shipped_identity(self) -> None:
        """The shipped namespace, ServiceAccount and RBAC, and a token for kube-scheduler. The extender
        shares that ServiceAccount in the sidecar, but it is also bound to ``system:kube-scheduler``, which
        would hide a rule missing from the extender's own roles: so the extender runs as a second account
        bound only to them (the same bindings with the subject replaced)."""
        kube = self.client()
        for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
            for doc in shipped(name):
                kube.ensure(doc)
        kube.ensure(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": EXTENDER_ONLY_ACCOUNT, "namespace": EXTENDER_NAMESPACE},
            }
        )
        for doc in shipped("rbac.yaml"):
            if doc["kind"].endswith("Binding") and doc["roleRef"]["name"] in EXTENDER_ROLES:
                doc["metadata"]["name"] += "-extender-only"
                doc["subjects"] = [
                    {"kind": "ServiceAccount", "name": EXTENDER_ONLY_ACCOUNT, "namespace": EXTENDER_NAMESPACE}
                ]
                kube.ensure(doc)
        self.scheduler_kubeconfig = self._token_kubeconfig(kube, EXTENDER_ACCOUNT)
        self.extender_kubeconfig = self._token_kubeconfig(kube, EXTENDER_ONLY_ACCOUNT)
        kube.close()

    def _token_kubeconfig(self, kube: Kube, account: str) -> Path:
        self.tokens[account] = kube.token(EXTENDER_NAMESPACE, account, seconds=86400)
        return _kubeconfig(
            self.directory / f"{account}.kubeconfig", self.server, self.ca, {"token": self.tokens[account]}
        )

    def _gate_flags(self) -> list[str]:
        return [self.scheduling_gates] if self.scheduling_gates else []

    def start_extender(
        self,
        *extra: str,
        name: str = "dra-extender",
        api_server: str | None = None,
        hostname: str | None = None,
    ) -> Component:
        """The extender as the sidecar runs it (``manifests/base/deployment.yaml``), with a kubeconfig holding
        a token of the account bound only to the extender's roles instead of ``--in-cluster``, and a free
        port; ``extra`` arguments after the sidecar's (the last of a flag given twice wins). ``name``: the
        component's (a second extender needs another); ``api_server``: where it reaches kube-apiserver
        instead (a proxy); ``hostname``: its pod's (``start_pair``)."""
        port, probes = free_port(), f"127.0.0.1:{free_port()}"
        self.extender_urls[name] = f"http://127.0.0.1:{port}"
        self.probe_urls[name] = f"http://{probes}"
        if name == "dra-extender":
            self.extender_url = self.extender_urls[name]
        kubeconfig = self.extender_kubeconfig
        if api_server is not None:
            token = {"token": self.tokens[EXTENDER_ONLY_ACCOUNT]}
            kubeconfig = _kubeconfig(self.directory / f"{name}.kubeconfig", api_server, self.ca, token)
        args = []
        for arg in _sidecar_container("dra-extender")["args"]:
            if arg == "--in-cluster":
                args.append(f"--kubeconfig={kubeconfig}")
            elif arg.startswith("--port="):
                args.append(f"--port={port}")
            elif arg.startswith("--metrics-bind-address="):  # the pod IP there, loopback here
                args.append(f"--metrics-bind-address=127.0.0.1:{free_port()}")
            elif arg.startswith("--health-probe-bind-address="):
                args.append(f"--health-probe-bind-address={probes}")
            else:
                args.append(arg)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("KUBECONFIG", None)
        return self._add(
            name,
            [str(Path(sys.executable).with_name("dra-extender")), *args, *self._gate_flags(), *extra],
            lambda: _get_ok(f"http://{probes}/readyz"),  # where the kubelet's probes go
            env,
            hostname,
        )

    def _certificate_kubeconfig(self, file: str, identity: pki.CertPair) -> Path:
        """A kubeconfig in the run directory that authenticates with ``identity``'s client certificate."""
        return _kubeconfig(
            self.directory / file,
            self.server,
            self.ca,
            {"client-certificate": str(identity.cert), "client-key": str(identity.key)},
        )

    def start_null_extender(
        self, binary: Path, *extra: str, qps: float | None = None, name: str = "dra-extender-null"
    ) -> Component:
        """``bench/nullextender`` (built at ``binary``) as component ``name``: an extender that passes
        every node, scores 0 and binds at once, with the extender's account's token and API rate limit
        ``qps`` (burst twice that; None: 50 / 100, the extender's default); ``extra``: its other flags.
        ``start_scheduler(extender=name)`` starts the kube-scheduler that calls it (``kube-scheduler-null``
        for ``dra-extender-null``)."""
        port = free_port()
        self.extender_urls[name] = f"http://127.0.0.1:{port}"
        token = self.directory / f"{name}.token"
        token.write_text(self.tokens[EXTENDER_ONLY_ACCOUNT])
        token.chmod(0o600)
        rate = [] if qps is None else [f"--qps={qps:g}", f"--burst={int(2 * qps)}"]
        argv = [str(binary), f"--listen=127.0.0.1:{port}", f"--server={self.server}", f"--ca={self.ca}"]
        return self._add(
            name,
            [*argv, f"--token-file={token}", *rate, *extra],
            lambda: _get_ok(f"http://127.0.0.1:{port}/readyz"),
        )

    def start_scheduler(
        self,
        *,
        with_extender: bool = True,
        qps: float | None = None,
        verbosity: int | None = None,
        profiling: bool = False,
        nodes_to_score: int | None = None,
        device_scoring: str = "prioritize",
        extender: str = "dra-extender",
        hostname: str | None = None,
    ) -> Component:
        """kube-scheduler with the shipped configuration and the flags of the Deployment's kube-scheduler
        container (``with_extender``), or kube-scheduler's defaults
        with its in-tree DynamicResources plugin, under the name ``kube-scheduler-in-tree``. ``qps`` sets
        the client's rate limit (burst: twice that) instead of kube-scheduler's default 50; ``verbosity``
        its ``--v`` instead of 2 (3 logs every scheduling attempt); ``/metrics`` is served to requests
        without credentials (at ``scheduler_urls[name]``), and with ``profiling`` ``/debug/pprof/`` too;
        ``nodes_to_score``
        replaces the configuration's ``percentageOfNodesToScore`` (0: kube-scheduler's adaptive
        default); ``device_scoring: filter`` leaves the extender's ``prioritizeVerb`` out, as the
        chart's ``kubeScheduler.deviceScoring`` does. ``extender``: the extender component it calls
        (``kube-scheduler-<x>`` for ``dra-extender-<x>``); ``hostname``: its pod's (``start_pair``)."""
        port = free_port()
        if with_extender:
            config = shipped_scheduler_config()
            config["clientConnection"] = {"kubeconfig": str(self.scheduler_kubeconfig)}
            for entry in config["extenders"]:
                entry["urlPrefix"] = f"{self.extender_urls[extender]}/scheduler"
                if device_scoring == "filter":
                    del entry["prioritizeVerb"], entry["weight"]
            name, kubeconfig = (
                "kube-scheduler" + extender.removeprefix("dra-extender"),
                self.scheduler_kubeconfig,
            )
            flags = [
                f for f in _sidecar_container("kube-scheduler")["command"][1:] if not f.startswith("--config")
            ]
        else:
            config = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(self.in_tree_scheduler_kubeconfig)},
                "leaderElection": {"leaderElect": False},
            }
            name, kubeconfig = "kube-scheduler-in-tree", self.in_tree_scheduler_kubeconfig
            flags = ["--v=2"]
        flags = [f for f in flags if not f.startswith("--feature-gates=")] + self._gate_flags()
        if qps is not None:
            config["clientConnection"].update(qps=qps, burst=int(2 * qps))
        if verbosity is not None:
            flags = [f for f in flags if not f.startswith("--v=")] + [f"--v={verbosity}"]
        # A loopback test plane: the benchmarks read each kube-scheduler's own cycle timings.
        open_paths = "/healthz,/readyz,/livez,/metrics" + (",/debug/pprof/*" if profiling else "")
        flags.append(f"--authorization-always-allow-paths={open_paths}")
        if nodes_to_score is not None:
            config["percentageOfNodesToScore"] = nodes_to_score
        self.scheduler_urls[name] = f"https://127.0.0.1:{port}"
        path = self.directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return self._add(
            name,
            [
                str(self.binaries / "kube-scheduler"),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                *flags,
            ],
            lambda: _get_ok(f"https://127.0.0.1:{port}/readyz", verify=tls_context(None)),
            hostname=hostname,
        )

    def start_pair(self, suffix: str) -> tuple[Component, Component]:
        """A second replica of the Deployment's pod: extender ``dra-extender-<suffix>`` and kube-scheduler
        ``kube-scheduler-<suffix>`` calling it, both with the hostname ``dra-scheduler-<suffix>`` (the
        first pair has the machine's), so the two kube-schedulers' leader identities tell the pairs apart
        as pod names do. They share the shipped Lease with the first pair."""
        hostname = f"dra-scheduler-{suffix}"
        extender = self.start_extender(name=f"dra-extender-{suffix}", hostname=hostname)
        scheduler = self.start_scheduler(extender=extender.name, hostname=hostname)
        return extender, scheduler

    def _watchdog(self) -> None:
        while not self._watchdog_stop.wait(1.0):
            for component in list(self.components.values()):
                try:
                    component.revive()
                except (RuntimeError, TimeoutError) as err:  # logged; the scenario waiting on it fails
                    with component.log.open("ab") as out:
                        out.write(f"\n===== restart failed: {err}\n".encode())

    def stop(self) -> None:
        self._watchdog_stop.set()
        for component in reversed(list(self.components.values())):
            component.stop()

    def report_logs(self, lines: int = 60) -> str:
        return "\n".join(f"----- {c.name} ({c.log}) -----\n{c.tail(lines)}" for c in self.components.values())


class KubeletProbe:
    """What the kubelet does with the kube-scheduler container's ``livenessProbe`` (``deployment.yaml``),
    there being no kubelet here: GET ``url`` (the extender's probe listener, the pod's port) every
    ``periodSeconds`` with ``timeoutSeconds``; after ``failureThreshold`` failures in a row, stop ``target``
    (SIGTERM) and start it again, at once the first time, then after the kubelet's restart back-off (10 s,
    doubling up to 5 minutes, forgotten after 10 minutes of running). ``restarts``: when (monotonic)."""

    BACKOFF_SECONDS, BACKOFF_MAX_SECONDS, BACKOFF_RESET_SECONDS = 10.0, 300.0, 600.0

    def __init__(self, url: str, target: Component) -> None:
        probe = _sidecar_container("kube-scheduler")["livenessProbe"]
        self.url = f"{url}{probe['httpGet']['path']}"
        self.target = target
        self.period = float(probe.get("periodSeconds", 10))
        self.timeout = float(probe.get("timeoutSeconds", 1))
        self.threshold = int(probe.get("failureThreshold", 3))
        self.restarts: list[float] = []
        self._backoff = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"probe-{target.name}", daemon=True)

    def start(self) -> KubeletProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        failures = 0
        while not self._stop.wait(self.period):
            try:
                ok = 200 <= httpx.get(self.url, timeout=self.timeout).status_code < 400
            except httpx.HTTPError:
                ok = False
            failures = 0 if ok else failures + 1
            if failures >= self.threshold and not self._stop.is_set():
                self._restart(failures)
                failures = 0

    def _restart(self, failures: int) -> None:
        now = time.monotonic()
        if self.restarts and now - self.restarts[-1] > self.BACKOFF_RESET_SECONDS:
            self._backoff = 0.0
        self.restarts.append(now)
        with self.target.log.open("ab") as out:
            out.write(
                f"\n===== liveness probe failed {failures} times; restart in {self._backoff:g} s\n".encode()
            )
        self.target.stop()
        if self._stop.wait(self._backoff):
            return  # the scenario is over: whoever stopped the probe starts the target again if needed
        self._backoff = min(max(self._backoff * 2, self.BACKOFF_SECONDS), self.BACKOFF_MAX_SECONDS)
        self.target.start()


def _sidecar_container(name: str) -> dict[str, Any]:
    """A container (or the native sidecar) of the shipped Deployment's pod."""
    deployment = next(d for d in shipped("deployment.yaml") if d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    return next(c for c in [*spec["initContainers"], *spec["containers"]] if c["name"] == name)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
