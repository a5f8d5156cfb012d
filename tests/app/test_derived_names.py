"""Derived-attribute names (KEP-6080) as Kubernetes 1.37 validates them: ``derivedAttributes[].name`` and
``matchAttribute`` / ``distinctAttribute`` are FullyQualifiedNames, so a name local to the claim takes a
domain no driver uses (upstream's own advice: ``derived/numa``). The docs/features.md example, end to end,
and the same refusal of a bare name on the state-directory and what-if paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli.runtime import build_runtime
from app.explain.pod import explain_object, parse_object
from app.scheduling.service import SchedulingService
from app.state.convert import to_v1
from app.state.fields import ConversionError
from app.state.statedir import StateLoadError, load_state
from tests import builders

NODE = "gpu-node-1"
BARE = (
    "spec.devices.requests[0].exactly.derivedAttributes[0].name: 'numa' must include the domain "
    "(<domain>/<name>); a name local to the claim takes a domain no driver uses, e.g. 'derived/numa'"
)


def readme_claim(name: str) -> dict[str, Any]:
    """docs/features.md "derived attributes": one NUMA node for a GPU and a NIC whose drivers name NUMA
    differently."""
    gpu = builders.request("gpu", "gpu.nvidia.com")
    gpu["exactly"]["derivedAttributes"] = [
        {"name": name, "expression": 'device.attributes["gpu.nvidia.com"].numa'}
    ]
    nic = builders.request("nic", "dranet")
    nic["exactly"]["derivedAttributes"] = [
        {"name": name, "expression": 'device.attributes["dra.net"].numaNode'}
    ]
    claim = builders.claim("demo", "aligned", [gpu, nic])
    claim["spec"]["devices"]["constraints"] = [{"requests": ["gpu", "nic"], "matchAttribute": name}]
    return claim


def write_state(root: Path, claim: dict[str, Any]) -> Path:
    gpus = [builders.device(f"gpu-{i}", {"numa": i}) for i in range(2)]
    nics = [builders.device("nic-1", {"numaNode": 1})]  # only gpu-1 shares its NUMA node
    objects = [
        builders.node(NODE),
        builders.device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"'),
        builders.device_class("dranet", 'device.driver == "dra.net"'),
        builders.resource_slice("gpus", "gpu.nvidia.com", NODE, gpus),
        builders.resource_slice("nics", "dra.net", NODE, nics),
        claim,
        builders.pod("demo", "aligned", ["aligned"]),
    ]
    (root / "state.yaml").write_text(yaml.safe_dump_all(objects))
    return root


def test_the_readme_example_places_gpu_and_nic_on_one_numa_node(tmp_path: Path) -> None:
    service = build_runtime(write_state(tmp_path, readme_claim("derived/numa"))).service
    pod = service.state.get("Pod", "demo/aligned")
    assert service.filter(pod, [NODE]).passed == [NODE]
    service.bind("demo", "aligned", pod["metadata"]["uid"], NODE)
    claim = service.state.get("ResourceClaim", "demo/aligned")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-1", "nic-1"]


def test_a_bare_name_is_refused_when_the_state_loads(tmp_path: Path) -> None:
    with pytest.raises(StateLoadError) as error:
        load_state(write_state(tmp_path, readme_claim("numa")))
    assert str(error.value).endswith(BARE)


def test_what_if_refuses_a_bare_name_as_the_state_loader_does(tmp_path: Path) -> None:
    service = build_runtime(write_state(tmp_path, readme_claim("derived/numa"))).service
    assert what_if_error(service, readme_claim("numa")) == f"ResourceClaim demo/aligned: {BARE}"


def test_a_bare_constraint_attribute_is_refused(tmp_path: Path) -> None:
    service = build_runtime(write_state(tmp_path, readme_claim("derived/numa"))).service
    claim = readme_claim("derived/numa")
    claim["spec"]["devices"]["constraints"][0]["matchAttribute"] = "numa"
    assert what_if_error(service, claim) == (
        "ResourceClaim demo/aligned: spec.devices.constraints[0].matchAttribute: 'numa' must include the "
        "domain (<domain>/<name>); a name local to the claim takes a domain no driver uses, "
        "e.g. 'derived/numa'"
    )


def what_if_error(service: SchedulingService, claim: dict[str, Any]) -> str:
    answer = explain_object(service, parse_object(orjson.dumps(claim)))
    assert answer.nodes == []
    return answer.error


# validation.go validateDeviceDerivedAttribute: every derived attribute must be named by a matchAttribute or
# distinctAttribute constraint targeting its request (no requests: all; else the request, or the parent
# of a subrequest). The state loader and what-ifs took a claim the API server refuses.
UNREFERENCED = (
    "spec.devices.requests[1].exactly.derivedAttributes[0].name: 'derived/numa': must be referenced by at "
    "least one matchAttribute or distinctAttribute constraint targeting this request"
)


def gpu_only_constraint() -> dict[str, Any]:
    claim = readme_claim("derived/numa")
    claim["spec"]["devices"]["constraints"][0]["requests"] = ["gpu"]
    return claim


def test_an_unreferenced_derived_attribute_is_refused_when_the_state_loads(tmp_path: Path) -> None:
    with pytest.raises(StateLoadError) as error:
        load_state(write_state(tmp_path, gpu_only_constraint()))
    assert str(error.value).endswith(UNREFERENCED)


def test_what_if_refuses_an_unreferenced_derived_attribute(tmp_path: Path) -> None:
    service = build_runtime(write_state(tmp_path, readme_claim("derived/numa"))).service
    assert what_if_error(service, gpu_only_constraint()) == f"ResourceClaim demo/aligned: {UNREFERENCED}"


@pytest.mark.parametrize(
    ("targets", "refused"), [(None, False), (["r"], False), (["r/s"], False), (["other"], True)]
)
def test_a_constraint_on_the_parent_request_references_a_subrequests_derived_attribute(targets, refused):
    claim = builders.claim("demo", "c", [builders.request("other", "gpu")])
    claim["spec"]["devices"]["requests"].append(
        {
            "name": "r",
            "firstAvailable": [
                {
                    "name": "s",
                    "deviceClassName": "gpu",
                    "derivedAttributes": [{"name": "derived/numa", "expression": "0"}],
                }
            ],
        }
    )
    constraint: dict[str, Any] = {"matchAttribute": "derived/numa"}
    if targets is not None:
        constraint["requests"] = targets
    claim["spec"]["devices"]["constraints"] = [constraint]
    if not refused:
        to_v1(claim)
        return
    with pytest.raises(
        ConversionError, match=r"requests\[1\]\.firstAvailable\[0\]\.derivedAttributes\[0\]\.name"
    ):
        to_v1(claim)
