"""``make bench``: the extender at cluster scale, side by side with the parse-and-echo floor.

A client that behaves like kube-scheduler (one scheduling cycle at a time: filter -> prioritize -> bind,
``nodeCacheCapable: true``, every node name in each call) drives two server subprocesses
(``bench.server``): the real extender on a synthetic cluster and the floor (same routes, parse and echo
only), alternating between them cycle by cycle so that both see the same machine. Prints one table of
every measure. Absolute times drift between machines; compare ratios to the floor of the same run.
Run ``python -m bench.bench --quick`` for a smaller, faster pass.

Measures (issue "Performance"): fill-up pods/s at 500 x 10; steady state at 90 % full with churn;
per-verb p50/p99 at 5000 x 8; a pod without claims at 5000 nodes; ResourceSlice updates applied per
second; peak RSS at 5000 x 8 with 20,000 allocated claims and at 20,000 x 8 with 50,000.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import orjson

from bench.synthetic import Shape, cluster_objects, node_name

__all__ = ["main"]


@dataclass(slots=True)
class Timings:
    """Per-verb latencies in seconds and the number of placed pods."""

    filter: list[float] = field(default_factory=list)
    prioritize: list[float] = field(default_factory=list)
    bind: list[float] = field(default_factory=list)
    placed: int = 0
    elapsed: float = 0.0

    @property
    def pods_per_second(self) -> float:
        return self.placed / self.elapsed if self.elapsed else 0.0


Clients = dict[str, httpx.Client]
"""The servers of one run by label (``extender``, ``floor``): every measure alternates between them call by
call, so a noisy neighbour slows both alike and the ratios hold."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(kind: str, shape: Shape, allocated: int = 0) -> Iterator[httpx.Client]:
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "bench.server",
        kind,
        "--port",
        str(port),
        "--nodes",
        str(shape.nodes),
        "--gpus",
        str(shape.gpus),
        "--allocated",
        str(allocated),
    ]
    process = subprocess.Popen(command)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                client.get("/healthz" if kind == "extender" else "/docs")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{kind} server did not start") from None
                time.sleep(0.2)
        yield client
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def _servers(shape: Shape) -> Iterator[Clients]:
    """The extender and the floor on the same synthetic cluster, both running for the whole measure."""
    with _server("extender", shape) as extender, _server("floor", shape) as floor:
        yield {"extender": extender, "floor": floor}


def _post(client: httpx.Client, path: str, body: object) -> tuple[object, float]:
    payload = orjson.dumps(body)
    start = time.perf_counter()
    response = client.post(path, content=payload, headers={"Content-Type": "application/json"})
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return orjson.loads(response.content), elapsed


def _cycle(client: httpx.Client, pod: dict, names: list[str], timings: Timings) -> str | None:
    """One scheduling cycle for ``pod``; returns the node it was bound to, or None."""
    result, t = _post(client, "/scheduler/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
    timings.filter.append(t)
    passed = result["NodeNames"] or []  # type: ignore[index]
    if not passed:
        return None
    best = passed[0]
    if len(passed) > 1:
        scores, t = _post(client, "/scheduler/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": passed})
        timings.prioritize.append(t)
        best = max(scores, key=lambda s: s["Score"])["Host"]  # type: ignore[arg-type,index]
    meta = pod["metadata"]
    answer, t = _post(
        client,
        "/scheduler/bind",
        {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best},
    )
    timings.bind.append(t)
    if answer["Error"]:  # type: ignore[index]
        raise RuntimeError(f"bind failed: {answer}")
    timings.placed += 1
    return best


def _new_pod(client: httpx.Client, index: int) -> dict:
    pod, _ = _post(client, "/bench/pods", {"index": index})
    return pod  # type: ignore[return-value]


def _timed_cycle(client: httpx.Client, index: int, names: list[str], timings: Timings) -> dict | None:
    """Create pod ``index`` and schedule it; its time counts towards pods/s. The pod if it was placed."""
    start = time.perf_counter()
    pod = _new_pod(client, index)
    placed = _cycle(client, pod, names, timings)
    timings.elapsed += time.perf_counter() - start
    return pod if placed else None


def _node_names(shape: Shape) -> list[str]:
    """Every node of the synthetic cluster: what kube-scheduler sends with ``nodeCacheCapable: true``."""
    return [node_name(i) for i in range(shape.nodes)]


def fill_up(clients: Clients, shape: Shape, limit: int) -> dict[str, Timings]:
    """Pods of one 1-GPU claim each until nothing fits (or ``limit`` pods), per server."""
    names = _node_names(shape)
    timings = {label: Timings() for label in clients}
    full: set[str] = set()
    for index in range(limit):
        for label, client in clients.items():
            if label not in full and _timed_cycle(client, index, names, timings[label]) is None:
                full.add(label)
        if len(full) == len(clients):
            break
    return timings


def steady_state(clients: Clients, shape: Shape, cycles: int, seed: int = 1) -> dict[str, Timings]:
    """Fill to 90 %, then delete a random placed pod and schedule a new one, ``cycles`` times."""
    names = _node_names(shape)
    target = int(shape.nodes * shape.gpus * 0.9)
    placed: dict[str, list[str]] = {label: [] for label in clients}
    for index in range(target):
        for label, client in clients.items():
            pod = _timed_cycle(client, index, names, Timings())
            if pod is not None:
                placed[label].append(pod["metadata"]["name"])
    timings = {label: Timings() for label in clients}
    rngs = {label: random.Random(seed) for label in clients}
    for index in range(target, target + cycles):
        for label, client in clients.items():
            start = time.perf_counter()
            victim = placed[label].pop(rngs[label].randrange(len(placed[label])))
            _post(client, "/bench/delete", {"name": victim})
            timings[label].elapsed += time.perf_counter() - start
            pod = _timed_cycle(client, index, names, timings[label])
            if pod is not None:
                placed[label].append(pod["metadata"]["name"])
    return timings


def large_cycles(clients: Clients, shape: Shape, cycles: int) -> dict[str, Timings]:
    """``cycles`` scheduling cycles on a big, mostly empty cluster, per server."""
    names = _node_names(shape)
    timings = {label: Timings() for label in clients}
    for index in range(cycles):
        for label, client in clients.items():
            _timed_cycle(client, index, names, timings[label])
    return timings


def no_claim_filter(clients: Clients, shape: Shape, calls: int) -> dict[str, list[float]]:
    """Filter latency of a pod without claims over every node (the fast path), per server."""
    names = _node_names(shape)
    pod = {
        "metadata": {"name": "plain", "namespace": "bench", "uid": "plain-uid"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }
    body = {"Pod": pod, "Nodes": None, "NodeNames": names}
    latencies: dict[str, list[float]] = {label: [] for label in clients}
    for _ in range(calls):
        for label, client in clients.items():
            latencies[label].append(_post(client, "/scheduler/filter", body)[1])
    return latencies


def slice_updates(shape: Shape, updates: int) -> float:
    """ResourceSlice update events applied per second (in-process, as a watch would feed them)."""
    from app.state.cluster import ClusterState

    objects = list(cluster_objects(shape))
    state = ClusterState.from_objects(objects)
    slices = [obj for kind, obj in objects if kind == "ResourceSlice"]
    start = time.perf_counter()
    for i in range(updates):
        obj = slices[i % len(slices)]
        updated = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(i + 2)}}
        state.apply("ResourceSlice", updated)
    return updates / (time.perf_counter() - start)


def peak_rss_mb(shape: Shape, allocated: int) -> float:
    """Peak RSS of a process holding the extender's state at ``shape`` with ``allocated`` claims."""
    code = (
        "import resource, sys; from bench.server import build_service; from bench.synthetic import Shape; "
        f"s = build_service(Shape({shape.nodes}, {shape.gpus}, {shape.nics}), {allocated}); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def _ms(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _p99_label(values: list[float]) -> str:
    """``p99``, or ``max`` where there are too few samples for a 99th percentile to differ from it."""
    return "p99" if len(values) >= 100 else "max"


@dataclass(frozen=True, slots=True)
class Row:
    """One measure: the extender's and the floor's value, and the target (a ratio to the floor, or an
    absolute bound when ``floor`` is None)."""

    measure: str
    unit: str
    extender: float
    floor: float | None
    target: str

    def cells(self) -> list[str]:
        fmt = (
            "{:,.0f}"
            if self.unit in ("pods", "pods/s", "MB")
            else "{:.2f}"
            if self.unit == "ms"
            else "{:.1f}"
        )
        ratio = f"{self.extender / self.floor:.2f}x" if self.floor else ""
        floor = "" if self.floor is None else f"{fmt.format(self.floor)} {self.unit}"
        return [self.measure, f"{fmt.format(self.extender)} {self.unit}", floor, ratio, self.target]


def _latency_rows(
    name: str, ext: list[float], floor: list[float], p50_target: str, p99_target: str = ""
) -> list[Row]:
    return [
        Row(f"{name} p50", "ms", _ms(ext, 0.5), _ms(floor, 0.5), p50_target),
        Row(f"{name} {_p99_label(ext)}", "ms", _ms(ext, 0.99), _ms(floor, 0.99), p99_target),
    ]


GROUPS = ("fill", "steady", "large", "slices", "rss")
"""What ``--only`` can pick: fill-up, steady state (both at the small shape), the cycles at the large shape
(first pod of a claim shape, per-verb latencies, the no-claim pod), ResourceSlice updates, peak RSS."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer cycles")
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=list(GROUPS),
        help=f"comma-separated measures to run, of {', '.join(GROUPS)} (default: all)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only) - set(GROUPS))
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    # The shapes count devices per node: GPUs only (pass --nics to bench.server for mixed nodes).
    small = Shape(100 if args.quick else 500, 10, nics=0)
    large = Shape(1000 if args.quick else 5000, 8, nics=0)
    cycles = 50 if args.quick else 200
    claims = 4_000 if args.quick else 20_000
    # The memory bound: 20,000 nodes x 8 devices holding 50,000 allocated claims.
    huge, huge_claims = (Shape(4000, 8, nics=0), 10_000) if args.quick else (Shape(20_000, 8, nics=0), 50_000)
    ext, flo = "extender", "floor"
    small_name, large_name = f"{small.nodes}x{small.gpus}", f"{large.nodes}x{large.gpus}"

    def p50(name: str, runs: dict[str, Timings], verb: str, target: str) -> Row:
        ext_values, floor_values = getattr(runs[ext], verb), getattr(runs[flo], verb)
        return Row(f"{name}: {verb} p50", "ms", _ms(ext_values, 0.5), _ms(floor_values, 0.5), target)

    rows: list[Row] = []
    if "fill" in args.only:
        with _servers(small) as clients:
            fill = fill_up(clients, small, small.nodes * small.gpus + 1)
        fill_name = f"fill-up {small_name}"
        rows += [
            Row(f"{fill_name}: pods placed", "pods", fill[ext].placed, fill[flo].placed, ""),
            Row(fill_name, "pods/s", fill[ext].pods_per_second, fill[flo].pods_per_second, ">= 0.7x"),
            p50(fill_name, fill, "filter", "<= 1.5x"),
            p50(fill_name, fill, "prioritize", "<= 1.5x"),
            p50(fill_name, fill, "bind", "<= 2x"),
        ]
    if "steady" in args.only:
        with _servers(small) as clients:
            steady = steady_state(clients, small, cycles)
        steady_name = f"steady 90% {small_name}"
        rows += [
            Row(steady_name, "pods/s", steady[ext].pods_per_second, steady[flo].pods_per_second, ""),
            p50(steady_name, steady, "filter", "<= 2x"),
        ]
    if "large" in args.only:
        with _servers(large) as clients:
            # The first pod of a claim shape decides every node once; it is reported apart from the others.
            first = large_cycles(clients, large, 1)
            big = large_cycles(clients, large, cycles)
            plain = no_claim_filter(clients, large, cycles)

        def once(verb: str) -> Row:
            ext_ms, floor_ms = (1000 * getattr(first[label], verb)[0] for label in (ext, flo))
            return Row(f"{large_name} first pod of a claim shape: {verb}", "ms", ext_ms, floor_ms, "")

        rows += [
            *_latency_rows(
                f"{large_name} filter", big[ext].filter, big[flo].filter, "<= 1.5x", "<= 10 ms (p99)"
            ),
            *_latency_rows(f"{large_name} prioritize", big[ext].prioritize, big[flo].prioritize, "<= 1.5x"),
            *_latency_rows(f"{large_name} bind", big[ext].bind, big[flo].bind, "<= 2x"),
            once("filter"),
            once("prioritize"),
            *_latency_rows(f"no-claim pod, {large.nodes} nodes: filter", plain[ext], plain[flo], "<= 1.2x"),
        ]
    if "slices" in args.only:
        rows.append(
            Row("ResourceSlice update applied", "µs", 1e6 / slice_updates(large, 20_000), None, "<= 100 µs")
        )
    if "rss" in args.only:
        for shape, count in ((large, claims), (huge, huge_claims)):
            rows.append(
                Row(
                    f"peak RSS {shape.nodes}x{shape.gpus}, {count:,} claims",
                    "MB",
                    peak_rss_mb(shape, count),
                    None,
                    "<= 500 MB",
                )
            )
    table = [["measure", "extender", "floor", "ratio", "target"], *(row.cells() for row in rows)]
    width = [max(len(line[i]) for line in table) for i in range(5)]
    for line in table:
        print("  ".join(cell.ljust(width[i]) for i, cell in enumerate(line)).rstrip())
    print(
        f"Latencies: {cycles} cycles after the first pod of the claim shape (p99 needs 100, else max). "
        "The floor places every pod; the extender skips the tainted GPUs (every 97th, NoSchedule)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
