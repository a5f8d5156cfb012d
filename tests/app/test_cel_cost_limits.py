"""API validation's CEL cost limits (``allocator.cel.limits``) on the state-directory and what-if paths:
a claim whose derived attribute expressions sum above DeviceClaimDerivedAttributeCELMaxCost (1,000,000) is
refused, one just under is not, and a selector estimated above CELSelectorExpressionMaxCost is refused,
naming the field with upstream's message (``validation.go``).

The estimates are upstream's (``k8s.io/dynamic-resource-allocation/cel`` ``MaxCost``, checked against the CEL
oracle by tests/allocator/test_cel_cost.py): ``NESTED`` (three nested ``map`` over the 32 domains x 32
attributes a device may have) 488,333; ``PAIRS`` 15,245; so 2 x NESTED + PAIRS = 991,911 (under) and
2 x NESTED + 2 x PAIRS = 1,007,156 (over). ``["a", "b"].join("-")`` is estimated at
1,844,674,407,370,955,275 (cel-go knows no element size of a literal list), though upstream's scheduler
would evaluate it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from allocator.cel.expr_engine import ExprEngine
from allocator.cel.limits import CLAIM_TOO_COMPLEX, TOO_COMPLEX, claim_cost_problems, selector_cost_problems
from allocator.selectors import SelectorCache
from app.cli.runtime import build_runtime
from app.explain.pod import explain_object
from tests import builders

NODE = "gpu-node-1"
NESTED = (
    "device.attributes.map(d, device.attributes[d].map(k, device.attributes[d].map(j, j.size()).size())"
    ".size())"
)
PAIRS = "device.attributes.map(d, device.attributes[d].map(k, k.size()).size())"
UNBOUNDED_SELECTOR = '["a", "b"].join("-") == "a-b"'


def claim(expressions: list[str], selector: str | None = None) -> dict[str, Any]:
    """One request per derived attribute (at most 32 a request; one each keeps the paths short), each named
    by a constraint as validation requires."""
    requests = []
    for i, expression in enumerate(expressions):
        request = builders.request(f"r{i}", "gpu.nvidia.com")
        request["exactly"]["derivedAttributes"] = [{"name": "derived/x", "expression": expression}]
        requests.append(request)
    if selector is not None:
        requests[0]["exactly"]["selectors"] = [{"cel": {"expression": selector}}]
    obj = builders.claim("demo", "big", requests)
    obj["spec"]["devices"]["constraints"] = [
        {"requests": [r["name"] for r in requests], "matchAttribute": "derived/x"}
    ]
    return obj


UNDER = [NESTED, NESTED, PAIRS]
OVER = [NESTED, NESTED, PAIRS, PAIRS]


def problems(obj: dict[str, Any]) -> list[str]:
    return claim_cost_problems(obj["spec"]["devices"], "spec.devices", SelectorCache(ExprEngine()))


def test_derived_attributes_just_under_the_claim_limit_pass() -> None:
    assert problems(claim(UNDER)) == []


def test_derived_attributes_over_the_claim_limit_are_refused() -> None:
    assert problems(claim(OVER)) == [
        f"spec.devices: {CLAIM_TOO_COMPLEX} (estimated total 1007156, limit 1000000)"
    ]


def test_a_selector_over_the_expression_limit_is_refused_naming_it() -> None:
    found = problems(claim([PAIRS], selector=UNBOUNDED_SELECTOR))
    assert found == [
        f"spec.devices.requests[0].exactly.selectors[0].cel.expression: {TOO_COMPLEX} "
        "(estimated cost 1844674407370955275, limit 1000000)"
    ]


def test_a_derived_attribute_over_the_expression_limit_is_refused_and_counted() -> None:
    unbounded = 'device.attributes["gpu.nvidia.com"].model.split("").map(s, s + s).size()'
    found = problems(claim([unbounded, PAIRS]))
    assert found[0].startswith(
        f"spec.devices.requests[0].exactly.derivedAttributes[0].expression: {TOO_COMPLEX}"
    )
    # Upstream's uint64 sum wraps: 2^64-1 + 15,245 is 15,244, under the claim limit.
    assert len(found) == 1


def test_device_class_selectors() -> None:
    found = selector_cost_problems(
        [{"cel": {"expression": "true"}}, {"cel": {"expression": UNBOUNDED_SELECTOR}}],
        "spec.selectors",
        SelectorCache(ExprEngine()),
    )
    assert [p.split(":")[0] for p in found] == ["spec.selectors[1].cel.expression"]


def write_state(root: Path, obj: dict[str, Any]) -> Path:
    objects = [
        builders.node(NODE),
        builders.device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"'),
        builders.resource_slice("gpus", "gpu.nvidia.com", NODE, [builders.device("gpu-0", {"numa": 0})]),
        obj,
    ]
    (root / "state.yaml").write_text(yaml.safe_dump_all(objects))
    return root


def test_state_directory_lists_the_claim_over_the_limit(tmp_path: Path) -> None:
    runtime = build_runtime(write_state(tmp_path, claim(OVER)))
    assert [w for w in runtime.warnings if "too complex" in w] == [
        f"{tmp_path / 'state.yaml'}: ResourceClaim demo/big: spec.devices: {CLAIM_TOO_COMPLEX} "
        "(estimated total 1007156, limit 1000000)"
    ]


def test_state_directory_accepts_the_claim_just_under(tmp_path: Path) -> None:
    runtime = build_runtime(write_state(tmp_path, claim(UNDER)))
    assert [w for w in runtime.warnings if "too complex" in w] == []


def test_what_if_refuses_what_the_api_server_refuses(tmp_path: Path) -> None:
    service = build_runtime(write_state(tmp_path, claim(UNDER))).service
    assert explain_object(service, {**claim(UNDER), "kind": "ResourceClaim"}).error == ""
    refused = explain_object(service, {**claim(OVER), "kind": "ResourceClaim"})
    assert refused.error == (
        f"ResourceClaim demo/big: spec.devices: {CLAIM_TOO_COMPLEX} (estimated total 1007156, limit 1000000)"
    )
    assert refused.nodes == []
