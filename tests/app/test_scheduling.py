"""Service-level rules around the allocator: admission rules, allocated claims, shared claims."""

from __future__ import annotations

import copy
import random
import re
import threading
import time
from typing import Any

import pytest

from allocator import decide as decide_module
from allocator.cel.expr_engine import ExprEngine
from allocator.deviceuse import AllocatedDevice
from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.search import Allocator
from allocator.selectors import SelectorCache
from app.explain.pod import explain_pod
from app.scheduling.binder import BindError
from app.scheduling.nodedecider import QUICK_DEVICE_CHECKS, QUICK_NODES
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice
from tests.signalling import SignallingCondition

DRIVER = "gpu.example.com"
ADMIN_LABEL = {"resource.kubernetes.io/admin-access": "true"}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def admin_claim(ns: str) -> dict[str, Any]:
    obj = claim(ns, "admin", [request("gpu", "gpu")])
    obj["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    return obj


def service(*objects: tuple[str, dict[str, Any]]) -> SchedulingService:
    base = [
        ("Node", node("n1")),
        ("Node", node("n2")),
        ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
        ("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0")])),
        ("ResourceSlice", resource_slice("n2-gpus", DRIVER, "n2", [device("gpu-0")])),
    ]
    return SchedulingService(ClusterState.from_objects([*base, *objects]), SelectorCache(ExprEngine()))


LABEL_MISSING = (
    "claim ops/admin: admin access to devices requires the "
    "`resource.kubernetes.io/admin-access: true` label on the containing namespace ops"
)


@pytest.mark.parametrize("labels", [None, {}, {"resource.kubernetes.io/admin-access": "false"}])
def test_admin_access_without_the_namespace_label_is_decided_and_the_write_refused(labels):
    # kube-scheduler never checks the label (the API server does, on the claim's creation and on the status
    # write: pkg/registry/resource/utils.go AuthorizedForAdminStatus), so the nodes fit as for any claim and
    # the bind's write is refused with the API server's reason, writing nothing. The extender used to fail
    # the pod with a fatal error in filter.
    objects = [("ResourceClaim", admin_claim("ops")), ("Pod", pod("ops", "p", ["admin"]))]
    if labels is not None:
        objects.append(("Namespace", namespace("ops", labels)))
    svc = service(*objects)
    outcome = svc.filter(svc.state.get("Pod", "ops/p"), ["n1", "n2"])
    assert (outcome.passed, outcome.error) == (["n1", "n2"], "")
    before = copy.deepcopy(svc.state.objects)
    with pytest.raises(BindError, match=re.escape(LABEL_MISSING)):
        svc.bind("ops", "p", "uid-pod-ops-p", "n1")
    assert svc.state.objects == before


def test_admin_access_without_the_namespace_label_that_cannot_fit_is_unschedulable_saying_why():
    # Upstream: Unschedulable ("cannot allocate all claims"), not an error; the reason keeps the label's
    # explanation, since the claim would be refused even where it fits.
    admin = admin_claim("ops")
    admin["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    svc = service(("ResourceClaim", admin), ("Pod", pod("ops", "p", ["admin"])))
    outcome = svc.filter(svc.state.get("Pod", "ops/p"), ["n1", "n2"])
    assert (outcome.passed, outcome.error) == ([], "")
    reasons = {**outcome.failed, **outcome.unresolvable}
    assert sorted(reasons) == ["n1", "n2"]
    assert all(reason.endswith(f"; {LABEL_MISSING}") for reason in reasons.values())


def test_first_available_with_prioritized_list_off_is_unschedulable_not_an_error():
    # The DynamicResources plugin's PreFilter (dynamicresources.go) answers UnschedulableAndUnresolvable for a
    # request with subrequests while DRAPrioritizedList is off; the allocator would fail the pod (fatal), and
    # the extender used to.
    wants = claim("ml", "c", [])
    wants["spec"]["devices"]["requests"] = [
        {"name": "dev", "firstAvailable": [{"name": "gpu", "deviceClassName": "gpu", "count": 1}]}
    ]
    objects = [
        ("Node", node("n1")),
        ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
        ("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0")])),
        ("ResourceClaim", wants),
        ("Pod", pod("ml", "p", ["c"])),
    ]
    state = ClusterState.from_objects(objects, FeatureGates(DRAPrioritizedList=False))
    svc = SchedulingService(state, SelectorCache(ExprEngine()))
    outcome = svc.filter(svc.state.get("Pod", "ml/p"), ["n1"])
    assert (outcome.passed, outcome.failed, outcome.error) == ([], {}, "")
    assert outcome.unresolvable == {
        "n1": "resource claim ml/c, request dev: has subrequests, but the DRAPrioritizedList feature is "
        "disabled"
    }


def test_admin_access_in_labelled_namespace_uses_devices_in_use():
    in_use = claim("ops", "other", [request("gpu", "gpu")])
    in_use["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}
        }
    }
    svc = service(
        ("Namespace", namespace("ops", ADMIN_LABEL)),
        ("ResourceClaim", in_use),
        ("ResourceClaim", admin_claim("ops")),
        ("Pod", pod("ops", "p", ["admin"])),
    )
    assert svc.filter(svc.state.get("Pod", "ops/p"), ["n1", "n2"]).passed == ["n1", "n2"]


def test_prioritize_prefers_the_node_giving_the_first_subrequest():
    # n1 and n2 each have gpu-0 and nic-0; n1's NIC and n2's GPU are in use. The pod asks firstAvailable
    # [gpu, nic]: n1 gives the first (8 - 0), n2 the second (8 - 1). Otherwise alike: numa and pcie n/a (one
    # device), packing 2/2, intact 0.5 (no topology): n1 (2 + 0.5 + 8) / 11 -> 10, n2 (2 + 0.5 + 7) / 11 -> 9.
    nic = "nic.example.com"
    used = claim("ml", "used", [request("x", "gpu")])
    used["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "x", "driver": nic, "pool": "n1", "device": "nic-0"},
                    {"request": "x", "driver": DRIVER, "pool": "n2", "device": "gpu-0"},
                ]
            }
        }
    }
    wants = claim("ml", "c", [])
    wants["spec"]["devices"]["requests"] = [
        {
            "name": "dev",
            "firstAvailable": [
                {"name": "gpu", "deviceClassName": "gpu"},
                {"name": "nic", "deviceClassName": "nic"},
            ],
        }
    ]
    svc = service(
        ("DeviceClass", device_class("nic", f'device.driver == "{nic}"')),
        ("ResourceSlice", resource_slice("n1-nics", nic, "n1", [device("nic-0")])),
        ("ResourceSlice", resource_slice("n2-nics", nic, "n2", [device("nic-0")])),
        ("ResourceClaim", used),
        ("ResourceClaim", wants),
        ("Pod", pod("ml", "p", ["c"])),
    )
    p = svc.state.get("Pod", "ml/p")
    assert svc.filter(p, ["n1", "n2"]).passed == ["n1", "n2"]
    assert svc.prioritize(p, ["n1", "n2"]) == [10, 9]


def test_allocated_claim_skipping_node_operations_needs_a_node_declaring_the_feature():
    # Upstream Filter: an allocation with skipNodeOperations fits only nodes listing DRAOptionalNodeOperations
    # in status.declaredFeatures (checked whatever the gate says: the allocation exists already).
    allocated = claim("ml", "c", [request("gpu", "gpu")])
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "n1",
        "device": "gpu-0",
        "skipNodeOperations": ["*"],
    }
    allocated["status"] = {"allocation": {"devices": {"results": [result]}}}
    svc = service(("ResourceClaim", allocated), ("Pod", pod("ml", "p", ["c"])))
    outcome = svc.filter(svc.state.get("Pod", "ml/p"), ["n1"])
    assert outcome.passed == []
    assert outcome.unresolvable == {
        "n1": "claim ml/c allocation requires DRAOptionalNodeOperations feature on the node"
    }
    declaring = {**node("n1"), "status": {"declaredFeatures": ["DRAOptionalNodeOperations"]}}
    assert svc.filter(svc.state.get("Pod", "ml/p"), ["n1"], {"n1": declaring}).passed == ["n1"]


def test_allocated_claim_pins_pod_to_its_node_and_shared_claim_only_grows_reserved_for():
    svc = _sharing_pods()
    svc.bind("ml", "a", "uid-pod-ml-a", "n2")
    allocation = copy.deepcopy(svc.state.get("ResourceClaim", "ml/shared")["status"]["allocation"])
    outcome = svc.filter(svc.state.get("Pod", "ml/b"), ["n1", "n2"])
    assert outcome.passed == ["n2"]
    assert outcome.unresolvable == {"n1": "claim ml/shared is allocated for other nodes"}
    svc.bind("ml", "b", "uid-pod-ml-b", "n2")
    status = svc.state.get("ResourceClaim", "ml/shared")["status"]
    assert status["allocation"] == allocation
    assert [r["name"] for r in status["reservedFor"]] == ["a", "b"]


def test_failed_bind_writes_nothing():
    svc = service(
        ("ResourceClaim", claim("ml", "two", [request("gpu", "gpu", 2)])), ("Pod", pod("ml", "p", ["two"]))
    )
    before = copy.deepcopy(svc.state.objects)
    with pytest.raises(BindError, match="does not fit on node n1"):
        svc.bind("ml", "p", "uid-pod-ml-p", "n1")
    assert svc.state.objects == before
    assert not svc.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))


def test_bind_to_an_unknown_node_fails_and_writes_nothing():
    svc = service(("Pod", pod("ml", "plain")))
    with pytest.raises(BindError, match="node nope is not known to dra-extender"):
        svc.bind("ml", "plain", "uid-pod-ml-plain", "nope")
    assert "nodeName" not in svc.state.get("Pod", "ml/plain")["spec"]


class _SlowBinder:
    """Holds every bind until released, like an API write in flight."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def bind(self, plan: Any) -> None:
        self.entered.set()
        assert self.release.wait(5)
        self.inner.bind(plan)


def _sharing_pods() -> SchedulingService:
    """Pods ml/a and ml/b share the unallocated claim ml/shared."""
    return service(
        ("ResourceClaim", claim("ml", "shared", [request("gpu", "gpu")])),
        ("Pod", pod("ml", "a", ["shared"])),
        ("Pod", pod("ml", "b", ["shared"])),
    )


def _a_writes_the_claim_b_shares() -> tuple[Any, ...]:
    """Pods a and b share claim ml/shared; a's bind to n1 is started and held while it writes."""
    svc = _sharing_pods()
    slow = _SlowBinder(svc.binder)
    svc.binder = slow
    first = threading.Thread(target=svc.bind, args=("ml", "a", "uid-pod-ml-a", "n1"))
    first.start()
    assert slow.entered.wait(5)
    return svc, slow, first


def test_pods_sharing_a_claim_do_not_allocate_it_twice_while_a_bind_is_in_flight():
    svc, slow, first = _a_writes_the_claim_b_shares()
    outcome = svc.filter(svc.state.get("Pod", "ml/b"), ["n1", "n2"])
    assert (outcome.passed, outcome.failed) == (
        ["n1"],
        {"n2": "claim ml/shared is being allocated for pod ml/a on node n1; only that node can use it"},
    )
    svc.binds.wait_seconds = 0.0  # the write is still going on when the wait is over
    with pytest.raises(BindError) as refused:
        svc.bind("ml", "b", "uid-pod-ml-b", "n2")
    assert str(refused.value) == (
        "claim ml/shared is being allocated for pod ml/a on node n1; retry once that bind is done"
    )
    slow.release.set()
    first.join(5)
    svc.bind("ml", "b", "uid-pod-ml-b", "n1")
    status = svc.state.get("ResourceClaim", "ml/shared")["status"]
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert [r["name"] for r in status["reservedFor"]] == ["a", "b"]


def test_a_bind_of_a_shared_claim_waits_for_the_bind_writing_it():
    svc, slow, first = _a_writes_the_claim_b_shares()
    svc.binds.done = condition = SignallingCondition(svc.lock)
    second = threading.Thread(target=svc.bind, args=("ml", "b", "uid-pod-ml-b", "n1"))
    second.start()
    assert condition.waiting.wait(5)
    slow.release.set()
    first.join(5)
    second.join(5)
    status = svc.state.get("ResourceClaim", "ml/shared")["status"]
    assert [r["name"] for r in status["reservedFor"]] == ["a", "b"]
    assert svc.state.get("Pod", "ml/b")["spec"]["nodeName"] == "n1"


def test_a_preemptor_s_held_devices_stay_held_while_its_bind_waits_for_a_shared_claim():
    """b preempted for its devices (held for it) and shares a claim a's bind is writing: while b's bind
    waits for that write, with the service lock let go, other pods' filters must still see b's devices
    held."""
    svc, slow, first = _a_writes_the_claim_b_shares()
    held = (AllocatedDevice((DRIVER, "n1", "gpu-1"), False, "", {}),)
    svc.binding.preemption_holds.hold("ml/b", "uid-pod-ml-b", "n1", held, 60)
    svc.binds.done = condition = SignallingCondition(svc.lock)
    second = threading.Thread(target=svc.bind, args=("ml", "b", "uid-pod-ml-b", "n1"))
    second.start()
    assert condition.waiting.wait(5)
    with svc.lock:
        held_now = svc.state.inventory.is_allocated((DRIVER, "n1", "gpu-1"))
    slow.release.set()
    first.join(5)
    second.join(5)
    assert held_now
    assert svc.state.get("Pod", "ml/b")["spec"]["nodeName"] == "n1"


class _WatchBehindBinder:
    """Writes as the API server does: the state shows the writes only once ``deliver`` is called."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.plans: list[Any] = []

    def bind(self, plan: Any) -> None:
        self.plans.append(plan)

    def deliver(self) -> None:
        for plan in self.plans:
            self.inner.bind(plan)


def test_a_shared_claim_written_but_not_yet_seen_is_waited_for_like_a_bind_in_flight():
    svc = _sharing_pods()
    behind = _WatchBehindBinder(svc.binder)
    svc.binder = behind
    svc.bind("ml", "a", "uid-pod-ml-a", "n1")
    outcome = svc.filter(svc.state.get("Pod", "ml/b"), ["n1", "n2"])
    assert (outcome.passed, outcome.failed) == (
        ["n1"],
        {"n2": "claim ml/shared is being allocated for pod ml/a on node n1; only that node can use it"},
    )
    svc.binds.wait_seconds = 0.0
    with pytest.raises(BindError, match="retry once that bind is done"):
        svc.bind("ml", "b", "uid-pod-ml-b", "n1")
    behind.deliver()
    with svc.lock:  # the ResourceClaim watch delivers a's write
        svc.observe("ResourceClaim", "ml/shared", svc.state.get("ResourceClaim", "ml/shared"))
    svc.binder = behind.inner
    svc.bind("ml", "b", "uid-pod-ml-b", "n1")
    status = svc.state.get("ResourceClaim", "ml/shared")["status"]
    assert [r["name"] for r in status["reservedFor"]] == ["a", "b"]


def test_explain_agrees_with_filter_while_a_shared_claim_is_written():
    svc = _sharing_pods()
    svc.binder = _WatchBehindBinder(svc.binder)
    svc.bind("ml", "a", "uid-pod-ml-a", "n1")
    verdicts = {v.node: (v.verdict, v.reason) for v in explain_pod(svc, "ml", "b").nodes}
    assert verdicts == {
        "n1": ("fits", ""),
        "n2": (
            "does-not-fit",
            "claim ml/shared is being allocated for pod ml/a on node n1; only that node can use it",
        ),
    }


def test_bind_does_not_reuse_a_result_filtered_for_other_claims_of_the_same_uid():
    svc = service(
        ("ResourceClaim", claim("ml", "two", [request("gpus", "gpu", 1)])),
        ("ResourceClaim", claim("ml", "other", [request("gpu", "gpu")])),
        ("Pod", pod("ml", "p", ["two"])),
    )
    forged = copy.deepcopy(svc.state.get("Pod", "ml/p"))
    forged["spec"]["resourceClaims"] = [{"name": "two", "resourceClaimName": "other"}]
    assert svc.filter(forged, ["n1"]).passed == ["n1"]
    svc.bind("ml", "p", "uid-pod-ml-p", "n1")
    assert svc.state.get("ResourceClaim", "ml/other").get("status") is None
    results = svc.state.get("ResourceClaim", "ml/two")["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("gpus", "gpu-0")]


def test_filter_time_budget_fails_the_nodes_it_could_not_decide():
    svc = service(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])), ("Pod", pod("ml", "p", ["c"]))
    )
    svc.filter_time_budget = -1.0
    outcome = svc.filter(svc.state.get("Pod", "ml/p"), ["n1", "n2"])
    assert outcome.passed == []
    assert outcome.failed == dict.fromkeys(
        ["n1", "n2"], "dra-extender: filter time budget (-1 s) used up first"
    )


def test_pod_without_claims_or_extended_resources_passes_without_waiting_for_the_lock():
    svc = service()
    plain = pod("ml", "plain")
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    with svc.lock:
        result: list[Any] = []
        worker = threading.Thread(target=lambda: result.append(svc.filter(plain, ["n1", "nope"])))
        worker.start()
        worker.join(2)
        assert result and result[0].passed == ["n1", "nope"]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"reservedFor": [5]}, r"status\.reservedFor\[0\]: must be an object"),
        (
            {
                "allocation": {
                    "devices": {"results": []},
                    "nodeSelector": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Bogus"}]}]
                    },
                }
            },
            r"unsupported operator 'Bogus'",
        ),
    ],
)
def test_claim_status_the_extender_reads_is_validated_when_applied(status, message):
    obj = claim("ml", "c", [request("gpu", "gpu")])
    obj["status"] = status
    svc = service()
    with pytest.raises(InvalidInputError, match=message):
        svc.state.apply("ResourceClaim", obj)
    assert svc.state.get("ResourceClaim", "ml/c") is None


def test_pods_with_equal_claim_specs_share_decisions_until_a_node_changes():
    svc = service(
        ("ResourceClaim", claim("ml", "a", [request("gpu", "gpu")])),
        ("ResourceClaim", claim("ml", "b", [request("gpu", "gpu")])),
        ("Pod", pod("ml", "a", ["a"])),
        ("Pod", pod("ml", "b", ["b"])),
    )
    assert svc.filter(svc.state.get("Pod", "ml/a"), ["n1", "n2"]).passed == ["n1", "n2"]
    svc.bind("ml", "a", "uid-pod-ml-a", "n1")
    # n1's only GPU is taken: the decision shared with pod a must not be reused for pod b on n1.
    outcome = svc.filter(svc.state.get("Pod", "ml/b"), ["n1", "n2"])
    assert outcome.passed == ["n2"]
    assert outcome.failed == {
        "n1": "claim ml/b, request gpu: 0 of 1 matching device(s) usable (1 in use, 0 tainted), 1 needed"
    }


def test_a_shared_no_fit_reason_names_the_asking_pods_claim():
    svc = service(
        ("ResourceClaim", claim("ml", "x", [request("gpu", "gpu", 2)])),
        ("ResourceClaim", claim("ml", "y", [request("gpu", "gpu", 2)])),
        ("Pod", pod("ml", "x", ["x"])),
        ("Pod", pod("ml", "y", ["y"])),
    )
    first = svc.filter(svc.state.get("Pod", "ml/x"), ["n1"])
    second = svc.filter(svc.state.get("Pod", "ml/y"), ["n1"])
    assert first.unresolvable["n1"].startswith("claim ml/x, request gpu:")
    assert second.unresolvable["n1"] == first.unresolvable["n1"].replace("ml/x", "ml/y")


def test_cached_answers_equal_a_fresh_decision_through_binds_and_changes():
    # An independent oracle: a service built from the same objects with no caches decides from scratch.
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(6)]
    objects: list[tuple[str, dict[str, Any]]] = [("Node", node(n)) for n in nodes]
    objects.append(("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')))
    objects += [
        ("ResourceSlice", resource_slice(f"{n}-gpus", DRIVER, n, [device(f"gpu-{g}") for g in range(2)]))
        for n in nodes
    ]
    svc = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    # A pod left unbound would keep its best node's devices held until the hold's time is up
    # (test_prioritizeholds): the fresh service has no such hold.
    svc.binding.holds.seconds = 0
    for step in range(40):
        name = f"p{step}"
        count = rng.choice([1, 1, 2])
        svc.state.apply("ResourceClaim", claim("ml", name, [request("gpu", "gpu", count)]))
        svc.state.apply("Pod", pod("ml", name, [name]))
        if step % 9 == 8:  # a node changes its labels: only that node's decisions are redone
            svc.state.apply("Node", node(rng.choice(nodes), {"step": str(step)}))
        got = svc.filter(svc.state.get("Pod", f"ml/{name}"), nodes)
        # The slices as given: the state keeps them without their devices.
        fresh_state = ClusterState.from_objects(
            [(k, o) for k, o in objects if k != "Node"]
            + [(k, o) for k in ("Node", "ResourceClaim", "Pod") for o in svc.state.objects[k].values()]
        )
        fresh = SchedulingService(fresh_state, SelectorCache(ExprEngine()))
        want = fresh.filter(fresh.state.get("Pod", f"ml/{name}"), nodes)
        assert (sorted(got.passed), got.failed, got.unresolvable) == (
            sorted(want.passed),
            want.failed,
            want.unresolvable,
        ), step
        # Filter may decide by free-device counts: the nodes it passes are those where the search fits.
        wanted = [svc.state.parsed_claim(f"ml/{name}")]
        searcher = Allocator(svc.state.inventory, svc.selectors)
        assert sorted(got.passed) == [n for n in nodes if searcher.allocate(svc.state.node(n), wanted)], step
        pod_now = svc.state.get("Pod", f"ml/{name}")
        assert svc.prioritize(pod_now, got.passed) == fresh.prioritize(
            fresh.state.get("Pod", f"ml/{name}"), got.passed
        )
        if got.passed and rng.random() < 0.8:
            svc.bind("ml", name, f"uid-pod-ml-{name}", rng.choice(got.passed))


def test_a_claim_recreated_between_filter_and_bind_is_decided_again():
    svc = service(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu", 1)])), ("Pod", pod("ml", "p", ["c"]))
    )
    assert svc.filter(svc.state.get("Pod", "ml/p"), ["n1"]).passed == ["n1"]
    svc.state.remove("ResourceClaim", "ml/c")
    recreated = claim("ml", "c", [request("gpu", "gpu", 2)])
    recreated["metadata"]["uid"] = "new-uid"
    svc.state.apply("ResourceClaim", recreated)
    with pytest.raises(BindError, match="does not fit on node n1"):  # n1 has one GPU; the claim now wants two
        svc.bind("ml", "p", "uid-pod-ml-p", "n1")
    assert svc.state.get("ResourceClaim", "ml/c").get("status") is None


def test_filtering_an_already_bound_pod_again_changes_nothing():
    svc = service(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])), ("Pod", pod("ml", "p", ["c"]))
    )
    stale_copy = copy.deepcopy(svc.state.get("Pod", "ml/p"))
    svc.bind("ml", "p", "uid-pod-ml-p", "n2")
    before = copy.deepcopy(svc.state.objects)
    outcome = svc.filter(stale_copy, ["n1", "n2"])
    assert outcome.passed == ["n2"]
    assert outcome.unresolvable == {"n1": "pod is already bound to node n2"}
    assert svc.state.objects == before


def test_the_time_budget_is_checked_before_every_slow_decision():
    svc = service(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])), ("Pod", pod("ml", "p", ["c"]))
    )
    decide = svc.decider._decide_node
    calls: list[str] = []

    def slow(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        time.sleep(0.2)
        return decide(name, *args, **kwargs)

    svc.decider._decide_node = slow  # type: ignore[method-assign]
    svc.filter_time_budget = 0.1
    outcome = svc.filter(svc.state.get("Pod", "ml/p"), ["n1", "n2"])
    assert calls == ["n1"]
    assert outcome.failed == {"n2": "dra-extender: filter time budget (0.1 s) used up first"}


def test_nodes_left_undecided_after_a_change_are_decided_again_next_time():
    svc = service(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])), ("Pod", pod("ml", "p", ["c"]))
    )
    the_pod = svc.state.get("Pod", "ml/p")
    assert svc.filter(the_pod, ["n1", "n2"]).passed == ["n1", "n2"]
    rule = {
        "metadata": {"name": "all"},
        "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "NoSchedule"}},
    }
    svc.state.apply("DeviceTaintRule", rule)
    svc.filter_time_budget = -1.0  # nothing gets decided after the change
    assert svc.filter(the_pod, ["n1", "n2"]).passed == []
    svc.filter_time_budget = 3.0
    outcome = svc.filter(the_pod, ["n1", "n2"])
    assert outcome.passed == []
    assert set(outcome.failed) | set(outcome.unresolvable) == {"n1", "n2"}
    assert all("tainted" in r for r in outcome.failed.values())


def test_concurrent_binds_of_pods_sharing_an_allocated_claim_keep_every_reservation():
    svc = service(
        ("ResourceClaim", claim("ml", "shared", [request("gpu", "gpu")])),
        *(("Pod", pod("ml", n, ["shared"])) for n in ("a", "b", "c")),
    )
    svc.bind("ml", "a", "uid-pod-ml-a", "n1")
    slow = _SlowBinder(svc.binder)
    svc.binder = slow
    threads = [threading.Thread(target=svc.bind, args=("ml", n, f"uid-pod-ml-{n}", "n1")) for n in ("b", "c")]
    for t in threads:
        t.start()
    time.sleep(0.2)
    slow.release.set()
    for t in threads:
        t.join(5)
    reserved = svc.state.get("ResourceClaim", "ml/shared")["status"]["reservedFor"]
    assert sorted(r["name"] for r in reserved) == ["a", "b", "c"]


def _gpu_cluster(nodes: int, gpus: int, *objects: tuple[str, dict[str, Any]]) -> SchedulingService:
    names = [f"n{i}" for i in range(nodes)]
    base: list[tuple[str, dict[str, Any]]] = [("Node", node(n)) for n in names]
    base.append(("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')))
    base += [
        ("ResourceSlice", resource_slice(f"{n}-gpus", DRIVER, n, [device(f"gpu-{g}") for g in range(gpus)]))
        for n in names
    ]
    return SchedulingService(ClusterState.from_objects([*base, *objects]), SelectorCache(ExprEngine()))


def _take(svc: SchedulingService, name: str, node_name: str, gpus: range) -> None:
    """Another claim now holds these GPUs of ``node_name``."""
    other = claim("ml", name, [request("gpu", "gpu", len(gpus))])
    results = [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{g}"} for g in gpus]
    other["status"] = {"allocation": {"devices": {"results": results}}}
    svc.state.apply("ResourceClaim", other)


def test_a_node_counts_rule_out_is_decided_without_the_search_even_on_the_event_loop(monkeypatch):
    # 16 of 40 GPUs wanted, 15 left: counts rule the node out without starting a search.
    svc = _gpu_cluster(
        2,
        40,
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu", 16)])),
        ("Pod", pod("ml", "p", ["c"])),
    )
    wanted = svc.state.get("Pod", "ml/p")
    assert svc.filter(wanted, ["n0", "n1"]).passed == ["n0", "n1"]
    _take(svc, "other", "n0", range(25))
    searches: list[str] = []
    select = decide_module.select
    monkeypatch.setattr(
        decide_module,
        "select",
        lambda inventory, selectors, node, *args: (
            searches.append(node.name) or select(inventory, selectors, node, *args)
        ),
    )
    outcome = svc.filter_quick(wanted, ["n0", "n1"])
    assert outcome is not None and searches == []
    assert outcome.passed == ["n1"]
    assert outcome.failed == {
        "n0": "claim ml/c, request gpu: 15 of 40 matching device(s) usable (25 in use, 0 tainted), 16 needed"
    }


def test_prioritize_quick_leaves_many_or_big_nodes_to_a_worker_thread():
    gpus = QUICK_DEVICE_CHECKS // 2  # one request: two such nodes are the most a quick answer may take
    svc = _gpu_cluster(
        QUICK_NODES + 1,
        gpus,
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])),
        ("Pod", pod("ml", "p", ["c"])),
    )
    wanted = svc.state.get("Pod", "ml/p")
    names = [f"n{i}" for i in range(QUICK_NODES + 1)]
    assert svc.filter(wanted, names).passed == names  # decided by counts: no devices chosen yet
    assert svc.prioritize_quick(wanted, names) is None  # too many nodes
    assert svc.prioritize_quick(wanted, names[:3]) is None  # too many devices
    assert svc.prioritize_quick(wanted, names[:2]) == svc.prioritize(wanted, names[:2])


def test_a_declined_prioritize_quick_keeps_the_pods_decisions():
    svc = _gpu_cluster(
        8, 8, ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu", 2)])), ("Pod", pod("ml", "p", ["c"]))
    )
    wanted = svc.state.get("Pod", "ml/p")
    names = [f"n{i}" for i in range(8)]
    sent = {n: svc.state.get("Node", n) for n in names}  # Node objects sent: decisions are the pod's own
    passed = svc.filter(wanted, names, sent).passed
    _take(svc, "other", "n0", range(1))
    decided: list[str] = []
    decide = svc.decider._decide_node
    svc.decider._decide_node = lambda name, *a, **k: decided.append(name) or decide(name, *a, **k)  # type: ignore[method-assign]
    assert svc.prioritize_quick(wanted, passed, sent) is None
    svc.prioritize(wanted, passed, sent)
    assert decided == ["n0"]  # only the node that changed since filter


def extended_pod(name: str, env_bytes: int = 0) -> dict[str, Any]:
    """A pod asking for one GPU as the implicit extended resource of class gpu, with an env var of
    ``env_bytes`` bytes (a large spec)."""
    p = pod("default", name)
    container = p["spec"]["containers"][0]
    container["resources"] = {"limits": {"deviceclass.resource.kubernetes.io/gpu": "1"}}
    if env_bytes:
        container["env"] = [{"name": "BIG", "value": "x" * env_bytes}]
    return p


def test_what_filter_keeps_per_pod_does_not_grow_with_the_pod_spec():
    svc = service()
    p = extended_pod("big", env_bytes=1 << 20)
    assert svc.filter(p, ["n1", "n2"]).passed == ["n1", "n2"]
    view = svc.decisions.view(p["metadata"]["uid"])
    assert view is not None
    assert len(view.pod_spec) + len(view.shape) <= 64
    # bind still recognises the spec filter decided for
    svc.state.apply("Pod", p)
    svc.bind("default", "big", p["metadata"]["uid"], "n1")


def test_kept_per_pod_decisions_are_bounded_in_total():
    # A pod's view counts 1 plus its private decisions (extended resources: one per node): 3 here.
    svc = service()
    svc.decisions.max_kept = 5
    pods = [extended_pod(f"p{i}") for i in range(4)]
    for p in pods:
        assert svc.filter(p, ["n1", "n2"]).passed == ["n1", "n2"]
    assert [p for p in pods if svc.decisions.view(p["metadata"]["uid"])] == [pods[-1]]


def test_a_bind_waits_for_the_index_to_show_a_claim_the_pod_names():
    # Seen on a real control plane: kube-scheduler's informer showed the claim the resourceclaim
    # controller made before ours did, so its bind arrived first. The bind waits for the watch.
    svc = service(("Pod", pod("ml", "p", ["late"])))
    late = claim("ml", "late", [request("gpu", "gpu")])

    def watch_catches_up() -> None:
        time.sleep(0.2)
        with svc.lock:
            svc.state.apply("ResourceClaim", late)

    threading.Thread(target=watch_catches_up).start()
    svc.bind("ml", "p", "uid-pod-ml-p", "n1")
    status = svc.state.get("ResourceClaim", "ml/late")["status"]
    assert status["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    assert svc.state.get("Pod", "ml/p")["spec"]["nodeName"] == "n1"


def test_a_bind_for_a_claim_that_never_shows_up_fails_with_the_reason():
    svc = service(("Pod", pod("ml", "p", ["missing"])))
    svc.binding.index_lag_seconds = 0.1
    before = copy.deepcopy(svc.state.objects)
    with pytest.raises(BindError) as failed:
        svc.bind("ml", "p", "uid-pod-ml-p", "n1")
    assert str(failed.value) == (
        'pod ml/p is not ready to bind: pod claim missing: resourceclaim "missing" not found; '
        "kube-scheduler will retry the pod"
    )
    assert svc.state.objects == before


def test_a_patched_answer_keeps_the_order_of_the_node_list():
    # The wire layer sends the candidates minus the failed nodes when filter's answer is in their order.
    objects: list[tuple[str, dict[str, Any]]] = [
        ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    ]
    for n in ("n1", "n2", "n3"):
        objects += [
            ("Node", node(n)),
            ("ResourceSlice", resource_slice(f"{n}-gpus", DRIVER, n, [device("gpu-0"), device("gpu-1")])),
        ]
    svc = SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))
    names = ["n1", "n2", "n3"]

    def filtered(name: str) -> list[str]:
        svc.state.apply("ResourceClaim", claim("ml", name, [request("gpu", "gpu")]))
        svc.state.apply("Pod", pod("ml", name, [name]))
        return svc.filter(svc.state.get("Pod", f"ml/{name}"), names).passed

    assert filtered("a") == names
    svc.bind("ml", "a", "uid-pod-ml-a", "n1")  # n1 decided again: it still passes, in its place
    assert filtered("b") == names
    svc.bind("ml", "b", "uid-pod-ml-b", "n1")  # n1 is full
    assert filtered("c") == ["n2", "n3"]
    svc.state.remove("ResourceClaim", "ml/a")  # n1 passes again
    assert filtered("d") == names
