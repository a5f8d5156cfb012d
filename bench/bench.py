"""``make bench``: the extender at cluster scale, side by side with the parse-and-echo floor.

A client that behaves like kube-scheduler (one scheduling cycle at a time: filter -> prioritize -> bind,
``nodeCacheCapable: true``, every node name in each call) drives a server subprocess (``bench.server``):
the real extender on a synthetic cluster, or the floor (same routes, parse and echo only). Prints one
table of every measure with its target. Absolute times drift between machines; compare ratios to the
floor measured in the same run. Run ``python -m bench.bench --quick`` for a smaller, faster pass.

Measures (issue "Performance"): fill-up pods/s at 500 x 10; steady state at 90 % full with churn;
per-verb p50/p99 at 5000 x 8; a pod without claims at 5000 nodes; ResourceSlice updates applied per
second; peak RSS at 5000 x 8 with 20,000 allocated claims.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import resource
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


def fill_up(client: httpx.Client, shape: Shape, limit: int) -> Timings:
    """Pods of one 1-GPU claim each until nothing fits (or ``limit`` pods)."""
    names = [node_name(i) for i in range(shape.nodes)]
    timings = Timings()
    start = time.perf_counter()
    for index in range(limit):
        if _cycle(client, _new_pod(client, index), names, timings) is None:
            break
    timings.elapsed = time.perf_counter() - start
    return timings


def steady_state(client: httpx.Client, shape: Shape, cycles: int, seed: int = 1) -> Timings:
    """Fill to 90 %, then delete a random placed pod and schedule a new one, ``cycles`` times."""
    names = [node_name(i) for i in range(shape.nodes)]
    rng = random.Random(seed)
    warm = Timings()
    placed: list[str] = []
    target = int(shape.nodes * shape.gpus * 0.9)
    for index in range(target):
        pod = _new_pod(client, index)
        if _cycle(client, pod, names, warm):
            placed.append(pod["metadata"]["name"])
    timings = Timings()
    start = time.perf_counter()
    for index in range(target, target + cycles):
        victim = placed.pop(rng.randrange(len(placed)))
        _post(client, "/bench/delete", {"name": victim})
        pod = _new_pod(client, index)
        if _cycle(client, pod, names, timings):
            placed.append(pod["metadata"]["name"])
    timings.elapsed = time.perf_counter() - start
    return timings


def no_claim_filter(client: httpx.Client, shape: Shape, calls: int) -> list[float]:
    """Filter latency of a pod without claims over every node (the fast path)."""
    names = [node_name(i) for i in range(shape.nodes)]
    pod = {
        "metadata": {"name": "plain", "namespace": "bench", "uid": "plain-uid"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }
    return [
        _post(client, "/scheduler/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})[1]
        for _ in range(calls)
    ]


def slice_updates(shape: Shape, updates: int) -> float:
    """ResourceSlice update events applied per second (in-process, as a watch would feed them)."""
    from app.cluster import ClusterState

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer cycles")
    args = parser.parse_args(argv)
    # The shapes count devices per node: GPUs only (pass --nics to bench.server for mixed nodes).
    small = Shape(100 if args.quick else 500, 10, nics=0)
    large = Shape(1000 if args.quick else 5000, 8, nics=0)
    cycles = 50 if args.quick else 200
    rows: list[tuple[str, str, str, str]] = []

    for label, kind in (("extender", "extender"), ("floor", "floor")):
        with _server(kind, small) as client:
            fill = fill_up(client, small, small.nodes * small.gpus + 1)
        with _server(kind, small) as client:
            steady = steady_state(client, small, cycles)
        with _server(kind, large) as client:
            big = Timings()
            names = [node_name(i) for i in range(large.nodes)]
            for index in range(cycles):
                _cycle(client, _new_pod(client, index), names, big)
            plain = no_claim_filter(client, large, cycles)
        rows += [
            (
                label,
                f"fill-up {small.nodes}x{small.gpus}",
                f"{fill.pods_per_second:.0f} pods/s",
                f"filter p50 {_ms(fill.filter, 0.5):.2f} ms, "
                f"prioritize p50 {_ms(fill.prioritize, 0.5):.2f} ms, "
                f"bind p50 {_ms(fill.bind, 0.5):.2f} ms, {fill.placed} placed",
            ),
            (
                label,
                f"steady 90% {small.nodes}x{small.gpus}",
                f"{steady.pods_per_second:.0f} pods/s",
                f"filter p50 {_ms(steady.filter, 0.5):.2f} ms",
            ),
            (
                label,
                f"{large.nodes}x{large.gpus} filter",
                f"p50 {_ms(big.filter, 0.5):.2f} ms",
                f"p99 {_ms(big.filter, 0.99):.2f} ms",
            ),
            (
                label,
                f"{large.nodes}x{large.gpus} prioritize",
                f"p50 {_ms(big.prioritize, 0.5):.2f} ms",
                f"p99 {_ms(big.prioritize, 0.99):.2f} ms",
            ),
            (
                label,
                f"{large.nodes}x{large.gpus} bind",
                f"p50 {_ms(big.bind, 0.5):.2f} ms",
                f"p99 {_ms(big.bind, 0.99):.2f} ms",
            ),
            (
                label,
                f"no-claim pod, {large.nodes} nodes",
                f"p50 {_ms(plain, 0.5):.2f} ms",
                f"p99 {_ms(plain, 0.99):.2f} ms",
            ),
        ]
    updates = slice_updates(large, 20_000)
    rows.append(("extender", "ResourceSlice updates", f"{updates:,.0f} /s", f"{1e6 / updates:.1f} µs each"))
    claims = 4_000 if args.quick else 20_000
    rows.append(
        (
            "extender",
            f"peak RSS {large.nodes}x{large.gpus}, {claims} claims",
            f"{peak_rss_mb(large, claims):.0f} MB",
            f"this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB",
        )
    )
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width[i]) if i < 3 else cell for i, cell in enumerate(row)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
