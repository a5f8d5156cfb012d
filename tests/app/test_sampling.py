"""Filter passes on as many fitting nodes as kube-scheduler would score (its ``numFeasibleNodesToFind``),
walking the asked nodes from where the last walk stopped. Expected counts worked out by hand from
kube-scheduler v1.37.2's rule: below 100 nodes all; ``percentage`` 0 is 50 minus nodes/125 (at least 5);
never fewer than 100."""

from __future__ import annotations

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.scheduling.decisions import FilterOutcome
from app.scheduling.sampling import NodeSampler, nodes_to_score
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice


@pytest.mark.parametrize(
    ("percentage", "nodes", "expected"),
    [
        (0, 99, 99),  # under 100 nodes: every one
        (0, 150, 100),  # 49 % is 73: raised to 100
        (0, 300, 144),  # 48 %
        (0, 500, 230),  # 46 %
        (0, 5000, 500),  # 10 %
        (0, 10_000, 500),  # 50 - 80 is below 5: 5 %
        (30, 1000, 300),
        (100, 5000, 5000),
        (1, 5000, 100),  # 50 nodes: raised to 100
    ],
)
def test_nodes_to_score_follows_kube_scheduler(percentage, nodes, expected):
    assert nodes_to_score(percentage, nodes) == expected


def _names(count: int) -> list[str]:
    return [f"n{i}" for i in range(count)]


def test_each_walk_starts_after_the_last_node_the_one_before_kept():
    asked = _names(250)  # adaptive: 48 % of 250 is 120
    failing = {f"n{i}" for i in (7, 57, 107, 157, 207)}
    passed = [n for n in asked if n not in failing]
    sampler = NodeSampler(0)
    # n0..n122 hold 120 that fit (n7, n57, n107 do not).
    first = sampler.sample(FilterOutcome(passed=passed), asked)
    assert first.passed == [n for n in asked[:123] if n not in failing]
    assert first.sampled and first.in_request_order
    # From n123: n123..n244 hold 120 that fit (n157, n207 do not).
    second = sampler.sample(FilterOutcome(passed=passed), asked)
    assert second.passed == [n for n in asked[123:245] if n not in failing]
    # From n245: 5 to the end, then 115 from the start (n0..n117, without n7, n57, n107); in the order asked.
    third = sampler.sample(FilterOutcome(passed=passed), asked)
    assert third.passed == [n for n in asked[:118] if n not in failing] + asked[245:]


def test_every_fitting_node_is_passed_on_when_they_are_few():
    asked = _names(5000)
    outcome = FilterOutcome(passed=asked[:400], failed=dict.fromkeys(asked[400:], "no free device"))
    assert NodeSampler(0).sample(outcome, asked) is outcome  # 400 fit, 500 would be scored


def test_percentage_100_passes_on_every_node():
    asked = _names(5000)
    outcome = FilterOutcome(passed=asked)
    assert NodeSampler(100).sample(outcome, asked).passed == asked


def test_a_cut_leaves_the_kept_outcome_alone_and_keeps_the_reasons():
    asked = _names(300)
    outcome = FilterOutcome(passed=asked[1:], failed={"n0": "no free device"})
    cut = NodeSampler(0).sample(outcome, asked)
    assert cut.passed == asked[1:145] and cut.failed == {"n0": "no free device"}  # 48 % of 300: 144
    assert outcome.passed == asked[1:] and not outcome.sampled


def test_a_sample_taken_while_filtering_is_not_cut_again():
    asked = _names(300)
    outcome = FilterOutcome(passed=asked[:150], sampled=True)
    assert NodeSampler(0).sample(outcome, asked) is outcome


def test_the_kept_answer_of_a_claim_shape_passes_on_only_the_sample():
    """Two pods with equal claims on 300 nodes, n0..n9 without devices. The first pod is decided node by
    node and sampled afterwards (n10..n153: 144 that fit); the second is answered from the shape's kept
    answer, walking on from n154 without ordering the 290 that fit: n154..n297."""
    names = _names(300)
    service = _three_hundred_nodes("ab")
    state = service.state
    sampler = NodeSampler(0)
    first = service.filter(state.get("Pod", "ml/a"), names, sampler=sampler)
    assert not first.sampled and first.passed == names[10:]
    assert sampler.sample(first, names).passed == names[10:154]
    second = service.filter(state.get("Pod", "ml/b"), names, sampler=sampler)
    assert second.sampled and second.passed == names[154:298]
    assert sorted({**second.failed, **second.unresolvable}) == sorted(names[:10])


def test_the_sample_is_sized_from_every_node_of_the_cluster():
    """kube-scheduler sizes its sample from all its nodes: in a 1000-node cluster (42 %: 420) where its
    own filters passed only 300, it scores all 300, and so does the extender."""
    asked = _names(300)
    assert NodeSampler(0, lambda: 1000).take(asked, bool) is None
    assert NodeSampler(0).take(asked, bool) == asked[:144]  # sized from the 300 asked


def _three_hundred_nodes(pods: str) -> SchedulingService:
    """n0..n299, one GPU each but n0..n9 (none); each pod of ``pods`` asks for one GPU."""
    names = _names(300)
    objects = [("Node", node(n)) for n in names]
    objects += [
        ("ResourceSlice", resource_slice(f"{n}-gpus", "gpu.example.com", n, [device("gpu-0")]))
        for n in names[10:]
    ]
    objects.append(("DeviceClass", device_class("gpu", 'device.driver == "gpu.example.com"')))
    for name in pods:
        objects.append(("ResourceClaim", claim("ml", f"{name}-gpu", [request("gpu", "gpu")])))
        objects.append(("Pod", pod("ml", name, [f"{name}-gpu"])))
    return SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))


def test_kube_schedulers_samples_are_answered_from_the_shapes_answer_once_it_has_their_nodes():
    """kube-scheduler sampling itself asks about another window of the cluster each cycle (its 144 of 300
    nodes). Each node is decided once; a window of nodes decided before is read from the shape's answer,
    and only the nodes asked are answered. A bind's node is decided again."""
    names = _names(300)
    service = _three_hundred_nodes("abcde")
    stats = service.decider.stats

    def filtered(pod_name: str, window: list[str]) -> FilterOutcome:
        return service.filter(service.state.get("Pod", f"ml/{pod_name}"), window)

    first = filtered("a", names[:144])
    assert first.passed == names[10:144] and sorted({**first.failed, **first.unresolvable}) == names[:10]
    second = filtered("b", names[144:288])
    assert second.passed == names[144:288] and not second.failed and not second.unresolvable
    assert stats.misses == 288  # every node asked so far, each once
    third = filtered("c", names[288:] + names[:132])
    assert sorted(third.passed) == sorted(names[288:] + names[10:132])
    assert sorted({**third.failed, **third.unresolvable}) == names[:10]
    assert stats.misses == 288 + 12  # n288..n299 only
    # n20's only GPU goes to a: the next window that holds n20 fails it, deciding nothing else again.
    assert service.bind("ml", "a", "uid-pod-ml-a", "n20") == ["ml/a-gpu: gpu.example.com/n20/gpu-0"]
    misses = stats.misses
    fourth = filtered("d", names[:144])
    assert fourth.passed == [n for n in names[10:144] if n != "n20"]
    assert sorted({**fourth.failed, **fourth.unresolvable}) == sorted([*names[:10], "n20"])
    assert stats.misses - misses <= 1  # n20, unless the bind's own patch decided it
    # Every node at once (the shipped percentageOfNodesToScore: 100): the answer for that list.
    everything = filtered("e", names)
    assert everything.passed == [n for n in names[10:] if n != "n20"]
    assert stats.misses - misses <= 1


def test_names_of_no_node_do_not_grow_the_shapes_answer_beyond_twice_the_cluster():
    service = _three_hundred_nodes("a")
    pod_a = service.state.get("Pod", "ml/a")
    service.filter(pod_a, _names(300))
    for batch in range(5):
        strangers = [f"stranger-{batch}-{i}" for i in range(300)]
        for _ in range(2):  # the same list again: still answered for its names, not the answer's nodes
            outcome = service.filter(pod_a, strangers)
            assert outcome.passed == [] and sorted(outcome.unresolvable) == sorted(strangers)
        view = service.decider.cache.view("uid-pod-ml-a")
        assert view is not None
        answer = service.decider.cache.answer(view.shape)
        assert answer is not None and answer.size() <= 2 * 300 + 100


def test_a_deleted_node_leaves_the_shapes_answer_and_the_full_list_is_its_answer_again():
    """A node deleted after the shape's answer had it, asked about no more: the answer drops it and is
    again the answer for every node (one lookup per node, the shipped percentageOfNodesToScore: 100)."""
    names = _names(300)
    service = _three_hundred_nodes("ab")
    pod_a = service.state.get("Pod", "ml/a")
    service.filter(pod_a, names)
    service.state.remove("Node", "n299")
    outcome = service.filter(pod_a, names[:299])
    assert outcome.passed == names[10:299]
    view = service.decider.cache.view("uid-pod-ml-a")
    assert view is not None
    answer = service.decider.cache.answer(view.shape)
    assert answer is not None and answer.size() == 299 and not answer.covers("n299")
    assert answer.answers(names[:299], answer.order_key)


def test_a_name_no_node_has_leaves_the_kept_list_answerable():
    """A list with a name no node has (a node the extender has not seen yet), then the kept list again,
    in the same order: answered, not an error (the name was never in that list)."""
    names = _names(300)
    service = _three_hundred_nodes("a")
    pod_a = service.state.get("Pod", "ml/a")
    for _ in range(3):  # the third builds the places of the nodes that fail in this order
        assert service.filter(pod_a, names).passed == names[10:]
    assert (
        service.filter(pod_a, [*names, "ghost"]).unresolvable["ghost"]
        == "node ghost is not known to dra-extender"
    )
    again = service.filter(pod_a, names)
    assert again.passed == names[10:] and sorted({**again.failed, **again.unresolvable}) == sorted(names[:10])
