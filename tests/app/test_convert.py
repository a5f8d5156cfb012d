"""app.state.convert: older resource.k8s.io versions to v1, and the v1 structure check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from app.state.convert import ConversionError, check_api_version, to_v1

Obj = dict[str, Any]

DRIVER = "gpu.example.com"
NODE1 = "node-1"


# --- tiny builders (v1 shape unless said otherwise) ------------------------------------------------------


def slice_(*devices: Obj, version: str = "v1", **spec: Any) -> Obj:
    body: Obj = {"driver": DRIVER, "pool": {"name": NODE1, "generation": 1, "resourceSliceCount": 1}}
    body["nodeName"] = NODE1
    body.update(spec)
    if devices:
        body["devices"] = list(devices)
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE1}-{DRIVER}"},
        "spec": body,
    }


def device(name: str = "gpu-0", **fields: Any) -> Obj:
    return {"name": name, **fields}


def claim(*requests: Obj, version: str = "v1", **devices: Any) -> Obj:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim-1", "namespace": "default"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def template(*requests: Obj, version: str = "v1") -> Obj:
    spec = claim(*requests, version=version)["spec"]
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "template-1", "namespace": "default"},
        "spec": {"metadata": {"labels": {"app": "x"}}, "spec": spec},
    }


def exact(name: str = "gpu", **fields: Any) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": DRIVER, **fields}}


def flat(name: str = "gpu", **fields: Any) -> Obj:
    return {"name": name, "deviceClassName": DRIVER, **fields}


def device_class(**spec: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}], **spec},
    }


def taint_rule(version: str = "v1", **selector: Any) -> Obj:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "broken-gpu"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": NODE1, "device": "gpu-0", **selector},
            "taint": {"key": f"{DRIVER}/health", "value": "Down", "effect": "NoExecute"},
        },
    }


def error_of(obj: Obj) -> str:
    with pytest.raises(ConversionError) as caught:
        to_v1(obj)
    return str(caught.value)


# --- versions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
@pytest.mark.parametrize(
    "build",
    [
        lambda v: slice_(device(attributes={"model": {"string": "A100"}}), version=v),
        lambda v: claim(exact(count=2), version=v),
        lambda v: template(exact(), version=v),
        lambda v: taint_rule(version=v),
        lambda v: {**device_class(), "apiVersion": f"resource.k8s.io/{v}"},
    ],
    ids=["slice", "claim", "template", "taint-rule", "class"],
)
def test_v1_and_v1beta2_only_change_the_api_version(version: str, build: Callable[[str], Obj]) -> None:
    original = build(version)
    converted = to_v1(original)
    assert converted == {**original, "apiVersion": "resource.k8s.io/v1"}


def test_classic_dra_v1alpha2_is_rejected_with_the_reason() -> None:
    message = error_of(claim(flat(), version="v1alpha2"))
    assert message.startswith("apiVersion: resource.k8s.io/v1alpha2 is classic DRA")
    assert "removed in Kubernetes 1.31" in message


@pytest.mark.parametrize(
    ("api_version", "problem"),
    [
        ("resource.k8s.io/v1alpha1", "unsupported version"),
        ("v1", "is not a resource.k8s.io API version"),
        (None, "is not a resource.k8s.io API version"),
    ],
)
def test_unknown_api_versions_are_rejected(api_version: object, problem: str) -> None:
    with pytest.raises(ConversionError, match=problem):
        check_api_version(api_version)


def test_device_taint_rule_never_existed_in_v1beta1() -> None:
    assert error_of(taint_rule(version="v1beta1")).startswith("kind: 'DeviceTaintRule' is not a")


def test_unknown_kind_is_rejected() -> None:
    obj = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourcePoolStatusRequest", "spec": {}}
    assert error_of(obj).startswith("kind: 'ResourcePoolStatusRequest'")


# --- ResourceSlice -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha3"])
def test_basic_wrapper_is_unwrapped(version: str) -> None:
    basic = {
        "attributes": {
            "model": {"string": "A100"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
        },
        "capacity": {"memory": {"value": "40Gi"}},
        "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}],
    }
    converted = to_v1(slice_(device("gpu-0", basic=basic), device("gpu-1"), version=version))
    assert converted["apiVersion"] == "resource.k8s.io/v1"
    assert converted["spec"]["devices"] == [{"name": "gpu-0", **basic}, {"name": "gpu-1"}]


def test_null_basic_is_an_empty_device() -> None:
    # kubernetes/enhancements KEP-5004 writes `- basic:` followed by `name:` (basic is null).
    converted = to_v1(slice_(device("gpu-0", basic=None), version="v1beta1"))
    assert converted["spec"]["devices"] == [{"name": "gpu-0"}]


def test_v1alpha3_bare_capacity_is_wrapped_in_value() -> None:
    dev = device(basic={"capacity": {"memory": "16Gi", "cores": {"value": 4}}})
    converted = to_v1(slice_(dev, version="v1alpha3"))
    assert converted["spec"]["devices"][0]["capacity"] == {"memory": {"value": "16Gi"}, "cores": {"value": 4}}


def test_v1beta1_bare_capacity_is_not_wrapped() -> None:
    # v1beta1 always had DeviceCapacity {value}; a bare quantity there is invalid input, not old syntax.
    message = error_of(slice_(device(basic={"capacity": {"memory": "16Gi"}}), version="v1beta1"))
    assert message.startswith("spec.devices[0].capacity[memory]: must be {value: <quantity>}")


def test_field_both_inside_and_outside_basic_is_rejected() -> None:
    dev = device(attributes={}, basic={"attributes": {"model": {"string": "x"}}})
    assert error_of(slice_(dev, version="v1beta1")) == (
        "spec.devices[0].basic.attributes: also set outside `basic` in spec.devices[0]"
    )


def test_node_selector_slice_converts_and_keeps_node_selection() -> None:
    selector = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "clique", "operator": "In", "values": ["a"]}]}]
    }
    original = slice_(device(basic={}), version="v1alpha3")
    del original["spec"]["nodeName"]
    original["spec"]["nodeSelector"] = selector
    assert to_v1(original)["spec"]["nodeSelector"] == selector


# --- ResourceClaim / ResourceClaimTemplate -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha3"])
def test_flat_requests_move_under_exactly(version: str) -> None:
    fields = {
        "selectors": [{"cel": {"expression": "device.attributes['gpu.example.com'].model == 'A100'"}}],
        "allocationMode": "ExactCount",
        "count": 2,
        "adminAccess": False,
        "tolerations": [{"key": "gpu.example.com/health", "operator": "Exists", "effect": "NoSchedule"}],
        "capacity": {"requests": {"memory": "10Gi"}},
    }
    constraints = [{"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    converted = to_v1(claim(flat("gpu", **fields), version=version, constraints=constraints))
    assert converted["spec"]["devices"] == {"requests": [exact("gpu", **fields)], "constraints": constraints}


def test_first_available_is_unchanged() -> None:
    subrequests = [
        {"name": "large", "deviceClassName": "big-gpu"},
        {"name": "small", "deviceClassName": "small-gpu", "count": 2},
    ]
    converted = to_v1(claim({"name": "gpu", "firstAvailable": subrequests}, version="v1beta1"))
    assert converted["spec"]["devices"]["requests"] == [{"name": "gpu", "firstAvailable": subrequests}]


def test_template_requests_move_under_exactly_and_template_metadata_is_kept() -> None:
    converted = to_v1(template(flat("gpu", count=1), version="v1beta1"))
    assert converted["spec"]["metadata"] == {"labels": {"app": "x"}}
    assert converted["spec"]["spec"]["devices"]["requests"] == [exact("gpu", count=1)]


def test_flat_fields_next_to_first_available_are_rejected() -> None:
    request = {"name": "gpu", "count": 1, "firstAvailable": [{"name": "a", "deviceClassName": DRIVER}]}
    assert error_of(claim(request, version="v1beta1")).startswith(
        "spec.devices.requests[0].firstAvailable: must not be combined with count"
    )


def test_exactly_in_a_v1beta1_request_is_rejected() -> None:
    message = error_of(claim(exact(), version="v1beta1"))
    assert message.startswith("spec.devices.requests[0].exactly: not a resource.k8s.io/v1beta1 field")


def test_error_path_names_the_field_after_conversion() -> None:
    assert error_of(claim(flat(count="2"), version="v1beta1")) == (
        "spec.devices.requests[0].exactly.count: must be an integer"
    )
    assert error_of(template(flat(count=0), version="v1beta1")) == (
        "spec.spec.devices.requests[0].exactly.count: must be greater than zero"
    )


# --- DeviceTaintRule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1alpha3", "v1beta2"])
def test_device_taint_rule_converts(version: str) -> None:
    original = taint_rule(version=version)
    assert to_v1(original) == {**original, "apiVersion": "resource.k8s.io/v1"}


def test_device_taint_rule_without_selector_converts() -> None:
    # kubernetes scheduler_perf devicetaintrule.yaml: `deviceSelector:` (null); kept as written.
    original = taint_rule(version="v1alpha3")
    original["spec"]["deviceSelector"] = None
    assert to_v1(original)["spec"]["deviceSelector"] is None


@pytest.mark.parametrize("field", ["deviceClassName", "selectors"])
def test_removed_device_taint_rule_selector_fields_are_rejected(field: str) -> None:
    message = error_of(taint_rule(version="v1alpha3", **{field: "x"}))
    assert message.startswith(f"spec.deviceSelector.{field}: removed in Kubernetes 1.35")


def test_device_taint_rule_selector_instead_of_device_selector_is_rejected() -> None:
    original = taint_rule(version="v1alpha3")
    original["spec"]["selector"] = original["spec"].pop("deviceSelector")
    assert error_of(original).startswith("spec.selector: unknown field")


# --- the input is never mutated ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "original",
    [
        slice_(
            device(basic={"capacity": {"memory": "16Gi"}, "attributes": {"a": {"int": 1}}}),
            version="v1alpha3",
        ),
        claim(flat(count=1, selectors=[{"cel": {"expression": "true"}}]), version="v1beta1"),
        template(flat(), version="v1alpha3"),
        taint_rule(version="v1beta2"),
    ],
    ids=["slice", "claim", "template", "taint-rule"],
)
def test_input_is_not_mutated_and_not_shared(original: Obj) -> None:
    snapshot = copy.deepcopy(original)
    converted = to_v1(original)
    assert original == snapshot
    converted["spec"].clear()
    assert original == snapshot


# --- v1 structure check -------------------------------------------------------------------------------------


def _without_node_name(obj: Obj) -> Obj:
    del obj["spec"]["nodeName"]
    return obj


def _with(obj: Obj, path: str, value: Any) -> Obj:
    target = obj
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return obj


INVALID_V1 = [
    pytest.param(
        slice_(device(basic={"attributes": {}})),
        "spec.devices[0].basic: the v1beta1 `basic` wrapper is not part of resource.k8s.io/v1",
        id="basic-under-v1",
    ),
    pytest.param(
        slice_(device(capacity={"cpu.example.com/cpu": "128"})),
        "spec.devices[0].capacity[cpu.example.com/cpu]: must be {value: <quantity>}, "
        "got the bare quantity '128'",
        id="bare-capacity-under-v1",
    ),
    pytest.param(
        slice_(device(capacity={"memory": {"value": "lots"}})),
        "spec.devices[0].capacity[memory].value: invalid quantity 'lots'",
        id="bad-quantity",
    ),
    pytest.param(
        slice_(device(attributes={"dra.example.com/supported-models": {"strings": ["a"]}})),
        "spec.devices[0].attributes[dra.example.com/supported-models]: "
        "'supported-models' is not a C identifier",
        id="attribute-name",
    ),
    pytest.param(
        slice_(device(attributes={"model": {"string": "a", "int": 1}})),
        "spec.devices[0].attributes[model]: exactly one value must be specified",
        id="attribute-two-values",
    ),
    pytest.param(
        slice_(device(attributes={"type": "gpu"})),
        "spec.devices[0].attributes[type]: must be an object, got str",
        id="attribute-bare-value",
    ),
    pytest.param(
        _without_node_name(slice_(device())),
        "spec: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
        id="no-node-selection",
    ),
    pytest.param(
        slice_(device(), allNodes=True),
        "spec: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, "
        "but `nodeName`, `allNodes` are set",
        id="two-node-selections",
    ),
    pytest.param(
        slice_(device(), allNodes=False),
        "spec.allNodes: must be either unset or set to true",
        id="all-nodes-false",
    ),
    pytest.param(
        _without_node_name(
            slice_(
                device(),
                nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "IN"}]}]},
            )
        ),
        "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: 'IN'",
        id="node-selector-operator",
    ),
    pytest.param(
        _without_node_name(slice_(device(), nodeSelector={"nodeSelectorTerms": [{}, {}]})),
        "spec.nodeSelector.nodeSelectorTerms: must have exactly one node selector term",
        id="node-selector-two-terms",
    ),
    pytest.param(
        slice_(device(nodeName=NODE1)),
        "spec.devices[0]: `nodeName`, `nodeSelector` and `allNodes` can only be set "
        "if `perDeviceNodeSelection`",
        id="device-node-without-per-device-selection",
    ),
    pytest.param(
        _with(_without_node_name(slice_(device())), "spec.perDeviceNodeSelection", True),
        "spec.devices[0]: exactly one of `nodeName`, `nodeSelector`, `allNodes` is required",
        id="per-device-selection-without-device-node",
    ),
    pytest.param(
        slice_(device(), device()),
        "spec.devices[1].name: Duplicate value: 'gpu-0'",
        id="duplicate-device",
    ),
    pytest.param(
        slice_(device("GPU_0")),
        "spec.devices[0].name: 'GPU_0' is not a DNS label",
        id="device-name",
    ),
    pytest.param(
        slice_(device(), sharedCounters=[{"name": "set", "counters": {"memory": {"value": "1Gi"}}}]),
        "spec: only one of `sharedCounters` or `devices` is allowed",
        id="devices-and-counters",
    ),
    pytest.param(
        slice_(sharedCounters=[{"name": "set", "counters": {"memorySlice0": {"value": "1Gi"}}}]),
        "spec.sharedCounters[0].counters[memorySlice0]: 'memorySlice0' is not a DNS label",
        id="counter-name",
    ),
    pytest.param(
        slice_(device(taints=[{"key": "k", "effect": "Evict"}])),
        "spec.devices[0].taints[0].effect: Unsupported value: 'Evict'",
        id="taint-effect",
    ),
    pytest.param(
        _with(slice_(device()), "spec.pool", {"name": NODE1}),
        "spec.pool.resourceSliceCount: must be greater than zero",
        id="no-slice-count",
    ),
    pytest.param(
        _with(slice_(device()), "spec.driver", None),
        "spec.driver: Required value",
        id="no-driver",
    ),
    pytest.param(
        claim(flat()),
        "spec.devices.requests[0].deviceClassName: flat (v1beta1) request field; in resource.k8s.io/v1",
        id="flat-request-under-v1",
    ),
    pytest.param(
        claim({"name": "gpu"}),
        "spec.devices.requests[0]: exactly one of `exactly`, `firstAvailable` is required",
        id="request-without-kind",
    ),
    pytest.param(
        claim(exact(selectors=[{"cel": None, "expression": "true"}])),
        "spec.devices.requests[0].exactly.selectors[0].expression: unknown field",
        id="selector-expression-beside-cel",
    ),
    pytest.param(
        claim(exact(selectors=[{"cel": {}}])),
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: Required value",
        id="selector-without-expression",
    ),
    pytest.param(
        claim(exact(allocationMode="All", count=1)),
        "spec.devices.requests[0].exactly.count: must not be specified when allocationMode is 'All'",
        id="count-with-all",
    ),
    pytest.param(
        claim(exact(allocationMode="Any")),
        "spec.devices.requests[0].exactly.allocationMode: Unsupported value: 'Any'",
        id="allocation-mode",
    ),
    pytest.param(
        claim(exact(), exact()),
        "spec.devices.requests[1].name: Duplicate value: 'gpu'",
        id="duplicate-request",
    ),
    pytest.param(
        claim(
            {"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": DRIVER, "adminAccess": True}]}
        ),
        "spec.devices.requests[0].firstAvailable[0].adminAccess: not allowed in a firstAvailable subrequest",
        id="admin-access-in-subrequest",
    ),
    pytest.param(
        claim({"name": "gpu", "firstAvailable": []}),
        "spec.devices.requests[0]: exactly one of `exactly`, `firstAvailable` is required",
        id="empty-first-available",
    ),
    pytest.param(
        claim(exact(), constraints=[{"requests": ["gpu"], "matchAttribute": ["dra.k8s.io/pcieRoot"]}]),
        "spec.devices.constraints[0].matchAttribute: must be a string, got list",
        id="match-attribute-list",
    ),
    pytest.param(
        claim(exact(), constraints=[{"matchAttribute": "pcieRoot"}]),
        "spec.devices.constraints[0].matchAttribute: 'pcieRoot' must include the domain",
        id="match-attribute-domain",
    ),
    pytest.param(
        claim(exact(), constraints=[{"matchAttribute": "a.b/x", "distinctAttribute": "a.b/y"}]),
        "spec.devices.constraints[0]: exactly one of `matchAttribute`, `distinctAttribute` is required",
        id="match-and-distinct",
    ),
    pytest.param(
        claim(exact(tolerations=[{"key": "k", "operator": "Matches"}])),
        "spec.devices.requests[0].exactly.tolerations[0].operator: Unsupported value: 'Matches'",
        id="toleration-operator",
    ),
    pytest.param(
        claim(exact(capacity={"requests": {"memory": "ten"}})),
        "spec.devices.requests[0].exactly.capacity.requests[memory]: invalid quantity 'ten'",
        id="capacity-request",
    ),
    pytest.param(
        claim(exact(), config=[{"requests": ["gpu"], "opaque": {"parameters": {}}}]),
        "spec.devices.config[0].opaque.driver: Required value",
        id="config-driver",
    ),
    pytest.param(
        _with(template(exact()), "spec.spec", None),
        "spec.spec: Required value",
        id="template-without-spec",
    ),
    pytest.param(
        device_class(selectors=[{"expression": "true"}]),
        "spec.selectors[0].expression: unknown field",
        id="class-selector",
    ),
    pytest.param(
        _with(taint_rule(), "spec.taint.effect", "Evict"),
        "spec.taint.effect: Unsupported value: 'Evict'",
        id="taint-rule-effect",
    ),
    pytest.param(
        _with(taint_rule(), "spec.deviceSelector", {"node": NODE1}),
        "spec.deviceSelector.node: unknown field",
        id="taint-rule-selector-field",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), INVALID_V1)
def test_v1_structure_errors_name_the_field(obj: Obj, expected: str) -> None:
    assert error_of(obj).startswith(expected)


VALID_V1 = [
    pytest.param(
        slice_(
            device(
                attributes={
                    "model": {"string": "A100"},
                    "resource.kubernetes.io/numaNode": {"ints": [0, 1]},
                    "a.b/c/d": {"int": 1},  # more than one '/' is not rejected upstream either
                },
                capacity={"memory": {"value": "40Gi", "requestPolicy": {"default": "1Gi"}}},
                taints=[{"key": "gpu.example.com/xid", "value": "79", "effect": "None"}],
            )
        ),
        id="slice",
    ),
    pytest.param(
        _with(
            _without_node_name(slice_(device(nodeName=NODE1), device("gpu-1", allNodes=True))),
            "spec.perDeviceNodeSelection",
            True,
        ),
        id="per-device-selection",
    ),
    pytest.param(
        slice_(sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory-slice-0": {"value": "5Gi"}}}]),
        id="counter-slice",
    ),
    pytest.param(
        claim(
            exact("gpu", allocationMode="All", adminAccess=True),
            {"name": "nic", "firstAvailable": [{"name": "fast", "deviceClassName": "nic", "count": 2}]},
            constraints=[
                {"requests": ["gpu", "nic/fast"], "distinctAttribute": "resource.kubernetes.io/numaNode"}
            ],
        ),
        id="claim",
    ),
    pytest.param({**device_class(), "spec": None}, id="class-without-spec"),
    pytest.param(claim(), id="claim-without-requests"),
]


@pytest.mark.parametrize("obj", VALID_V1)
def test_valid_v1_objects_pass_unchanged(obj: Obj) -> None:
    assert to_v1(obj) == obj


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_an_owned_object_is_copied_only_when_its_shape_changes(version: str) -> None:
    """The informers give up each parsed watch event (``owned``): an object in v1's shape (v1, v1beta2) is
    used as it is, one in an older shape is converted into a copy, so a conversion error leaves the event
    as it arrived."""
    request = flat("gpu", count=2) if version == "v1beta1" else exact(count=2)
    original = claim(request, version=version)
    before = copy.deepcopy(original)
    converted = to_v1(original, owned=True)
    assert converted == to_v1(before)
    assert (converted is original) == (version != "v1beta1")
    if version == "v1beta1":
        assert original == before
