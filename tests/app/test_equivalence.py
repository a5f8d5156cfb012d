"""Node equivalence (``allocator.equivalence``): alike nodes share one decision, and sharing never changes
an answer. The reference decides every node on its own: a fresh service per node, so nothing is shared."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import allocator.decide
from allocator.cel.expr_engine import ExprEngine
from allocator.scoring import ScoringConfig
from allocator.selectors import SelectorCache
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
KINDS = ("Node", "DeviceClass", "DeviceTaintRule", "ResourceSlice", "ResourceClaim", "Pod")
ENGINE = ExprEngine()


def gpu(index: int, node_name: str, model: str = "a", numa: int = 0, root: str = "r0", **extra: Any) -> dict:
    attributes = {"model": model, NUMA: numa, ROOT: root, "uuid": f"GPU-{node_name}-{index}", **extra}
    return device(f"gpu-{index}", attributes, {"memory": "80Gi"})


def service_of(objects: list[tuple[str, dict]]) -> SchedulingService:
    service = SchedulingService(ClusterState.from_objects(copy.deepcopy(objects)), SelectorCache(ENGINE))
    # Decisions are compared, not speed: a loaded machine must not cut a filter short in one service only.
    service.filter_time_budget = 3600.0
    return service


def state_objects(svc: SchedulingService, given: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The service's objects, its ResourceSlices as ``given`` (the state keeps them without their devices)."""
    slices = [obj for kind, obj in given if kind == "ResourceSlice"]
    return [
        (kind, obj)
        for kind in KINDS
        for obj in (slices if kind == "ResourceSlice" else svc.state.objects[kind].values())
    ]


def cluster(nodes: dict[str, list[dict]], *extra: tuple[str, dict]) -> list[tuple[str, dict]]:
    objects: list[tuple[str, dict]] = [("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))]
    for name, devices in nodes.items():
        objects.append(("Node", node(name)))
        objects.append(("ResourceSlice", resource_slice(f"{name}-gpus", DRIVER, name, devices)))
    return objects + list(extra)


def with_constraint(obj: dict, **constraint: str) -> dict:
    obj["spec"]["devices"]["constraints"] = [constraint]
    return obj


def with_selector(obj: dict, expression: str) -> dict:
    for r in obj["spec"]["devices"]["requests"]:
        r["exactly"]["selectors"] = [{"cel": {"expression": expression}}]
    return obj


# --- hand-worked cases ---------------------------------------------------------------------------------


def test_identical_nodes_are_decided_once_and_a_bind_redecides_only_its_node():
    names = [f"n{i}" for i in range(20)]
    svc = service_of(
        cluster(
            {n: [gpu(0, n), gpu(1, n)] for n in names},
            ("ResourceClaim", claim("ml", "a", [request("gpu", "gpu")])),
            ("ResourceClaim", claim("ml", "b", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "a", ["a"])),
            ("Pod", pod("ml", "b", ["b"])),
        )
    )
    stats = svc.decider.equivalence.stats
    assert svc.filter(svc.state.get("Pod", "ml/a"), names).passed == names
    # uuid is read by nothing: 20 nodes, one decision (the first node), 19 lookups that found it.
    assert (stats["misses"], stats["hits"]) == (1, 19)
    before = dict(stats)
    svc.bind("ml", "a", "uid-pod-ml-a", "n3")
    allocation = svc.state.get("ResourceClaim", "ml/a")["status"]["allocation"]
    assert [(r["pool"], r["device"]) for r in allocation["devices"]["results"]] == [("n3", "gpu-0")]
    # Only n3 changed (one GPU in use): the bind decides it again for the shape's answer, a new
    # signature decided on n3 itself; the next pod's filter then decides no node.
    assert (stats["misses"] - before["misses"], stats["hits"] - before["hits"]) == (1, 0)
    before, decided = dict(stats), svc.stats.misses
    assert sorted(svc.filter(svc.state.get("Pod", "ml/b"), names).passed) == sorted(names)
    assert (stats["misses"] - before["misses"], stats["hits"] - before["hits"]) == (0, 0)
    assert svc.stats.misses == decided


def test_bind_chooses_devices_on_a_node_filter_passed_by_counts_without_counting_it_again(monkeypatch):
    names = ["n1", "n2"]
    svc = service_of(
        cluster(
            {n: [gpu(0, n), gpu(1, n)] for n in names},
            ("ResourceClaim", claim("ml", "a", [request("gpus", "gpu", 2)])),
            ("Pod", pod("ml", "a", ["a"])),
        )
    )
    assert svc.filter(svc.state.get("Pod", "ml/a"), names).passed == names
    counted: list[tuple[str, bool]] = []
    count = allocator.decide.verdict

    def counting(inventory, selectors, node, claims):
        found = count(inventory, selectors, node, claims)
        counted.append((node.name, found is not None and found.fits))
        return found

    monkeypatch.setattr("allocator.decide.verdict", counting)
    svc.bind("ml", "a", "uid-pod-ml-a", "n2")
    results = svc.state.get("ResourceClaim", "ml/a")["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("n2", "gpu-0"), ("n2", "gpu-1")]
    # The bind searched n2 straight away (filter's counts said it fits, and n2 was unchanged); the one
    # count is the patch of the shape's answer after the write, which finds n2 full.
    assert counted == [("n2", False)]


def test_a_written_bind_stands_when_patching_the_shapes_answer_fails(monkeypatch, caplog):
    names = [f"n{i}" for i in range(4)]
    svc = service_of(
        cluster(
            {n: [gpu(0, n)] for n in names},
            *(("ResourceClaim", claim("ml", c, [request("gpu", "gpu")])) for c in "ab"),
            *(("Pod", pod("ml", c, [c])) for c in "ab"),
        )
    )
    assert svc.filter(svc.state.get("Pod", "ml/a"), names).passed == names

    def broken(*_args, **_kwargs):
        raise RuntimeError("patch broke")

    monkeypatch.setattr(type(svc.decider), "_patch", broken)
    assert svc.bind("ml", "a", "uid-pod-ml-a", "n1") == ["ml/a: gpu.example.com/n1/gpu-0"]
    assert "patching the answer of a claims shape after a bind failed" in caplog.text
    monkeypatch.undo()
    # The next filter decides the bound node itself: it is full now.
    outcome = svc.filter(svc.state.get("Pod", "ml/b"), names)
    assert outcome.passed == ["n0", "n2", "n3"] and list(outcome.failed) == ["n1"]


@pytest.mark.parametrize(("gpus", "failing"), [(2, ["n3"]), (1, [])])
def test_the_same_nodes_in_another_order_are_answered_from_the_shapes_answer_in_that_order(gpus, failing):
    # kube-scheduler filters nodes in parallel and sends the feasible ones in the order they finished.
    names = [f"n{i}" for i in range(20)]
    svc = service_of(
        cluster(
            {n: [gpu(0, n), gpu(1, n)] for n in names},
            *(("ResourceClaim", claim("ml", c, [request("gpu", "gpu", gpus)])) for c in "abc"),
            *(("Pod", pod("ml", c, [c])) for c in "abc"),
        )
    )
    assert svc.filter(svc.state.get("Pod", "ml/a"), names).passed == names
    # Two GPUs: n3 no longer fits two. One: n3 still fits one, and every node asked passes.
    svc.bind("ml", "a", "uid-pod-ml-a", "n3")
    stats = dict(svc.decider.equivalence.stats)
    shuffled = names[::2] + names[1::2]
    outcome = svc.filter_quick(svc.state.get("Pod", "ml/b"), shuffled)
    assert outcome is not None  # no worker thread needed: the bind decided n3 again
    assert outcome.passed == [n for n in shuffled if n not in failing]
    assert outcome.in_request_order  # sent as it is
    assert list(outcome.failed) == failing and not outcome.unresolvable
    assert svc.decider.equivalence.stats["misses"] == stats["misses"]
    # Fewer nodes (kube-scheduler's sample, or a pod's own filters leaving nodes out): read from the
    # shape's answer too, without deciding a node again, and only the nodes asked.
    fewer = svc.filter_quick(svc.state.get("Pod", "ml/c"), names[:10])
    assert fewer is not None
    assert fewer.passed == [n for n in names[:10] if n not in failing]
    assert list(fewer.failed) == failing and not fewer.unresolvable
    assert svc.decider.equivalence.stats["misses"] == stats["misses"]


def test_a_mostly_full_cluster_is_answered_from_the_shapes_answer_in_the_order_asked():
    names = [f"n{i}" for i in range(20)]
    pods = [f"p{i}" for i in range(16)]
    svc = service_of(
        cluster(
            {n: [gpu(0, n), gpu(1, n)] for n in names},
            *(("ResourceClaim", claim("ml", c, [request("gpu", "gpu", 2)])) for c in pods),
            *(("Pod", pod("ml", c, [c])) for c in pods),
        )
    )
    full = names[:15]
    for name, pod_name in zip(full, pods, strict=False):  # each pod takes both GPUs of its node
        assert name in svc.filter(svc.state.get("Pod", f"ml/{pod_name}"), names).passed
        svc.bind("ml", pod_name, f"uid-pod-ml-{pod_name}", name)
    shuffled = names[1::2] + names[::2]
    misses = svc.decider.equivalence.stats["misses"]
    outcome = svc.filter(svc.state.get("Pod", "ml/p15"), shuffled)
    # n14, filled by the last bind, is alike the other full nodes: the shape's answer plus one lookup.
    assert svc.decider.equivalence.stats["misses"] == misses
    assert outcome.passed == [n for n in shuffled if n not in full]  # n15..n19, odd ones first
    assert sorted(outcome.failed) == sorted(full)
    assert outcome.in_request_order


def test_a_selector_reading_the_uuid_makes_every_node_distinct():
    names = ["n1", "n2", "n3"]
    pending = with_selector(
        claim("ml", "a", [request("gpu", "gpu")]), f'device.attributes["{DRIVER}"].uuid != ""'
    )
    svc = service_of(
        cluster({n: [gpu(0, n)] for n in names}, ("ResourceClaim", pending), ("Pod", pod("ml", "a", ["a"])))
    )
    assert svc.filter(svc.state.get("Pod", "ml/a"), names).passed == names
    assert (svc.decider.equivalence.stats["misses"], svc.decider.equivalence.stats["hits"]) == (3, 0)


def test_nodes_differing_in_a_pcie_root_a_constraint_reads_are_decided_apart():
    # Two GPUs on one root is what matchAttribute on the root asks for: n-split has them on two roots.
    objects = cluster(
        {
            "n-same": [gpu(0, "n-same", root="r0"), gpu(1, "n-same", root="r0")],
            "n-split": [gpu(0, "n-split", root="r0"), gpu(1, "n-split", root="r1")],
            "n-other": [gpu(0, "n-other", root="r7"), gpu(1, "n-other", root="r7")],
        },
        ("ResourceClaim", with_constraint(claim("ml", "a", [request("gpu", "gpu", 2)]), matchAttribute=ROOT)),
        ("Pod", pod("ml", "a", ["a"])),
    )
    svc = service_of(objects)
    outcome = svc.filter(svc.state.get("Pod", "ml/a"), ["n-same", "n-split", "n-other"])
    assert outcome.passed == ["n-same", "n-other"]
    # The reason names the device the constraint left out, on n-split's own pool.
    assert "n-split" in outcome.failed["n-split"]
    # Nothing shared: the roots are read values (r0, r1, r7 differ), and n-split's reason names its pool.
    assert svc.decider.equivalence.stats["hits"] == 0


def test_a_reason_naming_the_node_is_not_shared():
    names = ["n1", "n2"]
    objects = cluster(
        {n: [gpu(0, n, root="r0"), gpu(1, n, root="r1")] for n in names},
        ("ResourceClaim", with_constraint(claim("ml", "a", [request("gpu", "gpu", 2)]), matchAttribute=ROOT)),
        ("Pod", pod("ml", "a", ["a"])),
    )
    svc = service_of(objects)
    outcome = svc.filter(svc.state.get("Pod", "ml/a"), names)
    assert outcome.passed == []
    assert (
        "gpu.example.com/n1/gpu-" in outcome.failed["n1"]
        and "gpu.example.com/n2/gpu-" in outcome.failed["n2"]
    )
    assert svc.decider.equivalence.stats["not_shareable"] == 2


def test_a_taint_rule_selecting_one_pool_sets_its_node_apart():
    names = ["n1", "n2"]
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "n2-down"},
        "spec": {"deviceSelector": {"pool": "n2"}, "taint": {"key": "down", "effect": "NoSchedule"}},
    }
    svc = service_of(
        cluster(
            {n: [gpu(0, n)] for n in names},
            ("DeviceTaintRule", rule),
            ("ResourceClaim", claim("ml", "a", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "a", ["a"])),
        )
    )
    outcome = svc.filter(svc.state.get("Pod", "ml/a"), names)
    assert outcome.passed == ["n1"]
    # None in use: waiting would not help, so the node is unresolvable.
    assert outcome.unresolvable == {
        "n2": "claim ml/a, request gpu: 0 of 1 matching device(s) usable (0 in use, 1 tainted), 1 needed"
    }


def test_prioritize_scores_from_an_equivalent_node_and_bind_chooses_on_its_own_node():
    names = ["n1", "n2", "n3"]
    svc = service_of(
        cluster(
            {n: [gpu(0, n, numa=0), gpu(1, n, numa=1)] for n in names},
            ("ResourceClaim", claim("ml", "a", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "a", ["a"])),
        )
    )
    a = svc.state.get("Pod", "ml/a")
    assert svc.filter(a, names).passed == names
    scores = svc.prioritize(a, names)
    assert len(set(scores)) == 1
    svc.bind("ml", "a", "uid-pod-ml-a", "n2")
    results = svc.state.get("ResourceClaim", "ml/a")["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("n2", "gpu-0")]


def test_a_new_scoring_policy_is_never_scored_from_the_previous_ones_shared_decisions(monkeypatch):
    """A config reload replaces the scoring object; the old one is freed and a later one may be made at its
    address (CPython reuses it), so the shared decisions' context must tell them apart by value. Here
    every object has one address. Scores by hand: one GPU of three free, only ``packing`` weighs: binpack
    1/3 in use -> 3, spread 2/3 free -> 7."""
    import app.scheduling.nodedecider

    monkeypatch.setattr(app.scheduling.nodedecider, "id", lambda _: 1, raising=False)
    names = ["n1", "n2", "n3"]
    svc = service_of(
        cluster(
            {n: [gpu(0, n), gpu(1, n), gpu(2, n)] for n in names},
            ("ResourceClaim", claim("ml", "a", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "a", ["a"])),
        )
    )
    packing = {"numa": 0, "pcie": 0, "packing": 1, "intact": 0, "prioritized": 0}
    a = svc.state.get("Pod", "ml/a")
    svc.set_policy("aligned", ScoringConfig("binpack", packing), None)
    assert svc.filter(a, names).passed == names
    assert svc.prioritize(a, names) == [3, 3, 3]
    svc.set_policy("aligned", ScoringConfig("spread", packing), None)  # the reload
    assert svc.filter(a, names).passed == names
    assert svc.prioritize(a, names) == [7, 7, 7]


# --- property: shared decisions equal per-node decisions -------------------------------------------------

SELECTORS = [
    None,
    f'device.attributes["{DRIVER}"].model == "a"',
    f'device.attributes["{NUMA.split("/")[0]}"].numaNode == 0',
    f'device.attributes.exists(d, d == "{DRIVER}")',  # reads are unknown: every attribute counts
    f'device.attributes["{DRIVER}"].uuid.endsWith("-1")',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("50Gi")) > 0',
]


@st.composite
def scenarios(draw: Any) -> tuple[list[tuple[str, dict]], list[str], dict, list[str]]:
    width = draw(st.integers(1, 3))
    template = [
        {
            "model": draw(st.sampled_from("ab")),
            "numa": draw(st.integers(0, 1)),
            "root": draw(st.sampled_from(["r0", "r1"])),
        }
        for _ in range(width)
    ]
    names = [f"n{i}" for i in range(draw(st.integers(3, 7)))]
    nodes: dict[str, list[dict]] = {}
    extra: list[tuple[str, dict]] = []
    for name in names:
        specs = [dict(s) for s in template]
        if draw(st.integers(0, 2)) == 0:  # a few nodes differ from the template
            which = draw(st.integers(0, width - 1))
            field = draw(st.sampled_from(["model", "numa", "root", "drop", "taint", "memory"]))
            if field == "drop" and width > 1:
                specs.pop(which)
            elif field == "model":
                specs[which]["model"] = "c"
            elif field == "numa":
                specs[which]["numa"] = 1 - specs[which]["numa"]
            elif field in ("taint", "memory"):
                specs[which][field] = True
            else:
                specs[which]["root"] = "r9"
        nodes[name] = [gpu(i, name, s["model"], s["numa"], s["root"]) for i, s in enumerate(specs)]
        for published, s in zip(nodes[name], specs, strict=True):
            if s.get("taint"):
                published["taints"] = [{"key": "xid", "value": "79", "effect": "NoSchedule"}]
            if s.get("memory"):
                published["capacity"] = {"memory": {"value": "40Gi"}}
        if draw(st.booleans()):  # gpu-0 already allocated to another claim
            held = claim("other", f"held-{name}", [request("gpu", "gpu")])
            held["status"] = {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": DRIVER, "pool": name, "device": "gpu-0"}]
                    }
                }
            }
            extra.append(("ResourceClaim", held))
    count = draw(st.integers(1, 3))
    spec = claim("ml", "template", [request("gpu", "gpu", count)])
    selector = draw(st.sampled_from(SELECTORS))
    if selector:
        spec = with_selector(spec, selector)
    constraint = draw(st.sampled_from([None, "match", "distinct"]))
    if constraint == "match":
        spec = with_constraint(spec, matchAttribute=ROOT)
    elif constraint == "distinct":
        spec = with_constraint(spec, distinctAttribute=NUMA)
    binds = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
    return cluster(nodes, *extra), names, spec, binds


def per_node(objects: list[tuple[str, dict]], pod_name: str, names: list[str]) -> dict[str, tuple[str, Any]]:
    """Each node decided by a service of its own: verdict and reason, or the score where it fits."""
    answers: dict[str, tuple[str, Any]] = {}
    for name in names:
        alone = service_of(objects)
        target = alone.state.get("Pod", f"ml/{pod_name}")
        outcome = alone.filter(target, [name])
        if outcome.passed:
            answers[name] = ("fits", alone.prioritize(target, [name])[0])
        elif name in outcome.failed:
            answers[name] = ("failed", outcome.failed[name])
        else:
            answers[name] = ("unresolvable", outcome.unresolvable[name])
    return answers


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_shared_decisions_equal_per_node_decisions(scenario):
    objects, names, spec, binds = scenario
    svc = service_of(objects)
    # A pod the scenario leaves unbound would keep its best node's devices held until the hold's time is
    # up (test_prioritizeholds): the fresh per-node services have no such hold.
    svc.binding.holds.seconds = 0
    for step, target in enumerate(binds):
        name = f"p{step}"
        obj = copy.deepcopy(spec)
        obj["metadata"].update(name=name, uid=f"uid-claim-{name}")
        svc.state.apply("ResourceClaim", obj)
        svc.state.apply("Pod", pod("ml", name, [name]))
        now = state_objects(svc, objects)
        want = per_node(now, name, names)
        the_pod = svc.state.get("Pod", f"ml/{name}")
        outcome = svc.filter(the_pod, names)
        got: dict[str, tuple[str, Any]] = {n: ("failed", r) for n, r in outcome.failed.items()}
        got.update((n, ("unresolvable", r)) for n, r in outcome.unresolvable.items())
        passed = sorted(outcome.passed)
        got.update(zip(passed, (("fits", s) for s in svc.prioritize(the_pod, passed)), strict=True))
        assert got == want, step
        if want[target][0] != "fits":
            continue
        # The bind chooses devices on its own node, as that node alone would.
        alone = service_of(now)
        alone.bind("ml", name, f"uid-pod-ml-{name}", target)
        svc.bind("ml", name, f"uid-pod-ml-{name}", target)
        chosen, theirs = (
            dict(s.state.get("ResourceClaim", f"ml/{name}")["status"]["allocation"]) for s in (svc, alone)
        )
        # Written a moment apart: their allocationTimestamps may fall in different seconds.
        assert chosen.pop("allocationTimestamp") and theirs.pop("allocationTimestamp")
        assert chosen == theirs, step
