"""The operator tools at cluster scale (a script, not tests): ``dra-extender explain`` of one pod and
``dra-extender simulate`` of every pending pod, on a synthetic state directory (``bench.synthetic``: N
nodes x 8 GPUs with NICs, one pending pod per claim asking for one GPU).

Each command runs in a subprocess, as an operator would, timed from start to exit (the state load
included, also measured alone with ``validate``); explain's summary and simulate are also timed in this
process on a loaded state, the cost the targets are about. Prints one table:
measure, result, target (issue 13 section 4: explain <= 1 s at 5000 nodes, simulate of 5000 nodes x 10,000
pods <= 60 s).

    python -m bench.bench_cli [--nodes 5000] [--pods 10000]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import orjson

from app.cli.runtime import build_runtime
from app.cli.simulate import simulate
from app.explain.summary import summarize_pod
from bench.bench_cel import table
from bench.synthetic import NAMESPACE, Shape, cluster_objects, gpu_pod, node_name


def write_state(directory: Path, shape: Shape, pods: int) -> None:
    """The synthetic cluster and ``pods`` pending pods with their claims, one JSON ``List`` per kind."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for kind, obj in cluster_objects(shape):
        by_kind[kind].append(obj)
    for index in range(pods):
        pod, claim = gpu_pod(index)
        by_kind["Pod"].append(pod)
        by_kind["ResourceClaim"].append(claim)
    for kind, items in by_kind.items():
        document = {"apiVersion": "v1", "kind": "List", "items": items}
        (directory / f"{kind}.json").write_bytes(orjson.dumps(document))


def _timed(argv: list[str]) -> tuple[float, str, str]:
    """Run ``dra-extender ARGV``; (seconds, stdout, stderr). Exits with the command's error when it fails."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "app", *argv], capture_output=True, text=True, check=False, timeout=3600
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"dra-extender {' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return seconds, done.stdout, done.stderr


def _in_process(state: Path, pod: str) -> tuple[float, float, int]:
    """(explain summary seconds, simulate seconds, pods placed) on a runtime already loaded, as the
    command line runs them (every node decided)."""
    runtime = build_runtime(state)
    runtime.service.filter_time_budget = math.inf
    namespace, _, name = pod.partition("/")
    start = time.perf_counter()
    summarize_pod(runtime.service, namespace, name)
    explained = time.perf_counter() - start
    start = time.perf_counter()
    document = simulate(runtime.service)
    simulated = time.perf_counter() - start
    return explained, simulated, sum(1 for p in document["pods"] if p["node"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    args = parser.parse_args(argv)
    shape = Shape(nodes=args.nodes, gpus=8)
    pod = f"{NAMESPACE}/pod-000000"
    scale = f"{args.nodes} nodes x {args.pods} pods"
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        state = Path(tmp)
        write_state(state, shape, args.pods)
        flag = ["--state", str(state)]
        load, _, _ = _timed(["validate", *flag])
        explain, out, _ = _timed(["explain", *flag, pod])
        lines = len(out.splitlines())
        one, _, _ = _timed(["explain", *flag, pod, "--node", node_name(args.nodes // 2)])
        end_to_end, out, _ = _timed(["simulate", *flag, "-o", "json"])
        placed_cli = sum(1 for p in orjson.loads(out)["pods"] if p["node"])
        megabytes = len(out) / 1e6
        tables, out, _ = _timed(["simulate", *flag, "-o", "table"])
        table_lines = len(out.splitlines())
        explained, simulated, placed = _in_process(state, pod)
    rows = [
        ["load the state (validate, command line)", f"{load:.1f} s", "-"],
        [f"explain {pod}: summary, state loaded", f"{explained:.2f} s", "<= 1 s"],
        [f"explain {pod}: summary, command line", f"{explain:.1f} s, {lines} lines", "-"],
        [f"explain {pod} --node, command line", f"{one:.1f} s", "-"],
        [f"simulate {scale}, state loaded", f"{simulated:.1f} s, {placed} placed", "<= 60 s"],
        [
            f"simulate {scale}, command line -o json",
            f"{end_to_end:.1f} s, {placed_cli} placed, {megabytes:.0f} MB",
            "-",
        ],
        [f"simulate {scale}, command line -o table", f"{tables:.1f} s, {table_lines} lines", "-"],
    ]
    print(f"dra-extender CLI at {args.nodes} nodes x 8 GPUs, {args.pods} pending pods (1 GPU each)")
    print(table(["measure", "result", "target"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
