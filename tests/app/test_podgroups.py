"""Workload-level ResourceClaims (``app.state.podgroups``): PodGroup claims generated once for the group, pods
joining through ``spec.schedulingGroup.podGroupName``, one ``reservedFor`` entry for the whole group.

Expectations are worked out from upstream's ``resourceclaim.BindTo`` / ``IsForPod`` / ``IsReservedForPod``
and the resourceclaim controller's ``handlePodGroupClaim``."""

from __future__ import annotations

import copy
import dataclasses
import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from allocator.features import FeatureGates
from app.cli.explain import render_explanation
from app.cli.runtime import StartupError, build_runtime
from app.cli.simulate import simulate
from app.explain.pod import explain_pod
from app.kube.client import NotFoundError
from app.kube.informers import discover_pod_groups
from app.state.podclaims import ClaimNotReady, ClaimProblem, claim_problems, pod_claims
from app.state.uids import stable_uid
from tests.builders import claim, claim_template, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"
ON = dataclasses.replace(FeatureGates(), GenericWorkload=True, DRAWorkloadResourceClaims=True)


def pod_group(name: str, claims: list[dict[str, Any]], *, version: str = "v1beta1") -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulingPolicy": {"basic": {}}, "resourceClaims": claims},
    }


def member(name: str, group: str, **templates: str) -> dict[str, Any]:
    obj = pod(NS, name, templates=templates)
    obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    return obj


def _state_dir(tmp_path: Path, *objects: dict[str, Any]) -> Path:
    base = [
        node("n1"),
        node("n2"),
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), device("gpu-1")]),
        resource_slice("n2-gpus", DRIVER, "n2", [device("gpu-0"), device("gpu-1")]),
        claim_template(NS, "one-gpu", [request("gpu", "gpu")]),
    ]
    (tmp_path / "state.yaml").write_text(yaml.safe_dump_all([*base, *objects]))
    return tmp_path


def _group_of_three(tmp_path: Path) -> Path:
    return _state_dir(
        tmp_path,
        pod_group("train", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
        *(member(f"w{i}", "train", gpu="one-gpu") for i in range(3)),
    )


def test_a_group_template_claim_is_made_once_and_reserved_for_the_group(tmp_path):
    runtime = build_runtime(_group_of_three(tmp_path), ON)
    result = simulate(runtime.service)
    # One claim for the group (named <group>-<claim>-<5 characters>, owned by the PodGroup); every
    # member uses it, so all three land on the node its single GPU was allocated on (n1, first fit).
    claims = runtime.state.objects["ResourceClaim"]
    (key,) = claims
    assert key.startswith(f"{NS}/train-gpu-") and len(key) == len(f"{NS}/train-gpu-") + 5
    owner = claims[key]["metadata"]["ownerReferences"]
    uid = stable_uid("PodGroup", NS, "train")
    assert owner == [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "name": "train",
            "uid": uid,
            "controller": True,
        }
    ]
    assert [(p["name"], p["node"], p["error"]) for p in result["pods"]] == [
        ("w0", "n1", None),
        ("w1", "n1", None),
        ("w2", "n1", None),
    ]
    status = claims[key]["status"]
    assert status["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": uid}
    ]
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == ["gpu-0"]
    group = runtime.state.get("PodGroup", f"{NS}/train")
    assert group["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": key.partition("/")[2]}
    ]


def test_with_the_gates_off_each_pod_gets_its_own_claim(tmp_path):
    runtime = build_runtime(_group_of_three(tmp_path), FeatureGates())
    result = simulate(runtime.service)
    claims = runtime.state.objects["ResourceClaim"]
    assert len(claims) == 3
    # Four GPUs on two nodes, one each: first fit gives n1 twice, then n2 (n1 full).
    assert [p["node"] for p in result["pods"]] == ["n1", "n1", "n2"]
    for obj in claims.values():
        assert [r["resource"] for r in obj["status"]["reservedFor"]] == ["pods"]


def test_a_pod_claim_that_differs_from_the_groups_stays_the_pods(tmp_path):
    # Same name, other template: not the group's claim (BindTo compares name and source).
    other = claim_template(NS, "other-gpu", [request("gpu", "gpu")])
    runtime = build_runtime(
        _state_dir(
            tmp_path,
            other,
            pod_group("train", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
            member("solo", "train", gpu="other-gpu"),
        ),
        ON,
    )
    simulate(runtime.service)
    owners = sorted(
        o["metadata"]["ownerReferences"][0]["kind"] for o in runtime.state.objects["ResourceClaim"].values()
    )
    assert owners == ["Pod", "PodGroup"]
    mine = next(
        o
        for o in runtime.state.objects["ResourceClaim"].values()
        if o["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    )
    assert [r["name"] for r in mine["status"]["reservedFor"]] == ["solo"]


def _group_claim(reserved: list[dict[str, Any]]) -> dict[str, Any]:
    obj = claim(NS, "train-gpu-abcde", [request("gpu", "gpu")])
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "name": "train",
            "uid": "g",
            "controller": True,
        }
    ]
    obj["status"] = {"reservedFor": reserved}
    return obj


def _with_status(p: dict[str, Any]) -> dict[str, Any]:
    p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "train-gpu-abcde"}]
    return p


def test_a_claim_owned_by_the_pods_group_is_the_pods_only_with_the_gates():
    group = pod_group("train", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    group["metadata"]["uid"] = "g"
    p = _with_status(member("w0", "train", gpu="one-gpu"))
    claims = {f"{NS}/train-gpu-abcde": _group_claim([])}
    with pytest.raises(ClaimNotReady, match='resourceclaim "train-gpu-abcde" was not created for this pod'):
        pod_claims(p, claims)
    (resolved,) = pod_claims(p, claims, {f"{NS}/train": group})
    assert resolved.consumer == {
        "apiGroup": "scheduling.k8s.io",
        "resource": "podgroups",
        "name": "train",
        "uid": "g",
    }
    with pytest.raises(ClaimNotReady, match=f"PodGroup {NS}/train of the pod not found"):
        pod_claims(p, claims, {})


def test_the_groups_entry_counts_once_against_the_reservation_limit(tmp_path):
    # 255 other pods plus the group hold the claim: 256 entries, the limit. A member is reserved through
    # the group's entry and fits; a pod outside the group would be the 257th.
    reserved = [{"resource": "pods", "name": f"x{i}", "uid": f"x{i}"} for i in range(255)]
    reserved.append({"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "g"})
    shared = _group_claim(reserved)
    shared["status"]["allocation"] = {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}
    }
    group = pod_group("train", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    group["metadata"]["uid"] = "g"
    outsider = pod(NS, "outsider", ["train-gpu-abcde"])
    runtime = build_runtime(
        _state_dir(tmp_path, shared, group, _with_status(member("w0", "train", gpu="one-gpu")), outsider), ON
    )
    service = runtime.service
    inside = service.filter(service.state.get("Pod", f"{NS}/w0"), ["n1", "n2"])
    assert inside.passed == ["n1", "n2"]
    outside = service.filter(service.state.get("Pod", f"{NS}/outsider"), ["n1"])
    assert outside.unresolvable == {"n1": f"claim {NS}/train-gpu-abcde is reserved for 256 consumers already"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "gpu"},
            "spec.resourceClaims[0]: exactly one of resourceClaimName and resourceClaimTemplateName",
        ),
        ({"resourceClaimName": "c"}, "spec.resourceClaims[0].name: Required value"),
    ],
)
def test_a_bad_pod_group_names_the_field(tmp_path, entry, message):
    with pytest.raises(StartupError, match=re.escape(message)):
        build_runtime(_state_dir(tmp_path, pod_group("train", [entry])), ON)


@pytest.mark.parametrize("section", ["spec", "status"])
def test_a_pod_group_section_that_is_no_object_names_it(tmp_path, section):
    group = pod_group("train", []) | {section: "abc"}
    with pytest.raises(StartupError, match=f"{section}: must be an object"):
        build_runtime(_state_dir(tmp_path, group), ON)


def test_a_pod_group_namespace_that_is_no_string_names_the_field(tmp_path):
    group = pod_group("train", [])
    group["metadata"]["namespace"] = 12
    with pytest.raises(
        StartupError, match=re.escape("PodGroup 12/train: metadata.namespace: must be a string")
    ):
        build_runtime(_state_dir(tmp_path, group), ON)


def test_a_scheduling_group_that_is_no_object_is_an_error_not_no_group(tmp_path):
    pod_ = member("w0", "train", gpu="one-gpu")
    pod_["spec"]["schedulingGroup"] = "train"
    state = _state_dir(
        tmp_path, pod_group("train", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]), pod_
    )
    with pytest.raises(
        StartupError, match=re.escape(f"Pod {NS}/w0: spec.schedulingGroup: must be an object")
    ):
        build_runtime(state, ON)


def test_explain_names_the_group_of_a_group_claim(tmp_path):
    runtime = build_runtime(_group_of_three(tmp_path), ON)
    explanation = explain_pod(runtime.service, NS, "w1")
    (summary,) = explanation.claims
    assert (summary.podClaimName, summary.podGroup, summary.allocated) == ("gpu", "train", False)
    out = io.StringIO()
    render_explanation(explanation, out)
    assert (
        f"pod claim gpu: ResourceClaim {summary.claim} (to allocate, the claim of PodGroup train)"
        in out.getvalue()
    )


class _Discovery:
    """The two discovery reads of ``KubeClient``, answering from fixed documents."""

    def __init__(self, versions: list[str], resources: dict[str, list[str]]) -> None:
        self.versions, self.resources = versions, resources

    async def api_group(self, group: str) -> dict[str, Any]:
        if group != "scheduling.k8s.io" or not self.versions:
            raise NotFoundError(404, "NotFound", group)
        return {"versions": [{"version": v} for v in self.versions]}

    async def api_resources(self, group: str, version: str) -> dict[str, Any]:
        return {"resources": [{"name": n} for n in self.resources.get(version, [])]}


@pytest.mark.parametrize(
    ("versions", "resources", "expected"),
    [
        (
            ["v1", "v1beta1", "v1alpha3"],
            {"v1": ["priorityclasses"], "v1beta1": ["podgroups", "workloads"]},
            "v1beta1",
        ),
        (["v1", "v1alpha3"], {"v1alpha3": ["podgroups"]}, "v1alpha3"),
        (["v1"], {"v1": ["priorityclasses"]}, None),
        ([], {}, None),
    ],
)
async def test_pod_groups_are_watched_at_the_first_version_serving_them(versions, resources, expected):
    found = await discover_pod_groups(_Discovery(versions, resources))
    assert {k: r.version for k, r in found.items()} == ({"PodGroup": expected} if expected else {})


def test_claim_problems_report_a_missing_pod_group_once_for_the_pod():
    """pod_claims raises it before looking at any claim; claim_problems gives it as one pod-wide row."""
    pod = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {
            "schedulingGroup": {"podGroupName": "g"},
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "a"},
                {"name": "b", "resourceClaimName": "b"},
            ],
        },
    }
    with pytest.raises(ClaimNotReady, match=r"^PodGroup ns/g of the pod not found$"):
        pod_claims(pod, {}, groups={})
    assert claim_problems(pod, {}, groups={}) == [ClaimProblem("", "", "PodGroup ns/g of the pod not found")]
    # Without the workload-claim gates there are no groups: each claim stands alone.
    assert claim_problems(pod, {}, groups=None) == [
        ClaimProblem("a", "ns/a", 'pod claim a: resourceclaim "a" not found'),
        ClaimProblem("b", "ns/b", 'pod claim b: resourceclaim "b" not found'),
    ]


def test_explain_names_the_group_of_a_group_claim_when_another_claim_is_missing(tmp_path):
    """No node resolves w1 (its second claim does not exist): the header still names the group's claim
    with its group, beside the missing claim's problem."""
    runtime = build_runtime(_group_of_three(tmp_path), ON)
    state = runtime.state
    w1 = copy.deepcopy(state.get("Pod", f"{NS}/w1"))
    w1["spec"]["resourceClaims"].append({"name": "extra", "resourceClaimName": "nope"})
    state.apply("Pod", w1)
    explanation = explain_pod(runtime.service, NS, "w1")
    assert {v.verdict for v in explanation.nodes} == {"unresolvable"}
    assert [(c.podClaimName, c.podGroup, c.problem) for c in explanation.claims] == [
        ("gpu", "train", ""),
        ("extra", "", 'pod claim extra: resourceclaim "nope" not found'),
    ]
