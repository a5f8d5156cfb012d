"""A bind's rollback and a PodGroup's claim: the group's ``reservedFor`` entry, and its allocation, are every
member's, so a member's rollback leaves them, as upstream's Unreserve leaves claims reserved for the group."""

from __future__ import annotations

import pytest

from app.scheduling.binder import FINALIZER, BindError, BindPlan
from app.state.podclaims import PodClaim
from tests.app.kube.conftest import DRIVER, NS, seed_cluster, silence_watches
from tests.builders import claim, pod, request

KEY = f"{NS}/g-gpu"
GROUP = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "uid-g"}


def _allocation(device: str) -> dict:
    return {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device}]}}


@pytest.mark.parametrize("fault", ["409 to the second try", "500"])
async def test_a_members_failed_bind_leaves_the_groups_allocation_another_member_runs_on(
    api, start_runtime, fault
):
    """Members a and b of PodGroup g share claim g-gpu. a's bind allocates it for g, and a is bound. b's
    bind, planned on an index from before a's write, sends its allocation write with the old
    resourceVersion: either its first try's connection closes unread and aiohttp's second try meets a's
    write (409), or the answer is a 500 (maybe carried out). Then b's binding fails. b's rollback must
    leave a's allocation and the group's entry (found by a break attempt: it removed both, and freed gpu-0
    in the index while a ran on it)."""
    seed_cluster(api)
    shared = claim(NS, "g-gpu", [request("gpu", "gpu", 1)])
    shared["metadata"]["finalizers"] = [FINALIZER]
    api.add("ResourceClaim", shared)
    a = api.add("Pod", pod(NS, "a", ["g-gpu"]))
    b = api.add("Pod", pod(NS, "b", ["g-gpu"]))
    runtime = await start_runtime()
    await silence_watches(api)
    known = runtime.state.get("ResourceClaim", KEY)

    def plan(member: dict, device: str) -> BindPlan:
        return BindPlan(member, "n1", ((PodClaim("gpu", KEY, known, GROUP), _allocation(device)),))

    await runtime.binder.bind_async(plan(a, "gpu-0"))
    assert api.get("Pod", NS, "a")["spec"]["nodeName"] == "n1"
    if fault == "500":
        api.fail("PUT", r"resourceclaims/g-gpu/status$", 500)
    else:
        api.disconnect("PUT", r"resourceclaims/g-gpu/status$")
    api.fail("POST", r"pods/b/binding$", 403)
    with pytest.raises(BindError):
        await runtime.binder.bind_async(plan(b, "gpu-1"))
    status = api.get("ResourceClaim", NS, "g-gpu").get("status") or {}
    assert status.get("allocation", {}).get("devices") == _allocation("gpu-0")["devices"]
    assert status.get("reservedFor") == [GROUP]
