"""Hostile-input attacks against a served extender (issue 14, items 8-10): RSS and ``/livez`` under each.

    .venv/bin/python -m loadtests.attacks [--nodes 64] [--gpus 8]

Starts ``dra-extender serve`` on a synthetic cluster (``bench.synthetic``) on 127.0.0.1 as a subprocess,
runs each attack for a bounded time while probing ``/livez`` every 20 ms, and prints one JSON report: per
attack the server's peak RSS (``VmRSS`` of the process and its children, the probe listener's included:
the container's limit counts them all; sampled), its RSS afterwards, the p50, p99 and slowest ``/livez``
answer on the probe listener (``--health-probe-bind-address``, what the manifests' kubelet probes use)
and on the extender's own port, and what the attack's own requests got. Each attack's clients run in a
process of their own at a lower CPU priority (niceness ATTACKER_NICENESS): they stand for other machines,
and on a 2-core machine their work would otherwise be charged to the server's answers. A script, not a
test: the numbers depend on the machine; the target is 100 ms for the probe listener and the extender
container's memory limit in ``manifests/base`` (in the report). Stops by itself.

Attacks: ``what-if`` (4 clients in parallel sending what-if claims with a unique 10 Ki selector over every
node, while a filter loop runs: filter's slowest answer too), ``yaml`` (6 MB YAML what-if bodies),
``partial-bodies`` (150 connections each sending 7 MB of an 8 MiB body, then stalling), ``idle``
(1,100 connections that send nothing), ``pod-specs`` (filters of 300 pods with 1 MiB specs each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from bench.synthetic import GPU_CLASS, GPU_DRIVER, Shape, cluster_objects, gpu_pod, node_name

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
PROBE_EVERY = 0.02
ATTACKER_NICENESS = 10
ATTACK_SECONDS = 120


def rss_mib(pid: int) -> float:
    """RSS of process ``pid`` and its descendants, MiB (0 for a process that is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return own + sum(rss_mib(int(child)) for child in children)


def memory_limit() -> str:
    """The extender container's memory limit in the shipped Deployment."""
    documents = yaml.safe_load_all((ROOT / "manifests/base/deployment.yaml").read_text())
    deployment = next(d for d in documents if d and d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    container = next(c for c in [*spec["initContainers"], *spec["containers"]] if c["name"] == "dra-extender")
    return str(container["resources"]["limits"]["memory"])


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def selector(unique: int) -> str:
    """A 10 Ki CEL selector, different for every ``unique`` (a new program to compile each time)."""
    clause = f"device.attributes['{GPU_DRIVER}'].uuid != 'x{unique}-"
    parts = [f"{clause}{i}'" for i in range(10_000 // (len(clause) + 8))]
    return " && ".join(parts)


def what_if_claim(unique: int) -> dict[str, Any]:
    # Four GPUs on one PCIe root each (two per root exist): never fits, so every node is searched.
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"what-if-{unique}", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": GPU_CLASS,
                            "count": 4,
                            "selectors": [{"cel": {"expression": selector(unique)}}],
                        },
                    }
                ],
                "constraints": [{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            }
        },
    }


def probe(url: str, pid: int) -> None:
    """``--probe``: GET ``/livez`` every PROBE_EVERY seconds and sample the server's RSS until stdin
    closes, then print the answers' p50, p99 and slowest, the failures and the peak RSS as JSON, and how
    late this process woke from its sleeps (the machine's own scheduling delay, which every answer time
    includes). A process of its own, so the attack's client work does not delay the probe's requests; a
    new connection per probe, as the kubelet's, with the standard library's blocking client (little
    client-side work to measure besides the server's)."""
    host, _, port = url.removeprefix("http://").partition(":")
    took: list[float] = []
    late: list[float] = []
    failures, peak = 0, 0.0
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        started = time.perf_counter()
        connection = HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request("GET", "/livez")
            failures += connection.getresponse().status != 200
        except OSError:
            failures += 1
        finally:
            connection.close()
        took.append(time.perf_counter() - started)
        peak = max(peak, rss_mib(pid))
        slept = time.perf_counter()
        time.sleep(PROBE_EVERY)
        late.append(time.perf_counter() - slept - PROBE_EVERY)
    print(
        orjson.dumps(
            {
                **_spread(took),
                "count": len(took),
                "failures": failures,
                "peak": peak,
                "woke_late": _spread(late),
            }
        ).decode()
    )


def _spread(seconds: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``seconds``, in ms."""
    return {
        name: round(percentile(seconds, q) * 1000, 1) for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1))
    }


class Probe:
    """The ``--probe`` process for one attack."""

    def __init__(self, url: str, pid: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loadtests.attacks", "--probe", url, "--pid", str(pid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def finish(self) -> dict[str, Any]:
        out, _ = self.process.communicate(timeout=60)
        return orjson.loads(out)  # type: ignore[no-any-return]


async def attack_what_if(url: str, nodes: list[str], outcome: Counter[str]) -> None:
    pod, _ = gpu_pod(0)  # its claim is in the state (main)
    slowest_filter = 0.0
    done = asyncio.Event()

    async def filters() -> None:
        nonlocal slowest_filter
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while not done.is_set():
                started = time.perf_counter()
                await http.post("/scheduler/filter", content=orjson.dumps({"Pod": pod, "NodeNames": nodes}))
                slowest_filter = max(slowest_filter, time.perf_counter() - started)
                await asyncio.sleep(0.05)

    async def client(index: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for i in range(10):
                answer = await http.post(
                    "/api/v1/explain", content=orjson.dumps(what_if_claim(index * 100 + i))
                )
                outcome[f"what-if {answer.status_code}"] += 1

    running = asyncio.create_task(filters())
    await asyncio.gather(*(client(i) for i in range(4)))
    done.set()
    await running
    outcome["slowest filter ms"] = round(slowest_filter * 1000)


async def attack_yaml(url: str, nodes: list[str], outcome: Counter[str]) -> None:
    body = yaml.safe_dump(what_if_claim(0)) + ("# " + "x" * 998 + "\n") * 6000
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        answers = await asyncio.gather(*(http.post("/api/v1/explain", content=body) for _ in range(4)))
    for answer in answers:
        outcome[f"yaml {len(body) // 1_000_000} MB: {answer.status_code}"] += 1


async def attack_partial_bodies(url: str, nodes: list[str], outcome: Counter[str]) -> None:
    port = int(url.rsplit(":", 1)[1])
    head = b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Content-Length: 8000000\r\n\r\n"
    chunk = b"x" * 7_000_000
    writers = []

    async def one() -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        writers.append(writer)
        writer.write(head)
        try:
            writer.write(chunk)
            await asyncio.wait_for(writer.drain(), 15)
            status = await asyncio.wait_for(reader.readline(), 15)
            outcome[status.decode().strip() or "closed"] += 1
        except (TimeoutError, ConnectionError) as e:
            outcome[type(e).__name__] += 1

    await asyncio.gather(*(one() for _ in range(150)))
    for writer in writers:
        writer.close()


async def attack_idle(url: str, nodes: list[str], outcome: Counter[str]) -> None:
    port = int(url.rsplit(":", 1)[1])
    connections = [await asyncio.open_connection(HOST, port) for _ in range(1100)]
    await asyncio.sleep(7)  # past the 5 s the server gives a connection to send its request headers
    for reader, writer in connections:
        try:
            closed = await asyncio.wait_for(reader.read(1), 0.01) == b""
        except TimeoutError:
            closed = False
        outcome["closed by the server" if closed else "still open"] += 1
        writer.close()


async def attack_pod_specs(url: str, nodes: list[str], outcome: Counter[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for i in range(300):
            pod = {
                "metadata": {"name": f"big-{i}", "namespace": "bench", "uid": f"uid-big-{i}"},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "env": [{"name": "BIG", "value": "x" * (1 << 20)}],
                            "resources": {"limits": {f"deviceclass.resource.kubernetes.io/{GPU_CLASS}": "1"}},
                        }
                    ]
                },
            }
            answer = await http.post(
                "/scheduler/filter", content=orjson.dumps({"Pod": pod, "NodeNames": nodes})
            )
            outcome[f"filter {answer.status_code}"] += 1


ATTACKS: dict[str, Callable[[str, list[str], Counter[str]], Awaitable[None]]] = {
    "what-if": attack_what_if,
    "yaml": attack_yaml,
    "partial-bodies": attack_partial_bodies,
    "idle": attack_idle,
    "pod-specs": attack_pod_specs,
}


async def run_attack(name: str, url: str, nodes: int) -> Counter[str]:
    """Attack ``name`` from an ``--attack`` process; what its requests got."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "loadtests.attacks", "--attack", name, "--url", url, "--nodes", str(nodes)),
        stdout=subprocess.PIPE,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), ATTACK_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        return Counter({f"attack stopped after {ATTACK_SECONDS} s": 1})
    return Counter(orjson.loads(out))


def attack(name: str, url: str, nodes: int) -> None:
    """``--attack``: run attack ``name`` at a lower CPU priority and print what its requests got as JSON."""
    os.nice(ATTACKER_NICENESS)
    outcome = Counter[str]()
    asyncio.run(ATTACKS[name](url, [node_name(i) for i in range(nodes)], outcome))
    print(orjson.dumps(dict(outcome)).decode())


async def measure(url: str, probes_url: str, pid: int, nodes: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {"memory_limit": memory_limit(), "rss_at_start_mib": round(rss_mib(pid), 1)}
    for name in ATTACKS:
        probing, on_main = Probe(probes_url, pid), Probe(url, pid)
        await asyncio.sleep(1)  # the probe is up
        started = time.perf_counter()
        outcome = await run_attack(name, url, len(nodes))
        seconds = time.perf_counter() - started
        await asyncio.sleep(1)
        probed, probed_main = probing.finish(), on_main.finish()
        report[name] = {
            "seconds": round(seconds, 1),
            "rss_peak_mib": round(max(probed["peak"], probed_main["peak"]), 1),
            "rss_after_mib": round(rss_mib(pid), 1),
            "livez_ms": {k: probed[k] for k in ("p50", "p99", "max", "count", "failures")},
            "main_port_livez_ms": {k: probed_main[k] for k in ("p50", "p99", "max", "count", "failures")},
            "probe_client_woke_late_ms": probed["woke_late"],
            **dict(outcome),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.attacks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--attack", choices=ATTACKS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        probe(args.probe, args.pid)
        return 0
    if args.attack:
        attack(args.attack, args.url, args.nodes)
        return 0
    shape = Shape(args.nodes, args.gpus)
    port, probes_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "cluster.yaml"
        objects = [obj for _, obj in cluster_objects(shape)]
        objects.extend(gpu_pod(0)[::-1])  # a pending pod and its claim, for the filter loop of what-if
        state.write_text(yaml.safe_dump_all(objects))
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app",
                "serve",
                "--state",
                str(state),
                "--host",
                HOST,
                "--port",
                str(port),
                "--health-probe-bind-address",
                f"{HOST}:{probes_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://{HOST}:{port}"
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                time.sleep(0.1)
            nodes = [node_name(i) for i in range(args.nodes)]
            report = asyncio.run(measure(url, f"http://{HOST}:{probes_port}", server.pid, nodes))
        finally:
            server.terminate()
            server.wait(30)
    sys.stdout.write(
        orjson.dumps({"nodes": args.nodes, "gpus": args.gpus, **report}, option=orjson.OPT_INDENT_2).decode()
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
