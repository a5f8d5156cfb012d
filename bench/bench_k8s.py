"""``make bench-k8s``: one workload through the real kube-scheduler v1.37.2, once with its in-tree
DynamicResources plugin and once with the plugin disabled and the extender configured (the shipped
``manifests/``), on the same control plane (``e2e/``), alternating round by round.

The workload follows upstream scheduler_perf's ``SchedulingWithResourceClaimTemplate``: N nodes with one
ResourceSlice of 8 devices each, then pods that each take one device through a ResourceClaimTemplate, created
in bulk. Each run has its own driver, DeviceClass and namespace on fresh nodes, and everything is deleted
before the next run, so the two never share devices or node counts. Measured from the client: pods/s from the
first pod created to the last one bound, and per-pod latency (created -> bound, seen on a watch); how fast the
pods were created and how long after the last one the last was bound (a path that keeps up binds each pod soon
after it is created, so its rate is the creation's, which the CPU the other components leave the API server
sets); plus CPU seconds each component used during the run and, for the extender, the mean time it took to
answer each verb (its own request-duration metric): which says where the time goes.

API budget: the in-tree plugin writes claims and bindings through kube-scheduler's client, the extender
through its own; each client keeps to a token bucket (kube-scheduler's ``clientConnection.qps`` / ``burst``,
the extender's ``--kube-api-qps`` / ``--kube-api-burst``). The headline table gives all three the same
limit (``--qps``, burst twice that); the second table runs everything at its default (kube-scheduler's
50 QPS, burst 100, which the extender's client defaults to as well).

``--modes in-tree,extender,null`` adds the ceiling: the same kube-scheduler configuration calling
``bench/nullextender`` (Go), which passes on as many nodes as the extender does (kube-scheduler's adaptive
share, or ``--extender-nodes-to-score``) without looking at them, scores 0 and binds at once without
allocating, so its throughput is the most any extender can reach on this kube-scheduler. ``null-writes``
is the same null extender allocating each pod's claim as it binds, with the writes the in-tree plugin's
PreBind makes (the claim's finalizer, its allocation and reservedFor, then the Binding) on the first
free device of the node: the most any extender can reach that allocates through the API as upstream
does. Only the
components of the mode being measured run during its run (each run starts them afresh), so no idle
scheduler or extender takes CPU from the other mode on a small machine."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.config.settings import DEVICE_SCORING
from bench.bench_cel import table
from e2e.controlplane import ROOT, ControlPlane, build_binaries, remove
from e2e.kube import Kube, ThreadClients, poll, tls_context
from e2e.workload import (
    EXTENDER_SCHEDULER,
    IN_TREE_SCHEDULER,
    Scenario,
    allocated_devices,
    bound_claim_problems,
    claims_sharing_devices,
)

RUN_DIR = ROOT / ".cache" / "bench-k8s"
COMPONENTS = (
    "kube-apiserver",
    "etcd",
    "kube-scheduler",
    "kube-scheduler-in-tree",
    "kube-scheduler-null",
    "kube-scheduler-null-writes",
    "dra-extender",
    "dra-extender-null",
    "dra-extender-null-writes",
    "kube-controller-manager",
)
MODE_COMPONENTS = {
    "in-tree": ("kube-scheduler-in-tree",),
    "extender": ("dra-extender", "kube-scheduler"),
    "null": ("dra-extender-null", "kube-scheduler-null"),
    "null-writes": ("dra-extender-null-writes", "kube-scheduler-null-writes"),
}
"""What runs during a run of each mode (besides the control plane): the scheduler and its extender."""
SCHEDULER_OF = {mode: names[-1] for mode, names in MODE_COMPONENTS.items()}
NULL_EXTENDER_SRC = Path(__file__).with_name("nullextender")
CREATE_THREADS = 4
"""Threads creating a run's pods. On 2 cores creation is CPU-bound, not latency-bound: every run keeps both
cores busy while it creates (``Run.creating_cores``), this process using ~1.5 ms CPU per pod of the 25-33 ms
all components use. 16 threads create 1.4-2x faster, but by taking CPU from the scheduler, which then
falls behind (p50 latency 3-10x): the headline's pods/s did not rise, so 4 keeps it a steady state."""


@dataclass
class Run:
    mode: str
    pods: int
    seconds: float
    latencies: list[float]
    cpu: dict[str, float] = field(default_factory=dict)
    waiting: dict[str, float] = field(default_factory=dict)
    """Seconds each component's threads spent runnable but waiting for a core (``_waiting_seconds``)."""
    cpu_seconds: float = 0.0
    """How long ``cpu`` was counted over (a backlog's includes kube-scheduler's start, before ``seconds``)."""
    answer_ms: dict[str, float] = field(default_factory=dict)
    """The extender's mean time to answer each verb in this run, from its metrics (extender runs only)."""
    holds: dict[str, float] = field(default_factory=dict)
    """The extender's prioritize holds in this run per result (``HOLD_RESULTS``; extender runs only)."""
    cycle_ms: dict[str, float] = field(default_factory=dict)
    """kube-scheduler's mean time per scheduling cycle in each part of it (``CYCLE_PARTS``)."""
    cycles: int = 0
    requests: dict[str, float] = field(default_factory=dict)
    """kube-apiserver's requests during the run by verb and resource (``_api_requests``): what each
    path asks of the API server, whoever sent it."""
    creating_seconds: float = 0.0
    """From the first pod created to the last: when it is close to ``seconds``, pods were bound as fast as
    the client could create them, and the run measured the machine, not the scheduler."""
    creating_cores: float = 0.0
    """Cores busy during the creation, every component and this process (its pod creators and its watch)."""
    creating_client_ms: float = 0.0
    """This process's CPU per pod created, during the creation (its watch's share included)."""

    @property
    def rate(self) -> float:
        return self.pods / self.seconds


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    """This process's CPU seconds, every thread's."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _waiting_seconds(pid: int) -> float:
    """How long the process's threads have waited on a run queue, ready to run while every core was busy
    (each thread's ``schedstat``). A thread that ended took its count with it: the run's difference
    leaves out the threads that ended during it."""
    waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            waited += int((task / "schedstat").read_text().split()[1])
    return waited / 1e9


@dataclass(frozen=True)
class Usage:
    """Each running component's CPU seconds and seconds waiting for a core, counted since it started."""

    cpu: dict[str, float]
    waiting: dict[str, float]

    @classmethod
    def of(cls, plane: ControlPlane) -> Usage:
        pids = {}
        for name in COMPONENTS:
            component = plane.components.get(name)
            if component and component.process and component.process.poll() is None:
                pids[name] = component.process.pid
        return cls(
            {name: _cpu_seconds(pid) for name, pid in pids.items()},
            {name: _waiting_seconds(pid) for name, pid in pids.items()},
        )

    def since(self, before: Usage) -> Usage:
        """What each component running now used after ``before`` was counted."""
        return Usage(_minus(self.cpu, before.cpu), _minus(self.waiting, before.waiting))


def _minus(now: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: value - before.get(name, 0.0) for name, value in now.items()}


NOTHING_USED = Usage({}, {})


VERBS = ("filter", "prioritize", "bind")
REQUEST_METRIC = "dra_extender_request_duration_seconds"
HOLDS_METRIC = "dra_extender_prioritize_holds"
HOLD_RESULTS = ("taken", "stale", "unused")


Answered = dict[str, tuple[float, float]]
"""Per verb, the extender's total seconds answering and the number of answers so far."""


def _histogram_totals(text: str, family_name: str, label: str | None, keys: tuple[str, ...]) -> Answered:
    """Seconds and count of histogram ``family_name`` per value of ``label`` among ``keys`` (``label``
    None: one total under ``keys[0]``), summed over its other labels."""
    totals = {key: [0.0, 0.0] for key in keys}
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            key = keys[0] if label is None else sample.labels.get(label)
            if key in totals and sample.name.endswith(("_sum", "_count")):
                totals[key][sample.name.endswith("_count")] += sample.value
    return {key: (seconds, count) for key, (seconds, count) in totals.items()}


def _answered(plane: ControlPlane) -> tuple[Answered, dict[str, float]]:
    """The extender's answer totals per verb, and its prioritize holds so far per result."""
    with urllib.request.urlopen(f"{plane.extender_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    holds = dict.fromkeys(HOLD_RESULTS, 0.0)
    for family in text_string_to_metric_families(text):
        if family.name == HOLDS_METRIC:
            for sample in family.samples:
                if sample.labels.get("result") in holds and sample.name.endswith("_total"):
                    holds[sample.labels["result"]] += sample.value
    return _histogram_totals(text, REQUEST_METRIC, "verb", VERBS), holds


def _api_requests(plane: ControlPlane) -> dict[str, float]:
    """kube-apiserver's requests so far by verb and resource (``PUT resourceclaims/status``), from its
    ``apiserver_request_total``, over every client and answer code; its own watch-cache and lease traffic
    included."""
    requests: dict[str, float] = {}
    kube = plane.client()
    try:
        text = kube.http.get("/metrics").text
    finally:
        kube.close()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            resource = "/".join(filter(None, (labels.get("resource"), labels.get("subresource"))))
            key = f"{labels.get('verb')} {resource}"
            requests[key] = requests.get(key, 0.0) + sample.value
    return requests


API_REQUESTS_SHOWN = 0.1
"""Requests per pod below which a kind of request gets no row of its own in the table."""


CYCLE_PARTS = ("algorithm", "PreFilter", "PreScore", "Score")
"""kube-scheduler's view of a scheduling cycle, from its own histograms: the algorithm (its filters, the
extender's filter, its scores, the extender's prioritize: what a serial cycle waits on), and the extension
points recorded once per cycle inside it (its Filter plugins run per node and are not recorded)."""


def _cycles(url: str) -> Answered:
    text = httpx.get(f"{url}/metrics", verify=tls_context(None), timeout=10).text
    cycles = {
        **_histogram_totals(text, "scheduler_scheduling_algorithm_duration_seconds", None, ("algorithm",)),
        **_histogram_totals(
            text, "scheduler_framework_extension_point_duration_seconds", "extension_point", CYCLE_PARTS[2:]
        ),
    }
    return cycles


def _mean_ms(before: Answered, after: Answered) -> dict[str, float]:
    means = {}
    for key in after:
        seconds, count = (a - b for a, b in zip(after[key], before[key], strict=True))
        if count:
            means[key] = 1000 * seconds / count
    return means


class SchedulerProfile:
    """A Go CPU profile of one kube-scheduler over the first ``seconds`` of a run, taken in the background
    from its ``/debug/pprof/profile`` and written to ``path``."""

    def __init__(self, url: str, seconds: int, path: Path) -> None:
        self.path = path
        self._thread = threading.Thread(target=self._take, args=(url, seconds), daemon=True)
        self._thread.start()

    def _take(self, url: str, seconds: int) -> None:
        response = httpx.get(
            f"{url}/debug/pprof/profile",
            params={"seconds": str(seconds)},
            verify=tls_context(None),
            timeout=seconds + 30,
        )
        response.raise_for_status()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(response.content)

    def summary(self, lines: int = 25) -> str:
        """``go tool pprof -top`` of the profile, by cumulative time (what each call path costs)."""
        self._thread.join()
        go = shutil.which("go")
        if go is None or not self.path.exists():
            return f"no profile summary: {'go is not on PATH' if go is None else 'no profile taken'}"
        top = subprocess.run(
            [go, "tool", "pprof", "-top", "-cum", f"-nodecount={lines}", str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        return top.stdout or top.stderr


class BoundWatch:
    """Watches a namespace's pods and records when each first shows a ``spec.nodeName``."""

    def __init__(self, client: Callable[[], Kube], namespace: str) -> None:
        """``client`` (``ControlPlane.client``) makes the API client the watch's thread uses alone and closes
        when it ends: an httpx client is not shared between threads here (``e2e.kube.ThreadClients``)."""
        self.bound: dict[str, float] = {}
        self._kube, self._namespace = client(), namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._watch()
        finally:
            self._kube.close()

    def _watch(self) -> None:
        path = Kube.path("Pod", self._namespace)
        while not self._stop.is_set():
            params = {"watch": "true", "timeoutSeconds": "30", "allowWatchBookmarks": "false"}
            try:
                with self._kube.http.stream("GET", path, params=params, timeout=None) as response:
                    for line in response.iter_lines():
                        if self._stop.is_set():
                            return
                        pod = json.loads(line)["object"]
                        name = pod["metadata"]["name"]
                        if pod.get("spec", {}).get("nodeName") and name not in self.bound:
                            self.bound[name] = time.monotonic()
            except httpx.HTTPError:
                # The stream broke: the control plane stopping after ``stop`` (a stopped watch may still
                # be waiting for its next line), else watch again.
                self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()


def _one_run(
    plane: ControlPlane,
    mode: str,
    label: str,
    nodes: int,
    devices: int,
    pods: int,
    timeout: float,
    profile_seconds: int = 0,
    backlog: bool = False,
    create_threads: int = CREATE_THREADS,
) -> Run:
    """One run. ``backlog``: the mode's kube-scheduler is stopped while the pods are created and started
    once the resourceclaim controller has made every claim; the rate is then from the first pod bound to
    the last, and latency from kube-scheduler started to each pod bound."""
    sc = Scenario.create(plane, label)
    sc.add_nodes(nodes, devices)
    sc.add_template("one-gpu")
    scheduler = IN_TREE_SCHEDULER if mode == "in-tree" else EXTENDER_SCHEDULER
    watch = BoundWatch(plane.client, sc.namespace)
    time.sleep(1.0)  # the watch is open and the informers have seen the slices
    created: dict[str, float] = {}
    answered_before = _answered(plane) if mode == "extender" else None
    scheduler_name = SCHEDULER_OF[mode]
    scheduler_url = plane.scheduler_urls[scheduler_name]
    if backlog:
        plane.components[scheduler_name].stop()
    # A kube-scheduler started after the pods were created counts its cycles from zero.
    cycles_before = None if backlog else _cycles(scheduler_url)
    used_before = NOTHING_USED if backlog else Usage.of(plane)  # backlog: taken once the pods exist
    requests_before = {} if backlog else _api_requests(plane)
    cpu_since = time.monotonic()

    clients = ThreadClients(plane.client)

    def create(i: int) -> None:
        name = f"pod-{i}"
        sc.add_pod(name, template="one-gpu", scheduler=scheduler, kube=clients.get())
        created[name] = time.monotonic()

    start = time.monotonic()
    creating_used, client_cpu = Usage.of(plane), _own_cpu_seconds()
    profile = None
    if profile_seconds and not backlog:
        path = RUN_DIR / "profiles" / f"{label}-{scheduler_name}.pprof"
        profile = SchedulerProfile(scheduler_url, profile_seconds, path)
    with clients, ThreadPoolExecutor(create_threads) as pool:
        list(pool.map(create, range(pods)))
    creating_seconds = max(created.values()) - start
    client_cpu = _own_cpu_seconds() - client_cpu
    creating_cores = (sum(Usage.of(plane).since(creating_used).cpu.values()) + client_cpu) / creating_seconds
    if backlog:
        poll(lambda: len(sc.claims()) >= pods, timeout=timeout, interval=0.5, what=f"{label}: claims made")
        used_before, cpu_since = Usage.of(plane), time.monotonic()
        requests_before = _api_requests(plane)
        created = dict.fromkeys(created, time.monotonic())  # latency: from kube-scheduler started
        plane.components[scheduler_name].start()
    try:
        poll(
            lambda: len(watch.bound) >= pods,
            timeout=timeout,
            interval=0.2,
            what=f"{label}: {pods} pods bound",
        )
    except TimeoutError:
        check_allocations(sc, mode, label)  # a pod bound without its device says more than the timeout
        raise
    seconds = max(watch.bound.values()) - (min(watch.bound.values()) if backlog else start)
    used = Usage.of(plane).since(used_before)
    cpu_seconds = time.monotonic() - cpu_since
    requests = _minus(_api_requests(plane), requests_before)
    watch.stop()
    latencies = [watch.bound[n] - created[n] for n in created if n in watch.bound]
    run = Run(mode, pods, seconds, latencies, used.cpu, used.waiting)
    run.cpu_seconds = cpu_seconds
    run.requests = requests
    run.creating_seconds = creating_seconds
    run.creating_cores, run.creating_client_ms = creating_cores, 1000 * client_cpu / pods
    if answered_before is not None:
        answered_after, holds_after = _answered(plane)
        run.answer_ms = _mean_ms(answered_before[0], answered_after)
        run.holds = {result: holds_after[result] - answered_before[1][result] for result in HOLD_RESULTS}
    cycles_after = _cycles(scheduler_url)
    if cycles_before is None:
        cycles_before = dict.fromkeys(cycles_after, (0.0, 0.0))
    run.cycle_ms = _mean_ms(cycles_before, cycles_after)
    run.cycles = round(cycles_after["algorithm"][1] - cycles_before["algorithm"][1])
    print(
        f"{label}: {run.pods} pods in {run.seconds:.1f} s ({run.rate:.1f}/s), created in "
        f"{run.creating_seconds:.1f} s by {create_threads} threads ({run.creating_cores:.2f} cores busy, "
        f"this process {run.creating_client_ms:.1f} ms CPU per pod)",
        flush=True,
    )
    if profile is not None:
        print(f"{label}: kube-scheduler CPU profile {profile.path}\n{profile.summary()}", flush=True)
    check_allocations(sc, mode, label)
    clean(sc)
    return run


def check_allocations(sc: Scenario, mode: str, label: str) -> None:
    """Raise RuntimeError naming the first ``allocation_problems`` of the run, for the modes that allocate
    (the null extender binds without allocating)."""
    if mode == "null":
        return
    problems = allocation_problems(sc.kube.list("Pod", sc.namespace), sc.claims())
    if problems:
        raise RuntimeError(f"{label}: bound pods without their devices: {'; '.join(problems[:5])}")


def allocation_problems(pods: list[dict[str, Any]], claims: list[dict[str, Any]]) -> list[str]:
    """What is wrong with a run's allocations: a bound pod without a claim it owns, a claim of its that fails
    ``bound_claim_problems`` or holds devices of another node's pool (the workload names each node's pool
    after the node), or a device in two claims. A run whose pods were bound without their devices measured
    nothing."""
    owned: dict[str, list[dict[str, Any]]] = {}
    for claim in claims:
        for owner in claim["metadata"].get("ownerReferences") or ():
            if owner.get("kind") == "Pod":
                owned.setdefault(owner["uid"], []).append(claim)
    problems: list[str] = []
    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        if not node:
            continue
        if pod["metadata"]["uid"] not in owned:
            problems.append(f"{name}: no claim")
        for claim in owned.get(pod["metadata"]["uid"], ()):
            problems += bound_claim_problems(pod, claim)
            if any(pool != node for _, pool, _ in allocated_devices(claim)):
                problems.append(
                    f"{name}: claim {claim['metadata']['name']} holds devices of another node's pool"
                )
    for device, holders in claims_sharing_devices(claims).items():
        problems.append(f"{'/'.join(device)} is in {' and '.join(c['metadata']['name'] for c in holders)}")
    return problems


def clean(sc: Scenario) -> None:
    """Delete the run's pods, then (once the garbage collector and the resourceclaim controller have
    removed their claims) its slices, nodes and DeviceClasses, so the next run starts from an empty
    cluster."""
    sc.kube.delete_all("Pod", sc.namespace)
    poll(
        lambda: not sc.kube.list("ResourceClaim", sc.namespace), timeout=600, interval=1.0, what="claims gone"
    )
    nodes = set(sc.nodes)
    for resource_slice in sc.kube.list("ResourceSlice"):
        if resource_slice["spec"].get("nodeName") in nodes:
            sc.kube.delete("ResourceSlice", resource_slice["metadata"]["name"])
    for node in sc.nodes:
        sc.kube.delete("Node", node)
    for device_class in sc.device_classes:
        sc.kube.delete("DeviceClass", device_class)
    sc.kube.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(runs: list[Run], nodes: int, devices: int, target: str, *, backlog: bool = False) -> str:
    """One table: the in-tree plugin, then each other mode measured and its ratio to the in-tree plugin;
    ``backlog``: runs of ``_one_run(backlog=True)``."""
    modes = [m for m in MODE_COMPONENTS if any(r.mode == m for r in runs)]
    by_mode = {m: [r for r in runs if r.mode == m] for m in modes}
    others = [m for m in modes if m != "in-tree"]

    def median_of(mode: str, measure: Callable[[Run], float]) -> float:
        return statistics.median(measure(r) for r in by_mode[mode])

    rows = []
    rate = "pods/s (first bound -> last)" if backlog else "pods/s (created -> bound)"
    for label, measure, unit, higher_better in (
        (rate, lambda r: r.rate, "", True),
        ("latency p50", lambda r: percentile(r.latencies, 0.5), "s", False),
        ("latency p99", lambda r: percentile(r.latencies, 0.99), "s", False),
    ):
        theirs = median_of("in-tree", measure)
        row = [f"{label} {nodes}x{devices}", f"{theirs:.2f}{unit}"]
        for mode in others:
            ours = median_of(mode, measure)
            ratio = ours / theirs if higher_better else theirs / ours
            row += [f"{ours:.2f}{unit}", f"{ratio:.2f}x"]
        rows.append([*row, target if higher_better else ""])

    def per_mode(label: str, measure: Callable[[Run], float], form: str) -> None:
        rows.append([label, *_cells(modes, lambda m: median_of(m, measure), form), ""])

    if not backlog:
        # The client creates pods as fast as the shared cores let it: a path that binds each pod soon after
        # it is created measures this rate, not its own.
        per_mode(
            "pods/s created (created -> bound stays below)", lambda r: r.pods / r.creating_seconds, "{:.2f}"
        )
        per_mode(
            "s from the last pod created to the last bound",
            lambda r: r.seconds - r.creating_seconds,
            "{:.2f}",
        )

    def per_component(label: str, used: Callable[[Run], dict[str, float]]) -> None:
        """A row per component that used any (``used``: a run's seconds per component)."""
        for name in COMPONENTS:
            if any(median_of(m, lambda r: used(r).get(name, 0.0)) for m in modes):  # noqa: B023 - at once
                per_mode(f"{label}: {name}", lambda r: used(r).get(name, 0.0), "{:.1f}")  # noqa: B023

    per_component("CPU s", lambda r: r.cpu)
    # On 2 shared cores every component competes for the same CPU: when the cores are busy throughout,
    # pods/s follows the CPU all of them spend per pod.
    per_mode("CPU ms per pod, all components", lambda r: 1000 * sum(r.cpu.values()) / r.pods, "{:.1f}")
    per_mode("cores busy, all components", lambda r: sum(r.cpu.values()) / r.cpu_seconds, "{:.2f}")
    # ...and a thread ready to run waits for a core: on kube-scheduler's and the extender's, each cycle.
    per_component("waiting for a core, s", lambda r: r.waiting)
    per_mode(
        "waiting for a core, ms per pod, all components",
        lambda r: 1000 * sum(r.waiting.values()) / r.pods,
        "{:.1f}",
    )
    # The same writes on both paths, or not: kube-apiserver's requests per pod by kind, from every client.
    for key in sorted({key for r in runs for key in r.requests}):

        def per_pod(r: Run, key: str = key) -> float:
            return r.requests.get(key, 0.0) / r.pods

        if any(median_of(m, per_pod) >= API_REQUESTS_SHOWN for m in modes):
            per_mode(f"API requests per pod: {key}", per_pod, "{:.2f}")
    per_mode("kube-scheduler: cycles per pod", lambda r: r.cycles / r.pods, "{:.2f}")
    for part in CYCLE_PARTS:
        per_mode(f"kube-scheduler: {part} (mean ms per cycle)", lambda r: r.cycle_ms.get(part, 0.0), "{:.2f}")  # noqa: B023

    def extender_only(label: str, measure: Callable[[Run], float], form: str) -> None:
        value = form.format(median_of("extender", measure))
        rows.append([label, "", *(c for m in others for c in (value if m == "extender" else "", "")), ""])

    if "extender" in others:
        for verb in VERBS:
            extender_only(
                f"extender answering {verb} (mean)", lambda r, v=verb: r.answer_ms.get(v, 0.0), "{:.1f} ms"
            )
        for result in HOLD_RESULTS:
            extender_only(
                f"extender: prioritize holds {result} per pod",
                lambda r, h=result: r.holds.get(h, 0.0) / r.pods,
                "{:.2f}",
            )
    headers = ["measure", "in-tree plugin"]
    for mode in others:
        headers += [mode, f"{mode} / in-tree (>1: better)"]
    return table([*headers, "target"], rows)


def _cells(modes: list[str], value: Callable[[str], float], form: str) -> list[str]:
    """A row's cells for ``modes`` (the in-tree plugin first, then each other mode and an empty ratio)."""
    cells = [form.format(value(modes[0]))]
    for mode in modes[1:]:
        cells += [form.format(value(mode)), ""]
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_k8s", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes", type=int, default=500, help="nodes in each run, each with one ResourceSlice of --devices"
    )
    parser.add_argument("--devices", type=int, default=8, help="devices per node")
    parser.add_argument(
        "--pods", type=int, default=0, help="pods per run (default: a quarter of the devices)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternating")
    parser.add_argument(
        "--modes",
        default="in-tree,extender",
        help="comma-separated, from in-tree, extender, null (bench/nullextender: the ceiling of any "
        "extender on this kube-scheduler configuration) and null-writes (the same, allocating each claim "
        "through the API as the in-tree plugin does); in-tree is always measured, as the baseline",
    )
    parser.add_argument(
        "--qps",
        type=float,
        default=EQUAL_QPS,
        help="the API client rate limit of both kube-schedulers and of the extender in the headline table "
        f"(burst twice that; default {EQUAL_QPS:g})",
    )
    parser.add_argument(
        "--default-qps",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run every component at its default rate limit (kube-scheduler's 50 QPS, burst 100; the "
        "extender's the same) and print that table second",
    )
    parser.add_argument(
        "--headline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the headline table (pods created while the schedulers run, at the equal rate limit)",
    )
    parser.add_argument(
        "--backlog",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run at the equal rate limit with every pod created before kube-scheduler starts, and "
        "print that table (first pod bound to last: the schedulers alone, without the pod creation they "
        "share 2 cores with) after the headline",
    )
    parser.add_argument(
        "--create-threads",
        type=int,
        default=CREATE_THREADS,
        help=f"threads creating the pods, each with its own client (default {CREATE_THREADS})",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take")
    parser.add_argument(
        "--scheduler-v",
        type=int,
        help="both kube-schedulers' --v (3 logs each scheduling attempt)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="SECONDS",
        help="take a CPU profile of each headline run's kube-scheduler over its first SECONDS and print "
        "its top call paths (go tool pprof; backlog runs are not profiled)",
    )
    parser.add_argument(
        "--nodes-to-score",
        type=int,
        metavar="PERCENT",
        help="the extender's kube-scheduler's percentageOfNodesToScore instead of the shipped 100 (0: "
        "kube-scheduler's adaptive default, as the in-tree run uses), given to the extender too as the "
        "chart's kubeScheduler.percentageOfNodesToScore does",
    )
    parser.add_argument(
        "--device-scoring",
        choices=DEVICE_SCORING,
        default="prioritize",
        help="the extender's --device-scoring, its kube-scheduler configured to match as the chart's "
        "kubeScheduler.deviceScoring does (filter: no prioritizeVerb); the null modes' too (filter: they "
        "pass on one node)",
    )
    parser.add_argument(
        "--extender-nodes-to-score",
        type=int,
        metavar="PERCENT",
        help="the extender's --percentage-of-nodes-to-score instead of its default 0 (adaptive; 100: it "
        "passes on every node that fits)",
    )
    args = parser.parse_args(argv)
    pods = args.pods or args.nodes * args.devices // 4
    if pods > args.nodes * args.devices:
        parser.error(
            f"--pods {pods}: more than the {args.nodes * args.devices} devices; the run would never end"
        )
    if args.create_threads < 1:
        parser.error(f"--create-threads {args.create_threads}: at least 1 thread creates the pods")
    sampling = args.extender_nodes_to_score
    modes = ["in-tree", *(m for m in MODE_COMPONENTS if m != "in-tree" and m in args.modes.split(","))]
    remove(RUN_DIR)
    # kube-scheduler and the extender at 1.37's default gates: the workload needs no other, and the e2e
    # plane's DRANodeAllocatableResources would slow the in-tree plugin's Filter (FEATURE_GATES).
    plane = ControlPlane(RUN_DIR, build_binaries(), scheduling_gates=None)
    null_binary = _build_null_extender() if {"null", "null-writes"} & set(modes) else None
    tables: list[tuple[str, bool, list[Run]]] = []
    phases: list[tuple[float | None, bool]] = [
        *([(args.qps, False)] if args.headline else []),
        *([(args.qps, True)] if args.backlog else []),
        *([(None, False)] if args.default_qps else []),
    ]
    try:
        plane.start()
        for phase, (qps, backlog) in enumerate(phases):
            runs: list[Run] = []
            for round_ in range(args.rounds):
                # Alternate the order round by round, so no mode always runs first (on a fresh machine) or
                # last.
                order = modes if round_ % 2 == 0 else modes[::-1]
                for mode in order:
                    label = f"p{phase}-r{round_}-{mode}"
                    stop_schedulers(plane)
                    start_mode(
                        plane,
                        mode,
                        qps,
                        scheduler_v=args.scheduler_v,
                        profiling=bool(args.profile),
                        nodes_to_score=args.nodes_to_score,
                        extender_nodes_to_score=args.extender_nodes_to_score,
                        device_scoring=args.device_scoring,
                        null_binary=null_binary,
                    )
                    run = _one_run(
                        plane,
                        mode,
                        label,
                        args.nodes,
                        args.devices,
                        pods,
                        args.timeout,
                        args.profile,
                        backlog=backlog,
                        create_threads=args.create_threads,
                    )
                    runs.append(run)
            tables.append((_budget(qps, backlog), backlog, runs))
    finally:
        plane.stop()
    target = ">= 1.2x" if args.nodes <= 500 else ">= 1.5x"
    if args.nodes_to_score is not None:
        print(f"the extender's kube-scheduler ran with percentageOfNodesToScore: {args.nodes_to_score}")
    if sampling is not None:
        print(f"the extender ran with --percentage-of-nodes-to-score={sampling}")
    if args.device_scoring != "prioritize":
        print(
            f"the extender and the null modes ran with --device-scoring={args.device_scoring} (their "
            "kube-schedulers to match)"
        )
    for number, (budget, backlog, runs) in enumerate(tables, 1):
        print(f"\nTable {number}: {budget}")
        print(report(runs, args.nodes, args.devices, target, backlog=backlog))
    print(f"component logs: {RUN_DIR / 'logs'}")
    return 0


EQUAL_QPS = 1000.0
"""The headline table's API rate limit for every client: well above what 2 cores schedule, so the table
compares the two schedulers' work per pod, not their clients' budgets."""

DEFAULT_QPS, DEFAULT_BURST = 50, 100
"""kube-scheduler's default ``clientConnection`` (and the extender's ``--kube-api-qps`` / ``-burst``)."""


def _budget(qps: float | None, backlog: bool) -> str:
    """What the table's runs had as API budget, and how pods arrived, for its title."""
    if backlog:
        return (
            f"backlog, equal API rate limit (qps {qps:g}, burst {int(2 * (qps or 0))}): every pod and claim "
            "created with kube-scheduler stopped; pods/s from the first pod bound to the last, latency from "
            "kube-scheduler started"
        )
    if qps is None:
        return (
            f"every component at its default API rate limit: both kube-schedulers' clientConnection "
            f"qps {DEFAULT_QPS}, burst {DEFAULT_BURST} (kube-scheduler's default), the extender's "
            f"--kube-api-qps {DEFAULT_QPS} --kube-api-burst {DEFAULT_BURST} (its default, the same)"
        )
    return (
        f"equal API rate limit: both kube-schedulers' clientConnection qps {qps:g}, burst {int(2 * qps)}; "
        f"the extender's --kube-api-qps {qps:g} --kube-api-burst {int(2 * qps)}"
    )


def _build_null_extender() -> Path:
    """``go build`` of ``bench/nullextender`` (standard library only) into the run's cache."""
    binary = ROOT / ".cache" / "nullextender" / "nullextender"
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("--modes null needs go on PATH to build bench/nullextender")
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=NULL_EXTENDER_SRC, check=True)
    return binary


def stop_schedulers(plane: ControlPlane) -> None:
    """Stop every mode's kube-scheduler and extender (``MODE_COMPONENTS``)."""
    for names in MODE_COMPONENTS.values():
        for name in names:
            if name in plane.components:
                plane.components[name].stop()


def start_mode(
    plane: ControlPlane,
    mode: str,
    qps: float | None,
    *,
    scheduler_v: int | None = None,
    profiling: bool = False,
    nodes_to_score: int | None = None,
    extender_nodes_to_score: int | None = None,
    device_scoring: str = "prioritize",
    null_binary: Path | None = None,
) -> None:
    """Start ``mode``'s kube-scheduler and extender (``MODE_COMPONENTS``) with API rate limit ``qps`` (burst
    twice that; None: each one's default); the other arguments as ``bench_k8s``'s flags of the same names
    say, ``null_binary`` from
    ``_build_null_extender``."""
    common = {"qps": qps, "verbosity": scheduler_v, "profiling": profiling}
    if mode == "in-tree":
        plane.start_scheduler(with_extender=False, **common)
        return
    if mode in ("null", "null-writes"):
        if null_binary is None:
            raise ValueError(f"mode {mode} needs the null extender built (_build_null_extender)")
        name, _ = MODE_COMPONENTS[mode]
        sampling = extender_nodes_to_score or 0  # the extender's default: adaptive
        writes = ["--write-claims"] if mode == "null-writes" else []
        plane.start_null_extender(
            null_binary,
            f"--percentage-of-nodes-to-score={sampling}",
            f"--device-scoring={device_scoring}",
            *writes,
            qps=qps,
            name=name,
        )
        plane.start_scheduler(
            nodes_to_score=nodes_to_score, device_scoring=device_scoring, extender=name, **common
        )
        return
    extra = []
    if extender_nodes_to_score is not None:
        extra.append(f"--percentage-of-nodes-to-score={extender_nodes_to_score}")
    if nodes_to_score is not None:
        extra.append(f"--scheduler-percentage-of-nodes-to-score={nodes_to_score}")  # as the chart's value
    if qps is not None:
        extra += [f"--kube-api-qps={qps:g}", f"--kube-api-burst={int(2 * qps)}"]
    plane.start_extender(*extra, f"--device-scoring={device_scoring}")
    plane.start_scheduler(nodes_to_score=nodes_to_score, device_scoring=device_scoring, **common)


if __name__ == "__main__":
    raise SystemExit(main())
