"""app.state.claimgen: the resourceclaim controller's template claims, offline and deterministic."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from app.state.claimgen import (
    POD_CLAIM_NAME_ANNOTATION,
    claim_generate_name,
    claim_name,
    generate_template_claims,
)
from app.state.statedir import ClusterObjects, load_state
from app.state.uids import stable_uid

Obj = dict[str, Any]
NS = "team-a"
POD_UID = "0a1b2c3d-0000-4000-8000-000000000001"
SUFFIX = re.compile(r"[bcdfghjklmnpqrstvwxz2456789]{5}")


def pod(name: str = "trainer", *claims: Obj, uid: str | None = POD_UID, **status: Any) -> Obj:
    metadata: Obj = {"name": name, "namespace": NS}
    if uid:
        metadata["uid"] = uid
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "image": "x"}], "resourceClaims": list(claims)},
    }
    if status:
        obj["status"] = status
    return obj


def from_template(name: str = "gpu", template_name: str = "one-gpu") -> Obj:
    return {"name": name, "resourceClaimTemplateName": template_name}


def template(name: str = "one-gpu", namespace: str = NS, **template_metadata: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": {"outer": "not-copied"}},
        "spec": {
            "metadata": template_metadata,
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
            },
        },
    }


def state(*objects: Obj) -> ClusterObjects:
    result = ClusterObjects()
    for obj in objects:
        result.of_kind(obj["kind"]).append(obj)
    return result


# --- names -------------------------------------------------------------------------------------------------


def test_generate_name_is_pod_dash_claim_dash() -> None:
    assert claim_generate_name("trainer-0", "gpus") == "trainer-0-gpus-"


def test_generate_name_cuts_both_parts_in_proportion_like_upstream() -> None:
    # base "<40 a>-<30 b>-" is 72 long: pod keeps 40*57//72 = 31, claim keeps 30*57//72 = 23, and upstream
    # joins them with one '-' and no trailing hyphen.
    assert claim_generate_name("a" * 40, "b" * 30) == "a" * 31 + "-" + "b" * 23
    # exactly 57 characters is not cut
    assert claim_generate_name("p" * 50, "c" * 5) == "p" * 50 + "-ccccc-"
    # one more and both parts are cut: 51*57//58 = 50 and 5*57//58 = 4
    assert claim_generate_name("p" * 51, "c" * 5) == "p" * 50 + "-cccc"


def test_claim_name_is_deterministic_with_five_generated_characters() -> None:
    name = claim_name(NS, "trainer", "gpu")
    assert name == claim_name(NS, "trainer", "gpu")
    assert name.startswith("trainer-gpu-") and SUFFIX.fullmatch(name.removeprefix("trainer-gpu-"))
    assert claim_name(NS, "trainer", "gpu", attempt=1) != name
    assert claim_name("team-b", "trainer", "gpu") != name
    assert len(claim_name(NS, "p" * 63, "c" * 63)) <= 63


# --- claims from templates ---------------------------------------------------------------------------------


def test_claim_is_created_from_the_template_and_recorded_in_the_pod_status() -> None:
    tmpl = template(labels={"team": "a"}, annotations={"note": "from-template"})
    objects = state(pod("trainer", from_template("gpu")), tmpl)
    notes = generate_template_claims(objects)

    (claim,) = objects.resource_claims
    name = claim["metadata"]["name"]
    assert name == claim_name(NS, "trainer", "gpu")
    assert claim == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "generateName": "trainer-gpu-",
            "namespace": NS,
            "uid": stable_uid("ResourceClaim", NS, name),
            "labels": {"team": "a"},
            "annotations": {"note": "from-template", POD_CLAIM_NAME_ANNOTATION: "gpu"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "trainer",
                    "uid": POD_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": tmpl["spec"]["spec"],
    }
    assert objects.pods[0]["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": name}]
    assert notes == [
        f"pod {NS}/trainer: pod claim gpu: created ResourceClaim {name} from ResourceClaimTemplate one-gpu"
    ]


def test_claim_spec_is_a_copy_of_the_template_spec() -> None:
    tmpl = template()
    objects = state(pod("trainer", from_template()), tmpl)
    generate_template_claims(objects)
    objects.resource_claims[0]["spec"]["devices"]["requests"].clear()
    assert tmpl["spec"]["spec"]["devices"]["requests"]
    assert "labels" not in objects.resource_claims[0]["metadata"]


def test_every_template_claim_of_a_pod_is_created_and_direct_claims_are_left_alone() -> None:
    direct = {"name": "shared", "resourceClaimName": "shared-gpu"}
    objects = state(
        pod("trainer", from_template("gpu"), direct, from_template("nic", "one-nic")),
        template(),
        template("one-nic"),
    )
    generate_template_claims(objects)
    assert [c["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] for c in objects.resource_claims] == [
        "gpu",
        "nic",
    ]
    assert [s["name"] for s in objects.pods[0]["status"]["resourceClaimStatuses"]] == ["gpu", "nic"]


def test_generation_is_idempotent() -> None:
    objects = state(pod("trainer", from_template()), template())
    generate_template_claims(objects)
    snapshot = copy.deepcopy(objects)
    assert generate_template_claims(objects) == []
    assert objects == snapshot


@pytest.mark.parametrize(
    "statuses",
    [
        [{"name": "gpu", "resourceClaimName": "trainer-gpu-x9k2l"}],  # named claim absent from the state
        [{"name": "gpu"}],  # resourceClaimName unset: no claim needed
    ],
)
def test_pod_whose_status_already_has_the_claim_is_left_alone(statuses: list[Obj]) -> None:
    original = pod("trainer", from_template(), resourceClaimStatuses=statuses)
    objects = state(copy.deepcopy(original), template())
    assert generate_template_claims(objects) == []
    assert objects.resource_claims == []
    assert objects.pods == [original]


def test_missing_template_leaves_the_pod_alone() -> None:
    original = pod("trainer", from_template("gpu", "no-such-template"))
    objects = state(copy.deepcopy(original), template(namespace="other-namespace", name="no-such-template"))
    notes = generate_template_claims(objects)
    assert objects.resource_claims == []
    assert objects.pods == [original]
    assert notes == [
        f"pod {NS}/trainer: pod claim gpu: ResourceClaimTemplate {NS}/no-such-template not found; "
        "no claim created"
    ]


def test_pods_being_deleted_are_skipped() -> None:
    deleting = pod("trainer", from_template())
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    objects = state(deleting, template())
    assert generate_template_claims(objects) == []
    assert objects.resource_claims == []


def test_orphaned_claim_of_the_pod_is_adopted() -> None:
    orphan = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "trainer-gpu-abcde",
            "namespace": NS,
            "annotations": {POD_CLAIM_NAME_ANNOTATION: "gpu"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": POD_UID, "controller": True}
            ],
        },
        "spec": {},
    }
    not_controlled = copy.deepcopy(orphan)
    not_controlled["metadata"]["name"] = "trainer-gpu-fghjk"
    not_controlled["metadata"]["ownerReferences"][0]["controller"] = False
    objects = state(pod("trainer", from_template()), template(), not_controlled, orphan)
    notes = generate_template_claims(objects)
    assert len(objects.resource_claims) == 2
    assert objects.pods[0]["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": "trainer-gpu-abcde"}
    ]
    assert notes == [f"pod {NS}/trainer: pod claim gpu: adopted ResourceClaim trainer-gpu-abcde"]


def test_name_taken_by_another_claim_gets_the_next_suffix() -> None:
    taken = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim_name(NS, "trainer", "gpu"), "namespace": NS},
        "spec": {},
    }
    objects = state(pod("trainer", from_template()), template(), taken)
    generate_template_claims(objects)
    assert objects.resource_claims[1]["metadata"]["name"] == claim_name(NS, "trainer", "gpu", attempt=1)


def test_pod_without_uid_gets_the_stable_uid_used_by_the_loader() -> None:
    objects = state(pod("trainer", from_template(), uid=None), template())
    generate_template_claims(objects)
    expected = stable_uid("Pod", NS, "trainer")
    assert objects.pods[0]["metadata"]["uid"] == expected
    assert objects.resource_claims[0]["metadata"]["ownerReferences"][0]["uid"] == expected


def test_reloading_a_state_directory_gives_the_same_claims(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text(
        """
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: team-a}
spec:
  spec:
    devices:
      requests: [{name: gpu, deviceClassName: gpu.example.com}]
---
apiVersion: v1
kind: Pod
metadata: {name: a-pod-with-a-rather-long-name-that-needs-truncating, namespace: team-a}
spec:
  containers: [{name: main, image: x}]
  resourceClaims: [{name: gpu-claim-with-a-long-name-as-well, resourceClaimTemplateName: one-gpu}]
"""
    )
    first, second = load_state(tmp_path), load_state(tmp_path)
    generate_template_claims(first)
    generate_template_claims(second)
    assert first.resource_claims == second.resource_claims
    (claim,) = first.resource_claims
    # 87 characters before the cut: the pod keeps 51*57//87 = 33, the pod claim 34*57//87 = 22.
    assert claim["metadata"]["generateName"] == "a-pod-with-a-rather-long-name-tha-gpu-claim-with-a-long-"
    assert len(claim["metadata"]["name"]) == 56 + 5
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
    ]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == first.pods[0]["metadata"]["uid"]
