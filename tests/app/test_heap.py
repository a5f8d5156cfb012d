"""``freeze_long_lived``: what it takes out of the cyclic collector, and why that is safe for the state."""

from __future__ import annotations

import gc
import traceback
from collections.abc import Iterator

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.errors import InvalidInputError
from allocator.selectors import SelectorCache
from app.cli.runtime import freeze_long_lived
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "heap"


@pytest.fixture
def collector() -> Iterator[None]:
    """Automatic collection back on, nothing left frozen and no debug flag after the test."""
    enabled = gc.isenabled()
    yield
    gc.set_debug(0)
    gc.garbage.clear()
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


def _versioned(obj: dict, version: int) -> dict:
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def _slice(name: str, node_name: str, version: int) -> dict:
    return _versioned(resource_slice(name, DRIVER, node_name, [device("gpu-0"), device("gpu-1")]), version)


def _invalid_claim(name: str) -> dict:
    obj = claim(NS, name, [request("gpu", "gpu")])
    obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0  # the API requires at least 1
    return obj


def _ours(garbage: list[object]) -> list[object]:
    """What of ``garbage`` the state or the service made: their own types, and the API objects of NS."""
    return [
        obj
        for obj in garbage
        if type(obj).__module__.split(".")[0] in ("app", "allocator")
        or (
            isinstance(obj, dict)
            and isinstance(obj.get("metadata"), dict)
            and obj["metadata"].get("namespace") == NS
        )
    ]


def test_the_state_forms_no_reference_cycles_as_pods_come_bind_and_go(collector):
    # A frozen object that becomes part of cyclic garbage is never freed: the freeze is safe only while
    # what the state drops is freed by reference counting alone.
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
        with service.lock:
            for name in names:
                state.apply("ResourceClaim", claim(NS, f"{name}-gpu", [request("gpu", "gpu")]))
                state.apply("Pod", pod(NS, name, [f"{name}-gpu"]))
            state.apply("ResourceClaim", _invalid_claim(f"bad{round_}"))
            state.apply("Pod", pod(NS, f"bad{round_}", [f"bad{round_}"]))
        for name in names:
            outcome = service.filter(state.get("Pod", f"{NS}/{name}"), ["n1", "n2"])
            service.bind(NS, name, f"uid-pod-{NS}-{name}", outcome.passed[0])
            assert state.get("ResourceClaim", f"{NS}/{name}-gpu")["status"]["allocation"]
        for _ in range(3):  # kube-scheduler retries the pod whose claim is invalid
            refused = service.filter(state.get("Pod", f"{NS}/bad{round_}"), ["n1", "n2"])
            assert refused.passed == [] and "count" in refused.error
        with service.lock:  # every object there at the freeze replaced: their drop is seen too
            for index, (slice_name, node_name) in enumerate((("n1-gpus", "n1"), ("n2-gpus", "n2"))):
                state.apply("ResourceSlice", _slice(slice_name, node_name, 10 + 2 * round_ + index))
                state.apply("Node", _versioned(node(node_name, {"round": str(round_)}), 10 + round_))
            state.apply(
                "DeviceClass",
                _versioned(device_class("gpu", f'device.driver == "{DRIVER}" && true'), 10 + round_),
            )
            for name in [*names, f"bad{round_}"]:
                state.remove("Pod", f"{NS}/{name}")
            for name in [*(f"{name}-gpu" for name in names), f"bad{round_}"]:
                state.remove("ResourceClaim", f"{NS}/{name}")
    assert not state.objects["Pod"] and not state.objects["ResourceClaim"]
    cycle: dict[str, object] = {"metadata": {"namespace": NS}}  # what a cycle of the state would look like
    cycle["self"] = cycle
    del cycle
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what a collection finds, to see whose it is
    gc.collect()
    found = _ours(gc.garbage)
    assert len(found) == 1 and found[0]["self"] is found[0]  # type: ignore[index]


def test_an_invalid_claim_raises_a_fresh_error_each_time():
    # One instance raised again chains each raise's frames (and their locals) onto its traceback: memory
    # would grow with every retry of the pod for as long as the claim stays unchanged.
    state = ClusterState.from_objects([("ResourceClaim", _invalid_claim("bad"))])
    raised: list[InvalidInputError] = []
    depths: list[int] = []
    for _ in range(3):
        with pytest.raises(InvalidInputError, match="count") as caught:
            state.parsed_claim(f"{NS}/bad")
        raised.append(caught.value)
        depths.append(len(traceback.extract_tb(caught.value.__traceback__)))
    assert len({id(error) for error in raised}) == 3
    assert depths == [depths[0]] * 3  # raised again, one instance's traceback grows by a raise each time
    assert len({str(error) for error in raised}) == 1
