"""Devices held between prioritize and bind (``app.scheduling.prioritizeholds``).

kube-scheduler binds in the background: the next pod's filter can arrive before the previous pod's bind.
The cluster is test_api's: n1 has two GPUs, n2 one, n3 none; p-one and p-one-b each need one GPU. With
binpack scoring n2 scores best for p-one (its only GPU used: 8 against n1's 5), so kube-scheduler binds
p-one to n2 unless its own plugins outweigh that.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import orjson
import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.deviceuse import AllocatedDevice, allocated_devices, written_token
from allocator.selectors import SelectorCache
from app.config.settings import Settings
from app.http.api import create_app
from app.scheduling.binder import BindError, BindPlan
from app.scheduling.decisions import PodView
from app.scheduling.nodedecider import NotQuick
from app.scheduling.prioritizeholds import HOLD_SECONDS, sweeping_late_holds
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.app.metrics_support import samples
from tests.app.test_api import NS, _args, _bind, _client, _objects, _post, _post_scope
from tests.builders import claim, device, device_class, made_for, node, pod, request, resource_slice

UID = f"uid-pod-{NS}-p-one"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cluster_objects() -> list[tuple[str, dict]]:
    """test_api's cluster with p-one-b, each pod's claim made for it."""
    objects = [o for o in _objects() if not (o[0] == "ResourceClaim" and o[1]["metadata"]["name"] == "one")]
    objects.append(("ResourceClaim", made_for(claim(NS, "one", [request("gpu", "gpu")]), "p-one")))
    objects.append(("ResourceClaim", made_for(claim(NS, "one-b", [request("gpu", "gpu")]), "p-one-b")))
    objects.append(("Pod", pod(NS, "p-one-b", ["one-b"])))
    return objects


def _cluster() -> SchedulingService:
    return SchedulingService(ClusterState.from_objects(_cluster_objects()), SelectorCache(ExprEngine()))


def _pod(service: SchedulingService, name: str) -> dict:
    found = service.state.get("Pod", f"{NS}/{name}")
    assert found is not None
    return copy.deepcopy(found)


def _held(service: SchedulingService, asked: dict, names: list[str], scores: list[int]) -> list[int]:
    """``scores``, prioritize's answer for ``asked`` on ``names``, once written: the HTTP layer then has the
    best node's devices held (``Answer.then``)."""
    service.hold_best(asked, names, scores, service.scored_attempt(asked))
    return scores


def _prioritize(service: SchedulingService, asked: dict, names: list[str]) -> list[int]:
    return _held(service, asked, names, service.prioritize(asked, names))


def _prioritized(service: SchedulingService, name: str = "p-one") -> list[int]:
    """Filter then prioritize ``name`` as kube-scheduler calls them (n3 has no GPU: filter fails it)."""
    asked = _pod(service, name)
    passed = service.filter(asked, ["n1", "n2", "n3"]).passed
    assert passed == ["n1", "n2"]
    return _prioritize(service, asked, passed)


def _passes(service: SchedulingService, name: str) -> list[str]:
    return list(service.filter(_pod(service, name), ["n1", "n2"]).passed)


def _allocated(service: SchedulingService, claim_name: str) -> list[tuple[str, str]]:
    found = service.state.get("ResourceClaim", f"{NS}/{claim_name}") or {}
    allocation = (found.get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results", [])]


def _freed_counter(service: SchedulingService) -> list[int]:
    calls = [0]

    def freed() -> None:
        calls[0] += 1

    service.binding.holds.on_freed = freed
    return calls


def test_the_next_pod_s_filter_sees_the_best_node_s_devices_held_until_the_bind():
    service = _cluster()
    freed = _freed_counter(service)
    assert _prioritized(service) == [5, 8]
    # n2's one GPU is held for p-one: the next pod fits on n1 only, with no bind sent yet.
    assert _passes(service, "p-one-b") == ["n1"]
    assert service.bind(NS, "p-one", UID, "n2") == [f"{NS}/one: gpu.example.com/n2/gpu-0"]
    assert _allocated(service, "one") == [("n2", "gpu-0")]
    assert not service.state.inventory.reservations()
    assert freed == [0]
    assert (service.binding.holds.taken, service.binding.holds.unused) == (1, 0)
    assert service.decisions.view(UID) is None  # the pod's decisions are done with, as after any bind
    assert _passes(service, "p-one-b") == ["n1"]  # n2's GPU is p-one's now


def test_a_bind_to_another_node_ends_the_hold_and_frees_its_devices():
    """kube-scheduler's own plugins may outweigh the extender's score: the bind names another node."""
    service = _cluster()
    freed = _freed_counter(service)
    _prioritized(service)
    service.bind(NS, "p-one", UID, "n1")
    assert _allocated(service, "one") == [("n1", "gpu-0")]
    assert not service.state.inventory.reservations()
    assert freed == [1]
    assert (service.binding.holds.taken, service.binding.holds.unused) == (0, 1)
    assert _passes(service, "p-one-b") == ["n1", "n2"]


def test_a_hold_ends_when_its_time_is_up():
    """A plugin after Score (Reserve, Permit) may reject the pod: kube-scheduler then sends no bind."""
    service = _cluster()
    clock = _Clock()
    holds = service.binding.holds
    holds.clock = clock
    freed = _freed_counter(service)
    _prioritized(service)
    clock.now += holds.seconds - 0.01
    assert _passes(service, "p-one-b") == ["n1"]
    clock.now += 0.02
    assert _passes(service, "p-one-b") == ["n1", "n2"]
    assert freed == [1]
    assert not service.state.inventory.reservations()


def test_a_new_attempt_of_the_pod_ends_its_hold():
    """A filter of the held pod means its last attempt ended without a bind: it decides with its
    devices free, as before the hold."""
    service = _cluster()
    _prioritized(service)
    assert service.state.inventory.reservations()
    assert _passes(service, "p-one") == ["n1", "n2"]
    assert not service.state.inventory.reservations()


def test_a_claim_changed_before_the_bind_is_planned_again():
    """The hold was planned from the claim as it was: asking for two GPUs now, p-one no longer fits on
    n2, whatever was held there."""
    service = _cluster()
    _prioritized(service)
    assert service.state.inventory.reservations()
    with service.lock:
        service.state.apply("ResourceClaim", claim(NS, "one", [request("gpus", "gpu", 2)]))
    with pytest.raises(BindError, match="does not fit on node n2"):
        service.bind(NS, "p-one", UID, "n2")
    assert _allocated(service, "one") == []
    assert not service.state.inventory.reservations()


def test_a_deleted_pod_s_hold_ends():
    service = _cluster()
    _prioritized(service)
    assert service.state.inventory.reservations()
    with service.lock:
        service.state.remove("Pod", f"{NS}/p-one")
        service.observe("Pod", f"{NS}/p-one", None)
    assert not service.state.inventory.reservations()


def test_a_tie_for_best_holds_nothing():
    """kube-scheduler breaks a tie at random: no node is likely enough to hold devices on."""
    objects = [
        obj
        for obj in _cluster_objects()
        if not (obj[0] == "ResourceSlice" and obj[1]["metadata"]["name"] == "n2-gpus")
    ]
    objects.append(
        ("ResourceSlice", resource_slice("n2-gpus", "gpu.example.com", "n2", [device("a"), device("b")]))
    )
    service = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    scores = _prioritized(service)
    assert scores[0] == scores[1]
    assert not service.state.inventory.reservations()


def test_holds_are_bounded_oldest_ended_first():
    objects = _cluster_objects()
    for i in range(3):
        objects.append(("ResourceClaim", made_for(claim(NS, f"c{i}", [request("gpu", "gpu")]), f"p{i}")))
        objects.append(("Pod", pod(NS, f"p{i}", [f"c{i}"])))
    service = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    holds = service.binding.holds
    holds.max_holds = 1
    _prioritize(service, _pod(service, "p0"), ["n1", "n2"])
    assert service.state.inventory.reservations()
    _prioritize(service, _pod(service, "p1"), ["n1"])  # n2's GPU is held for p0: p1 is scored on n1 only
    assert [key.rpartition(":")[2] for key in service.state.inventory.reservations()] == [f"{NS}/p1"]
    assert holds.unused == 1


def test_no_hold_when_turned_off():
    service = _cluster()
    service.binding.holds.seconds = 0
    _prioritized(service)
    assert not service.state.inventory.reservations()
    assert _passes(service, "p-one-b") == ["n1", "n2"]


async def test_prioritize_answered_on_the_event_loop_holds_too():
    """The quick path (no worker thread) is what kube-scheduler's next cycle races against."""
    service = _cluster()
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))
        answer = await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2"]))
        assert answer.json() == [{"Host": "n1", "Score": 5}, {"Host": "n2", "Score": 8}]
        passed = (await _post(client, "filter", _args(service, "p-one-b", ["n1", "n2"]))).json()
        assert passed["NodeNames"] == ["n1"]
        assert "n2" in passed["FailedNodes"]
        assert (await _post(client, "bind", _bind("p-one", "n2"))).json() == {"Error": ""}
        # p-one-b, scored on n1 only, is held there: its bind has not come, the hold is neither taken
        # up nor ended.
        await _post(client, "prioritize", _args(service, "p-one-b", ["n1"]))
        assert service.state.inventory.reservations()
        metrics = samples((await client.get("/metrics")).text)
    assert metrics[("dra_extender_prioritize_holds_total", frozenset({("result", "taken")}))] == 1
    assert metrics[("dra_extender_prioritize_holds_total", frozenset({("result", "unused")}))] == 0


async def test_the_hold_is_planned_once_the_prioritize_answer_is_written():
    """Planning the bind is about half of a warm prioritize's work: kube-scheduler's cycle does not wait
    for it. It is done after the whole answer went out, before the next request is read, with background
    work still stepping aside (the answer's mark): the service lock is free for it."""
    service = _cluster()
    app = create_app(service, Settings(Path("unused")))
    sent: list[dict] = []
    seen: list[tuple[int, bool]] = []
    hold_best = service.hold_best

    def recorded(asked: dict, names: list[str], scores: list[int], attempt: PodView | None) -> None:
        seen.append((len(sent), service.answer_first.answering_now))
        hold_best(asked, names, scores, attempt)

    service.hold_best = recorded  # type: ignore[method-assign]
    body = _args(service, "p-one", ["n1", "n2"])

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    async with app.router.lifespan_context(app):
        await app(_post_scope("/scheduler/prioritize", body), receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert orjson.loads(sent[1]["body"]) == [{"Host": "n1", "Score": 5}, {"Host": "n2", "Score": 8}]
    assert seen == [(2, True)]
    assert service.state.inventory.reservations()  # n2's GPU held for p-one


class _WatchLagBinder:
    """The cluster binder as its writes are answered but not yet seen on the watch: the claims' devices
    reserved as written (``written_token``), the pod and its claims in the index as they were."""

    def __init__(self, service: SchedulingService) -> None:
        self.service = service

    def bind(self, plan: BindPlan) -> None:
        with self.service.lock:
            for pc, allocation in plan.claims:
                if allocation is not None:
                    devices = allocated_devices(allocation, pc.key)
                    self.service.state.inventory.reserve(written_token(pc.key), devices)


def test_a_hold_for_an_answer_that_comes_after_the_pod_s_bind_holds_nothing():
    """kube-scheduler gave up waiting for prioritize and bound the pod (found by review): the answer's
    follow-up comes after the bind reserved, and must not hold other devices for a bound pod."""
    service = _cluster()
    service.binder = _WatchLagBinder(service)
    asked = _pod(service, "p-one")
    assert service.filter(asked, ["n1", "n2", "n3"]).passed == ["n1", "n2"]
    scores = service.prioritize(asked, ["n1"])
    attempt = service.scored_attempt(asked)
    assert service.bind(NS, "p-one", UID, "n1") == [f"{NS}/one: gpu.example.com/n1/gpu-0"]
    service.hold_best(asked, ["n1"], scores, attempt)
    assert not [token for token in service.state.inventory.reservations() if token.startswith("prioritized:")]
    assert len(service.binding.holds) == 0


def test_a_late_answer_of_an_earlier_attempt_leaves_the_current_hold():
    """kube-scheduler gave up waiting for an attempt's prioritize and tried the pod again (found by
    review): the late answer's follow-up must not end the new attempt's hold and hold its own node."""
    service = _cluster()
    asked = _pod(service, "p-one")
    service.filter(asked, ["n1", "n2", "n3"])
    late = service.prioritize(asked, ["n1", "n2"])  # n2 best
    late_attempt = service.scored_attempt(asked)
    service.filter(asked, ["n1", "n2", "n3"])  # the next attempt
    _prioritize(service, asked, ["n1"])  # held on n1
    service.hold_best(asked, ["n1", "n2"], late, late_attempt)
    assert service.bind(NS, "p-one", UID, "n1") == [f"{NS}/one: gpu.example.com/n1/gpu-0"]
    holds = service.binding.holds
    assert (holds.taken, holds.unused) == (1, 0)


def test_prioritize_alone_holds_nothing():
    """Scores asked for without an answer to kube-scheduler (``explain``, ``simulate``) leave every
    device as it was."""
    service = _cluster()
    asked = _pod(service, "p-one")
    assert service.prioritize(asked, service.filter(asked, ["n1", "n2", "n3"]).passed) == [5, 8]
    assert not service.state.inventory.reservations()
    assert _passes(service, "p-one-b") == ["n1", "n2"]


def _alike_nodes(hold_seconds: float) -> SchedulingService:
    """n0, n1 and n2 alike (two GPUs each); pods a..e, each with its own one-GPU claim of one spec (a
    claims shape whose decisions alike nodes share). a and b are bound to n0 (full), c to n1; then d is
    filtered: n1 and n2 pass."""
    names = ("n0", "n1", "n2")
    objects: list[tuple[str, dict]] = [("Node", node(name)) for name in names]
    objects.append(("DeviceClass", device_class("gpu", 'device.driver == "gpu.example.com"')))
    for name in names:
        slice_ = resource_slice(f"{name}-gpus", "gpu.example.com", name, [device("a"), device("b")])
        objects.append(("ResourceSlice", slice_))
    for name in "abcde":
        objects.append(("ResourceClaim", made_for(claim(NS, name, [request("gpu", "gpu")]), name)))
        objects.append(("Pod", pod(NS, name, [name])))
    service = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    service.binding.holds.seconds = hold_seconds
    for name, node_name in (("a", "n0"), ("b", "n0"), ("c", "n1")):
        asked = _pod(service, name)
        _prioritize(service, asked, service.filter(asked, list(names)).passed)
        service.bind(NS, name, f"uid-pod-{NS}-{name}", node_name)
    assert service.filter(_pod(service, "d"), list(names)).passed == ["n1", "n2"]
    return service


def test_a_best_node_scored_from_an_alike_node_has_its_devices_chosen_for_the_hold():
    """n1 with one GPU used is alike n0 as it was when b was scored there: prioritize takes that score,
    with no devices chosen on n1 (checked with holds off). The hold chooses them, on the event loop."""
    unheld = _alike_nodes(0)
    assert unheld.prioritize_quick(_pod(unheld, "d"), ["n1", "n2"]) == [8, 5]  # as n2 and n1 above
    kept = unheld.decider.kept(f"uid-pod-{NS}-d", "n1")
    assert kept is not None and kept[0].results == ()  # the alike node's verdict: fits, nothing chosen
    service = _alike_nodes(HOLD_SECONDS)
    asked = _pod(service, "d")
    assert _held(service, asked, ["n1", "n2"], service.prioritize_quick(asked, ["n1", "n2"]) or []) == [8, 5]
    assert service.filter(_pod(service, "e"), ["n0", "n1", "n2"]).passed == ["n2"]  # n1's GPU: d's
    assert service.bind(NS, "d", f"uid-pod-{NS}-d", "n1") == [f"{NS}/d: gpu.example.com/n1/b"]
    assert service.binding.holds.taken == 2  # b's on n0 (a's first prioritize tied) and d's


def test_a_held_device_taken_by_another_writer_is_not_bound_twice():
    """Another scheduler's allocation of the held device reaches the index between prioritize and bind:
    the held plan is stale, the bind decides again and finds n2 full."""
    service = _cluster()
    freed = _freed_counter(service)
    _prioritized(service)
    other = claim(NS, "other", [request("gpu", "gpu")])
    result = {"request": "gpu", "driver": "gpu.example.com", "pool": "n2", "device": "gpu-0"}
    other["status"] = {"allocation": {"devices": {"results": [result]}}}
    with service.lock:
        service.state.apply("ResourceClaim", other)
    with pytest.raises(BindError, match="does not fit on node n2"):
        service.bind(NS, "p-one", UID, "n2")
    assert _allocated(service, "one") == []
    assert not service.state.inventory.reservations()
    holds = service.binding.holds
    assert (holds.taken, holds.stale, holds.unused) == (0, 1, 0)
    assert freed == [0]  # the hold's devices went to the same pod's bind: nobody else was kept out


def test_a_held_device_tainted_before_the_bind_is_not_bound():
    service = _cluster()
    _prioritized(service)
    tainted = resource_slice("n2-gpus", "gpu.example.com", "n2", [device("gpu-0")])
    tainted["spec"]["devices"][0]["taints"] = [{"key": "xid", "value": "79", "effect": "NoSchedule"}]
    with service.lock:
        service.state.apply("ResourceSlice", tainted)
    with pytest.raises(BindError, match="does not fit on node n2"):
        service.bind(NS, "p-one", UID, "n2")
    assert not service.state.inventory.reservations()


def test_a_claim_other_pods_may_share_is_not_held():
    """A claim made by hand (not from the pod's template) can be named by other pods: held as a user of
    its own, its devices would fail those pods on the node the claim is about to be allocated on."""
    objects = _objects()  # claim "one": no owner
    objects.append(("Pod", pod(NS, "p-one-too", ["one"])))
    service = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    _prioritized(service)
    assert not service.state.inventory.reservations()
    assert _passes(service, "p-one-too") == ["n1", "n2"]


def test_a_pod_bound_by_another_path_ends_its_hold():
    service = _cluster()
    _prioritized(service)
    bound = _pod(service, "p-one")
    bound["spec"]["nodeName"] = "n1"
    with service.lock:
        service.state.apply("Pod", bound)
        service.observe("Pod", f"{NS}/p-one", bound)
    assert not service.state.inventory.reservations()


def test_prioritize_scores_with_the_pod_s_own_preemption_hold_lifted_and_holds_nothing_more():
    """A preemptor's devices are held for it (``preemptionholds``): its own decisions see them free, and
    prioritize does not hold them a second time."""
    service = _cluster()
    held = AllocatedDevice(("gpu.example.com", "n2", "gpu-0"), False, "", {})
    service.preemption_holds.hold(f"{NS}/p-one", UID, "n2", (held,), 60)
    assert _prioritized(service) == [5, 8]
    assert list(service.state.inventory.reservations()) == [f"preemption:{NS}/p-one"]


def test_a_stale_hold_stays_while_the_quick_reserve_gives_up():
    """The bind's early Reserve on the event loop finds the hold stale (n2 changed) and cannot plan anew
    quickly: the devices stay held until the bind's worker thread plans."""
    service = _cluster()
    _prioritized(service)
    with service.lock:
        service.state.apply("Node", node("n2", {"zone": "b"}))  # n2's version moves on
    decide = service.binding.decide_devices

    def slow_on_the_loop(asked: dict, name: str, quick: bool) -> object:
        if quick:
            raise NotQuick
        return decide(asked, name, quick)

    service.binding.decide_devices = slow_on_the_loop  # type: ignore[assignment]
    assert service.binding.reserve_early(NS, "p-one", UID, "n2") is None
    assert _passes(service, "p-one-b") == ["n1"]  # n2's GPU still held for p-one
    assert service.bind(NS, "p-one", UID, "n2") == [f"{NS}/one: gpu.example.com/n2/gpu-0"]
    holds = service.binding.holds
    assert (holds.taken, holds.stale, holds.unused) == (0, 1, 0)
    assert not service.state.inventory.reservations()


def test_another_pod_s_bind_landing_on_the_node_leaves_a_hold_there_valid():
    """kube-scheduler packs pod after pod onto the best node: p-one-c is held on n1 while p-one-b's bind
    to n1 is still to come, and that bind lands first. It took n1's other GPU, which p-one-c's plan never
    counted on, so p-one-c's bind takes its hold up instead of planning anew (n1's version changed)."""
    objects = _cluster_objects()
    objects.append(("ResourceClaim", made_for(claim(NS, "one-c", [request("gpu", "gpu")]), "p-one-c")))
    objects.append(("Pod", pod(NS, "p-one-c", ["one-c"])))
    service = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    holds = service.binding.holds
    _prioritized(service)  # p-one held on n2 (its only GPU)
    for name in ("p-one-b", "p-one-c"):  # n2 is held: each fits on n1 only and is held there
        asked = _pod(service, name)
        assert service.filter(asked, ["n1", "n2", "n3"]).passed == ["n1"]
        _prioritize(service, asked, ["n1"])
    assert len(holds) == 3
    version = service.state.inventory.node_version("n1")
    bound_b = service.bind(NS, "p-one-b", f"uid-pod-{NS}-p-one-b", "n1")
    assert service.state.inventory.node_version("n1") != version
    bound_c = service.bind(NS, "p-one-c", f"uid-pod-{NS}-p-one-c", "n1")
    assert {*_allocated(service, "one-b"), *_allocated(service, "one-c")} == {
        ("n1", "gpu-0"),
        ("n1", "gpu-1"),
    }
    assert len(bound_b) == len(bound_c) == 1
    assert (holds.taken, holds.stale) == (2, 0)


def test_offline_serve_ends_a_late_hold_while_no_filter_comes():
    """``serve --state`` has no cluster runtime to sweep holds on its clock: without the sweeper, a hold
    whose bind never came kept its device shown in use (``GET /api/v1/nodes/N/devices``) until the next
    filter of a pod with devices."""
    service = _cluster()
    service.binding.holds.seconds = 0.01
    _prioritized(service)
    assert service.state.inventory.reservations()  # p-one's hold of n2's GPU
    with sweeping_late_holds(service.binding.holds, service.lock):
        deadline = time.monotonic() + 10
        while service.state.inventory.reservations() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not service.state.inventory.reservations()
    assert service.binding.holds.unused == 1


def test_the_offline_sweeper_survives_a_failing_sweep(caplog):
    """An exception in one sweep is logged, and the next sweep still ends the late hold."""
    service = _cluster()
    holds = service.binding.holds
    holds.seconds = 0.01
    _prioritized(service)
    real_expire, calls = holds.expire, []

    def failing_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first sweep fails")
        real_expire()

    holds.expire = failing_once  # type: ignore[method-assign]
    with sweeping_late_holds(holds, service.lock):
        deadline = time.monotonic() + 10
        while service.state.inventory.reservations() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not service.state.inventory.reservations()
    assert len(calls) >= 2
    assert "expiring late prioritize holds" in caplog.text
