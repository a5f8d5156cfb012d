"""``freeze_long_lived``: what it takes out of the cyclic collector, and why that is safe for the state."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.cli.runtime import freeze_long_lived
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as the test found it: nothing left frozen, automatic collection back on."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_objects_alive_when_frozen_leave_the_collectors_generations(collector):
    before = {"alive": ["before the freeze"]}
    freeze_long_lived()
    after = {"alive": ["after the freeze"]}
    tracked = {id(obj) for obj in gc.get_objects()}
    assert id(before) not in tracked and id(before["alive"]) not in tracked
    assert id(after) in tracked
    assert gc.get_freeze_count() > 0
    gc.unfreeze()
    assert id(before) in {id(obj) for obj in gc.get_objects()}


def _slice(name: str, node_name: str, version: int) -> dict:
    obj = resource_slice(name, DRIVER, node_name, [device("gpu-0"), device("gpu-1")])
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def test_the_state_forms_no_reference_cycles_as_pods_come_bind_and_go(collector):
    # A frozen object that becomes part of cyclic garbage is never freed: the freeze is safe only while
    # dropping state objects frees them by reference counting alone.
    state = ClusterState.from_objects(
        [
            ("Node", node("n1")),
            ("Node", node("n2")),
            ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
            ("ResourceSlice", _slice("n1-gpus", "n1", 1)),
            ("ResourceSlice", _slice("n2-gpus", "n2", 1)),
        ]
    )
    service = SchedulingService(state, SelectorCache(ExprEngine()))
    freeze_long_lived()
    gc.disable()
    for round_ in range(3):
        names = [f"p{round_}-{i}" for i in range(4)]
        for name in names:
            with service.lock:
                state.apply("ResourceClaim", claim("ml", f"{name}-gpu", [request("gpu", "gpu")]))
                state.apply("Pod", pod("ml", name, [f"{name}-gpu"]))
        for name in names:
            outcome = service.filter(state.get("Pod", f"ml/{name}"), ["n1", "n2"])
            service.bind("ml", name, f"uid-pod-ml-{name}", outcome.passed[0])
            assert state.get("ResourceClaim", f"ml/{name}-gpu")["status"]["allocation"]
        for index, (slice_name, node_name) in enumerate((("n1-gpus", "n1"), ("n2-gpus", "n2"))):
            with service.lock:
                state.apply("ResourceSlice", _slice(slice_name, node_name, 10 + 2 * round_ + index))
        for name in names:
            with service.lock:
                state.remove("Pod", f"ml/{name}")
                state.remove("ResourceClaim", f"ml/{name}-gpu")
        assert not [key for key in state.objects["Pod"] if key.startswith(f"ml/p{round_}")]
    assert gc.collect() == 0
    cycle: dict[str, object] = {}  # and a cycle, had the churn formed one, would have been counted
    cycle["self"] = cycle
    del cycle
    assert gc.collect() == 1
