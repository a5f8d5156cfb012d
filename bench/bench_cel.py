"""``make bench-cel``: CEL cost per evaluation on each engine, and one filter call at 5000 nodes x 8 devices.

Part 1, per engine and expression (a typical selector, a quantity comparison, a semver comparison), in
microseconds per evaluation:

* ``compile``: ``engine.compile`` once per expression text (then cached by ``SelectorCache``);
* ``cold``: ``SelectorCache.matches`` on a device never evaluated before (result-cache miss, and the engine
  converts the device: what the first filter after a slice update pays);
* ``uncached``: the engine's own evaluation on an already converted device (what a result-cache miss costs
  once the device is known, e.g. a new selector on an old device);
* ``warm``: ``SelectorCache.matches`` again on the same device (a result-cache hit: what filter pays
  for a known selector).

Part 2, per engine: a synthetic cluster (``bench.synthetic``, its ``"mixed"`` GPU layout: ``--nodes`` x
``--devices`` GPUs, one ResourceSlice per node, one DeviceClass) loaded into ``ClusterState`` with the
class-match index; then ``SchedulingService.filter`` for a pod with one claim of one device over every
node name, with a request selector never seen before (a new text per call) and with a known selector, and
with the class selector only (medians of ``--repeat`` calls), after a first call that also gathers every
node's pools (shown on its own row). Load time includes evaluating the class selector on every device (the
class-match index). Absolute numbers drift between machines; compare engines and rows measured in the same
run.

Run: ``python -m bench.bench_cel [--nodes 5000] [--devices 8] [--engines cel-expr,cel-python]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from allocator.cel import CELEngine
from allocator.model import parse_resource_slice
from allocator.selectors import SelectorCache
from app.cli.runtime import new_engine
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from bench.synthetic import MIXED_DRIVER, Shape, device_class, gpu_pod, node_name, node_objects, request

__all__ = ["main"]

DRIVER = MIXED_DRIVER
CLASS = "gpu"

EXPRESSIONS = {
    "typical selector": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "H100"',
    "quantity": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver": f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("550.0.0"))',
}


# --- synthetic objects --------------------------------------------------------------------------------------


def _shape(nodes: int, devices: int) -> Shape:
    """``nodes`` x ``devices`` GPUs of the mixed layout (what ``EXPRESSIONS`` select), nothing else."""
    return Shape(nodes, devices, nics=0, tainted_every=0, accelerator_every=0, layout="mixed")


# --- part 1: per evaluation ------------------------------------------------------------------------------


def _devices(count: int) -> list[Any]:
    """``count`` fresh Device objects (8 per slice), never seen by any cache."""
    per_slice = 8
    shape = _shape((count + per_slice - 1) // per_slice, per_slice)
    slices = [parse_resource_slice(obj) for kind, obj in node_objects(shape) if kind == "ResourceSlice"]
    return [d for s in slices for d in s.devices][:count]


def _per_call(function: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) / calls * 1e6


def _expression_costs(engine_name: str, expression: str, samples: int) -> tuple[float, float, float, float]:
    engine: CELEngine = new_engine(engine_name)
    compiles = max(3, samples // 200)
    compile_us = _per_call(lambda: [engine.compile(expression) for _ in range(compiles)], compiles)
    cache = SelectorCache(engine)
    devices = _devices(samples)
    gc.collect()
    cold = _per_call(lambda: [cache.matches(expression, d, "claim x", 0) for d in devices], len(devices))
    warm = _per_call(lambda: [cache.matches(expression, d, "claim x", 0) for d in devices], len(devices))
    program = cache.program(expression)
    cels = [d.cel for d in devices]
    uncached = _per_call(lambda: [program.evaluate(c) for c in cels], len(cels))
    return compile_us, cold, uncached, warm


def evaluation_costs(engine_name: str, samples: int) -> list[tuple[str, str, float, float, float, float]]:
    """Rows (engine, expression, compile, cold, uncached, warm) in microseconds."""
    return [
        (engine_name, label, *_expression_costs(engine_name, expression, samples))
        for label, expression in EXPRESSIONS.items()
    ]


# --- part 2: one filter over the cluster -----------------------------------------------------------------


def filter_costs(engine_name: str, nodes: int, devices: int, repeat: int) -> dict[str, Any]:
    """Load time and filter times (ms) for one engine."""
    selectors = SelectorCache(new_engine(engine_name))
    state = ClusterState()
    state.inventory.attach_selectors(selectors)
    start = time.perf_counter()
    state.apply("DeviceClass", device_class(CLASS, f'device.driver == "{DRIVER}"'))
    for kind, obj in node_objects(_shape(nodes, devices)):
        state.apply(kind, obj)
    load_s = time.perf_counter() - start
    gc.collect()
    gc.freeze()  # as `dra-extender serve` does after loading its state: later collections skip it
    service = SchedulingService(state, selectors)
    names = [node_name(n) for n in range(nodes)]
    pods = 0

    def run(selector: str | None) -> float:
        nonlocal pods
        pods += 1
        pod, claim = gpu_pod(pods, requests=[request("gpu", CLASS, 1, [selector] if selector else [])])
        state.apply("ResourceClaim", claim)
        state.apply("Pod", pod)
        gc.collect()
        started = time.perf_counter()
        outcome = service.filter(pod, names)
        elapsed = (time.perf_counter() - started) * 1e3
        assert not outcome.error and len(outcome.passed) == nodes, (outcome.error, len(outcome.passed))
        return elapsed

    # The first call also gathers every node's pools (cached afterwards): shown on its own row.
    results: dict[str, Any] = {"load_s": load_s, "first call (pools gathered)": run(None)}
    results["class selector only"] = statistics.median(run(None) for _ in range(repeat))

    # A selector no cache has seen: a unique constant makes the text new; the first device of every node
    # matches, so the search evaluates it on one device per node. Each run takes a new text (median).
    def new_selector(i: int) -> str:
        return f'device.attributes["{DRIVER}"].numa >= 0 && "{i}-{time.time_ns()}" != ""'

    results["selector never seen"] = statistics.median(run(new_selector(i)) for i in range(repeat))
    known = new_selector(repeat)
    run(known)
    results["same selector again"] = statistics.median(run(known) for _ in range(repeat))
    results["selectors"] = selectors.report()
    results["inventory"] = state.inventory.report()
    results["policy"] = service.device_selection
    gc.unfreeze()  # the next engine's cluster replaces this one
    return results


# --- output -------------------------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join([line, rule, *body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_cel", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8, help="devices per node")
    parser.add_argument("--samples", type=int, default=4000, help="devices per evaluation measurement")
    parser.add_argument("--repeat", type=int, default=5, help="filter calls per known-selector median")
    parser.add_argument("--engines", default="cel-expr,cel-python")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]

    rows = []
    for engine in engines:
        samples = args.samples if engine == "cel-expr" else max(200, args.samples // 10)
        rows.extend(evaluation_costs(engine, samples))
    print("CEL evaluation, microseconds per evaluation (compile: per expression)")
    print(
        table(
            ["engine", "expression", "compile", "cold", "uncached", "warm"],
            [[e, x, f"{c:.1f}", f"{cold:.2f}", f"{u:.2f}", f"{w:.2f}"] for e, x, c, cold, u, w in rows],
        )
    )
    print()
    filter_rows = []
    details = []
    for engine in engines:
        result = filter_costs(engine, args.nodes, args.devices, args.repeat)
        for case in (
            "first call (pools gathered)",
            "class selector only",
            "selector never seen",
            "same selector again",
        ):
            filter_rows.append([engine, case, f"{result[case]:.1f}"])
        details.append((engine, result))
    shape = f"{args.nodes} nodes x {args.devices} devices"
    print(f"filter: one pod, one claim of 1 device, {shape}, every node name")
    print(table(["engine", "request selector", "filter ms"], filter_rows))
    print()
    for engine, result in details:
        selectors = result["selectors"]
        inventory = result["inventory"]
        index = (inventory.get("class_index_matches", 0), inventory.get("class_index_evaluations", 0))
        print(
            f"{engine}: load {result['load_s']:.2f} s (class-match index: {index[0]} matches, {index[1]} "
            "evaluations); selector cache: "
            f"{selectors['results']} results, {selectors['selector_expressions']} programs, hit rate "
            f"{selectors['hit_rate']:.2f}; device selection {result['policy']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
