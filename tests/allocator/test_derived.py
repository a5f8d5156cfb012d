"""Derived attributes: per-request (KEP-6080) and cluster-wide (extender config), with hand-worked results.

Search order reminder (allocator-semantics §5): devices in slice order, slot k+1 resumes after slot k's
device, backtracking on constraint failure; the first complete assignment wins.
"""

from __future__ import annotations

import pytest

from allocator.cel import Version
from allocator.derived import ClusterAttribute, ClusterDerivation
from allocator.errors import CELCompileError, CELEvalError, FeatureDisabledError, InvalidInputError
from allocator.features import FeatureGates
from allocator.model import parse_device_class, parse_resource_slice
from tests.allocator.builders import World, claim, device, device_class, picked, request, slice_

GPU = "gpu.nvidia.com"
NIC = "dra.net"
GPU_CLASS = "gpu"
NIC_CLASS = "nic"
CLASSES = [
    device_class(GPU_CLASS, f'device.driver == "{GPU}"'),
    device_class(NIC_CLASS, f'device.driver == "{NIC}"'),
]
NUMA = f'device.attributes["{GPU}"].numa'
NIC_NUMA = f'device.attributes["{NIC}"].numaNode'


def gpus(*numas: int, **extra: list) -> dict:
    """GPUs gpu-0.. with a ``numa`` attribute each (plus per-device extra attributes by keyword)."""
    devices = []
    for i, numa in enumerate(numas):
        attrs = {"numa": numa, **{k: v[i] for k, v in extra.items()}}
        devices.append(device(f"gpu-{i}", **attrs))
    return slice_("gpus", GPU, "node-1", devices)


def gpus_first_without_numa() -> dict:
    """gpu-0 without a ``numa`` attribute, then gpu-1 and gpu-2 on NUMA 1."""
    return slice_("gpus", GPU, "node-1", [device("gpu-0"), device("gpu-1", numa=1), device("gpu-2", numa=1)])


def nics(*numa_nodes: int) -> dict:
    return slice_("nics", NIC, "node-1", [device(f"nic-{i}", numaNode=n) for i, n in enumerate(numa_nodes)])


def derived(name: str, expression: str) -> dict:
    return {"name": name, "expression": expression}


ZONES = [derived("zone", f'device.attributes["{GPU}"].zones.split(",")')]
"""A list-valued derived attribute: the GPU's comma-separated ``zones``."""


def stored(world: World, name: str):
    """The slice ``name`` as the inventory stores it (with cluster-wide derived attributes)."""
    return next(s for s in world.inventory.slices() if s.name == name)


def gpu_nic_claim(**gpu_fields):
    return claim(
        "c",
        request("gpu", GPU_CLASS, count=2, derivedAttributes=[derived("numa", NUMA)], **gpu_fields),
        request("nic", NIC_CLASS, derivedAttributes=[derived("numa", NIC_NUMA)]),
        constraints=[{"requests": ["gpu", "nic"], "matchAttribute": "numa"}],
    )


# --- the KEP example: GPU + NIC on one NUMA node through different attribute names -------------------


def test_kep_example_gpu_and_nic_share_a_numa_node_through_different_attribute_names():
    # gpu-0 (numa 0) fixes numa=0; gpu-1/gpu-2 (1) fail, gpu-3 (0) fits; no NIC has numaNode 0, so the
    # search backtracks: gpu-1 (1), gpu-2 (1), nic-0 (numaNode 1).
    world = World(slices=[gpus(0, 1, 1, 0), nics(1, 1)], classes=CLASSES)
    assert picked(world.allocate(gpu_nic_claim())) == [[("gpu", "gpu-1"), ("gpu", "gpu-2"), ("nic", "nic-0")]]


def test_kep_example_first_numa_node_when_a_nic_is_there():
    # nic-1 sits on NUMA 0, so the first try (gpu-0, gpu-3) completes with nic-1.
    world = World(slices=[gpus(0, 1, 1, 0), nics(1, 0)], classes=CLASSES)
    assert picked(world.allocate(gpu_nic_claim())) == [[("gpu", "gpu-0"), ("gpu", "gpu-3"), ("nic", "nic-1")]]


def test_without_derived_attributes_the_bare_name_matches_nothing():
    world = World(slices=[gpus(0, 1, 1, 0), nics(1, 0)], classes=CLASSES)
    plain = claim(
        "c",
        request("gpu", GPU_CLASS, count=2),
        request("nic", NIC_CLASS),
        constraints=[{"requests": ["gpu", "nic"], "matchAttribute": "numa"}],
    )
    assert world.allocate(plain) is None


def test_no_fit_when_no_nic_shares_a_numa_node_with_two_gpus():
    # NUMA 0 has gpu-0 only, NUMA 1 has gpu-1 only: two GPUs never share a node.
    world = World(slices=[gpus(0, 1), nics(0, 1)], classes=CLASSES)
    assert world.allocate(gpu_nic_claim()) is None


def test_a_request_without_the_derived_attribute_falls_back_to_the_static_one():
    # The NIC request defines nothing: its devices need a static attribute "numa" (bare: none has it).
    world = World(slices=[gpus(0, 1), nics(0, 1)], classes=CLASSES)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, derivedAttributes=[derived("numa", NUMA)]),
        request("nic", NIC_CLASS),
        constraints=[{"requests": ["gpu", "nic"], "matchAttribute": "numa"}],
    )
    assert world.allocate(c) is None


# --- shadowing and visibility ---------------------------------------------------------------------------


def test_qualified_name_shadows_the_static_attribute_in_constraints():
    # Static numa 0,1,2,3 are all different; the derived gpu.nvidia.com/numa = numa / 2 gives 0,0,1,1.
    world = World(slices=[gpus(0, 1, 2, 3)], classes=CLASSES)
    constraint = [{"matchAttribute": f"{GPU}/numa"}]
    assert world.allocate(claim("a", request("gpu", GPU_CLASS, count=2), constraints=constraint)) is None
    shadowed = claim(
        "b",
        request("gpu", GPU_CLASS, count=2, derivedAttributes=[derived(f"{GPU}/numa", f"{NUMA} / 2")]),
        constraints=constraint,
    )
    assert picked(world.allocate(shadowed)) == [[("gpu", "gpu-0"), ("gpu", "gpu-1")]]


def test_selectors_see_the_static_value_not_the_derived_one():
    # The selector admits static numa >= 2 (gpu-2, gpu-3); derived numa/2 is 1 for both.
    world = World(slices=[gpus(0, 1, 2, 3)], classes=CLASSES)
    c = claim(
        "c",
        request(
            "gpu",
            GPU_CLASS,
            count=2,
            selectors=[{"cel": {"expression": f"{NUMA} >= 2"}}],
            derivedAttributes=[derived(f"{GPU}/numa", f"{NUMA} / 2")],
        ),
        constraints=[{"matchAttribute": f"{GPU}/numa"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-2"), ("gpu", "gpu-3")]]


def test_derived_attributes_are_per_request_alternative_in_first_available():
    # Subrequest "pcie" derives numa from the NIC; the GPU derives it from its own attribute.
    world = World(slices=[gpus(1), nics(0, 1)], classes=CLASSES)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, derivedAttributes=[derived("numa", NUMA)]),
        {
            "name": "nic",
            "firstAvailable": [
                {
                    "name": "rdma",
                    "deviceClassName": NIC_CLASS,
                    "derivedAttributes": [derived("numa", NIC_NUMA)],
                }
            ],
        },
        constraints=[{"matchAttribute": "numa"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-0"), ("nic/rdma", "nic-1")]]


def test_distinct_attribute_uses_derived_values():
    # Two one-GPU requests on different derived "half" (numa // 2): gpu-0 (0), then gpu-1 (0) fails,
    # gpu-2 (1) fits.
    world = World(slices=[gpus(0, 1, 2, 3)], classes=CLASSES)
    half = [derived("half", f"{NUMA} / 2")]
    c = claim(
        "c",
        request("a", GPU_CLASS, derivedAttributes=half),
        request("b", GPU_CLASS, derivedAttributes=half),
        constraints=[{"distinctAttribute": "half"}],
    )
    assert picked(world.allocate(c)) == [[("a", "gpu-0"), ("b", "gpu-2")]]


# --- list results (KEP-5491 set semantics) ----------------------------------------------------------------


LISTS = FeatureGates(DRAListTypeAttributes=True)
"""Set semantics (KEP-5491) in constraints, for derived values as for static ones."""


def test_list_results_need_a_common_element_across_all_devices():
    # zones: gpu-0 {a,b}, gpu-1 {b,c}, gpu-2 {a,c}, gpu-3 {b}. Slot 3 tries gpu-2: {a,b}&{b,c}&{a,c} is
    # empty (each pair alone intersects), so gpu-3 is taken: common {b}.
    world = World(slices=[gpus(0, 0, 0, 0, zones=["a,b", "b,c", "a,c", "b"])], classes=CLASSES, gates=LISTS)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, count=3, derivedAttributes=ZONES),
        constraints=[{"matchAttribute": "zone"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-0"), ("gpu", "gpu-1"), ("gpu", "gpu-3")]]


def test_a_scalar_result_is_a_one_element_list():
    # The NIC derives the scalar "c": gpu-0 {a,b} fails, gpu-1 {b,c} matches.
    world = World(slices=[gpus(0, 0, zones=["a,b", "b,c"]), nics(0)], classes=CLASSES, gates=LISTS)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, derivedAttributes=ZONES),
        request("nic", NIC_CLASS, derivedAttributes=[derived("zone", '"c"')]),
        constraints=[{"matchAttribute": "zone"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-1"), ("nic", "nic-0")]]


def test_derived_lists_compare_as_static_ones_with_the_list_attributes_gate_off():
    # Upstream's scalar comparison: a list matches nothing, derived or not (tests/oracle/test_regressions).
    gates = FeatureGates(DRAListTypeAttributes=False)
    world = World(slices=[gpus(0, 0, zones=["a,b", "b,c"])], classes=CLASSES, gates=gates)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, count=2, derivedAttributes=ZONES),
        constraints=[{"matchAttribute": "zone"}],
    )
    assert world.allocate(c) is None


def test_semver_results_compare_by_canonical_version():
    # semver("v1", true) and semver("1.0.0") are the same version.
    world = World(slices=[gpus(0, 1)], classes=CLASSES)
    c = claim(
        "c",
        request("a", GPU_CLASS, derivedAttributes=[derived("v", 'semver("v1", true)')]),
        request("b", GPU_CLASS, derivedAttributes=[derived("v", 'semver("1.0.0")')]),
        constraints=[{"matchAttribute": "v"}],
    )
    assert picked(world.allocate(c)) == [[("a", "gpu-0"), ("b", "gpu-1")]]
    assert world.selectors.value('semver("v1", true)', stored(world, "gpus").devices[0]) == Version("1.0.0")


# --- errors -----------------------------------------------------------------------------------------------


def test_runtime_error_on_a_candidate_aborts_the_pod():
    # gpu-0 has no "numa": the derived expression fails there, even though gpu-1 and gpu-2 would fit.
    world = World(slices=[gpus_first_without_numa()], classes=CLASSES)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, count=2, derivedAttributes=[derived("numa", NUMA)]),
        constraints=[{"matchAttribute": "numa"}],
    )
    with pytest.raises(CELEvalError) as error:
        world.allocate(c)
    assert str(error.value) == (
        f"claim default/c, request gpu: derived attribute numa on device {GPU}/node-1/gpu-0: CEL runtime "
        f"error: no such key: numa (expression '{NUMA}')"
    )


def test_devices_the_selectors_reject_are_not_evaluated():
    world = World(slices=[gpus_first_without_numa()], classes=CLASSES)
    c = claim(
        "c",
        request(
            "gpu",
            GPU_CLASS,
            count=2,
            selectors=[{"cel": {"expression": f"has({NUMA.rpartition('.')[0]}.numa)"}}],
            derivedAttributes=[derived("numa", NUMA)],
        ),
        constraints=[{"matchAttribute": "numa"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-1"), ("gpu", "gpu-2")]]


def test_a_result_of_another_type_is_a_runtime_error():
    world = World(slices=[gpus(0)], classes=CLASSES)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, derivedAttributes=[derived("x", f"dyn(double({NUMA}))")]),
        constraints=[{"matchAttribute": "x"}],
    )
    with pytest.raises(CELEvalError, match="result of type double is not a valid attribute value"):
        world.allocate(c)


def test_a_derived_attribute_is_evaluated_only_for_devices_that_reach_the_constraint_check():
    # gpu-0 has no numa, so "numa" fails on it, but its taint is not tolerated: upstream rejects it at the
    # taint check, before the constraint looks the attribute up. gpu-1 is chosen, and no error.
    tainted = device("gpu-0") | {"taints": [{"key": "broken", "effect": "NoSchedule"}]}
    world = World(slices=[slice_("gpus", GPU, "node-1", [tainted, device("gpu-1", numa=1)])], classes=CLASSES)
    c = claim(
        "c",
        request("gpu", GPU_CLASS, derivedAttributes=[derived("numa", NUMA)]),
        constraints=[{"matchAttribute": "numa"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-1")]]


def test_compile_error_names_claim_request_attribute_and_position():
    world = World(slices=[gpus(0)], classes=CLASSES)
    c = claim(
        "c", request("gpu", GPU_CLASS, derivedAttributes=[derived("n", 'device.name.replace("gpu", "")')])
    )
    with pytest.raises(CELCompileError) as error:
        world.allocate(c)
    text = str(error.value)
    assert text.startswith(
        'claim default/c, request gpu: derived attribute n: expression \'device.name.replace("gpu", "")\': '
        "CEL compile error: "
    )
    assert "<input>:1:7" in text and "device.name is not part of the DRA selector environment" in text


def test_compile_error_for_a_result_type_that_is_no_attribute():
    world = World(slices=[gpus(0)], classes=CLASSES)
    c = claim("c", request("gpu", GPU_CLASS, derivedAttributes=[derived("n", 'device.attributes["x"]')]))
    with pytest.raises(CELCompileError, match=r"must evaluate to string, int, bool, semver.*not map"):
        world.allocate(c)


def test_compile_errors_are_reported_even_without_candidates():
    world = World(slices=[], classes=CLASSES)
    c = claim("c", request("gpu", GPU_CLASS, derivedAttributes=[derived("n", "1 +")]))
    with pytest.raises(CELCompileError, match="derived attribute n"):
        world.allocate(c)


def test_gate_off_rejects_the_field():
    world = World(slices=[gpus(0)], classes=CLASSES, gates=FeatureGates(DRADerivedAttributes=False))
    with pytest.raises(FeatureDisabledError) as error:
        world.allocate(gpu_nic_claim())
    assert str(error.value) == (
        "claim default/c, request gpu: has derivedAttributes, but the DRADerivedAttributes feature is "
        "disabled"
    )


def test_parse_limits_and_names():
    # +k8s:maxItems=32 (k8s.io/api resource/v1/types.go); the parser once refused more than 8.
    thirty_two = [derived(f"example.com/a{i}", "1") for i in range(32)]
    assert (
        len(
            claim("c", request("gpu", derivedAttributes=thirty_two))
            .requests[0]
            .alternatives[0]
            .derived_attributes
        )
        == 32
    )
    thirty_three = [derived(f"a{i}", "1") for i in range(33)]
    with pytest.raises(InvalidInputError, match=r"derivedAttributes: must have at most 32 entries, got 33"):
        claim("c", request("gpu", derivedAttributes=thirty_three))
    with pytest.raises(InvalidInputError, match=r"derivedAttributes\[1\]\.name: duplicate"):
        claim("c", request("gpu", derivedAttributes=[derived("a", "1"), derived("a", "2")]))
    with pytest.raises(InvalidInputError, match=r"derivedAttributes\[0\]\.name: 'not-an-id' must be a C id"):
        claim("c", request("gpu", derivedAttributes=[derived("not-an-id", "1")]))
    with pytest.raises(InvalidInputError, match=r"derivedAttributes\[0\]\.expression: required"):
        claim("c", request("gpu", derivedAttributes=[{"name": "a"}]))
    parsed = claim("c", request("gpu", derivedAttributes=[derived("example.com/a", "1")]))
    assert parsed.requests[0].alternatives[0].derived_attributes[0].name == "example.com/a"


def test_values_are_cached_per_expression_and_device():
    world = World(slices=[gpus(0, 1, 1, 0), nics(1, 1)], classes=CLASSES)
    world.allocate(gpu_nic_claim())
    first = dict(world.selectors.stats)
    world.allocate(gpu_nic_claim())
    assert world.selectors.stats["evaluations"] == first["evaluations"]  # the second call only hits
    assert world.selectors.stats["hits"] > first["hits"]


# --- cluster-wide derived attributes (ClusterDerivation + Inventory) ---------------------------------------


CLUSTER_NUMA = [
    ClusterAttribute("example.com/numa", NUMA, driver=GPU, source="t: derivedAttributes[0]"),
    ClusterAttribute("example.com/numa", NIC_NUMA, driver=NIC, source="t: derivedAttributes[1]"),
]


def with_cluster_attributes(world: World, attributes: list[ClusterAttribute]) -> World:
    world.inventory.set_cluster_attributes(ClusterDerivation(attributes, world.selectors))
    return world


def test_cluster_attribute_is_one_name_across_drivers_for_constraints():
    # Same hand-worked search as the KEP example, with a static-looking attribute from the config.
    world = with_cluster_attributes(
        World(slices=[gpus(0, 1, 1, 0), nics(1, 1)], classes=CLASSES), CLUSTER_NUMA
    )
    c = claim(
        "c",
        request("gpu", GPU_CLASS, count=2),
        request("nic", NIC_CLASS),
        constraints=[{"matchAttribute": "example.com/numa"}],
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-1"), ("gpu", "gpu-2"), ("nic", "nic-0")]]


def test_cluster_attribute_is_visible_to_class_and_request_selectors():
    classes = [*CLASSES, device_class("numa1", 'device.attributes["example.com"].numa == 1')]
    world = with_cluster_attributes(
        World(slices=[gpus(0, 1, 1, 0), nics(1, 0)], classes=classes), CLUSTER_NUMA
    )
    # Class numa1 admits gpu-1, gpu-2 and nic-0, in pool order (dra.net before gpu.nvidia.com).
    assert picked(world.allocate(claim("c", request("any", "numa1", count=3)))) == [
        [("any", "nic-0"), ("any", "gpu-1"), ("any", "gpu-2")]
    ]
    selected = claim(
        "d",
        request(
            "gpu",
            GPU_CLASS,
            selectors=[{"cel": {"expression": 'device.attributes["example.com"].numa == 0'}}],
        ),
    )
    assert picked(world.allocate(selected)) == [[("gpu", "gpu-0")]]


def test_changing_cluster_attributes_rederives_devices():
    world = with_cluster_attributes(World(slices=[gpus(0, 1, 2, 3)], classes=CLASSES), [])
    c = claim("c", request("gpu", GPU_CLASS, count=2), constraints=[{"matchAttribute": "example.com/half"}])
    assert world.allocate(c) is None  # nobody has example.com/half
    with_cluster_attributes(world, [ClusterAttribute("example.com/half", f"{NUMA} / 2")])
    assert picked(world.allocate(c)) == [[("gpu", "gpu-0"), ("gpu", "gpu-1")]]
    # numa % 2: gpu-0 (0) and gpu-2 (0).
    with_cluster_attributes(world, [ClusterAttribute("example.com/half", f"{NUMA} % 2")])
    assert picked(world.allocate(c)) == [[("gpu", "gpu-0"), ("gpu", "gpu-2")]]
    # Removing the config removes the attribute again.
    world.inventory.set_cluster_attributes(None)
    assert world.allocate(c) is None


def test_a_cluster_attribute_runtime_error_leaves_the_attribute_absent_and_is_summarised_once():
    slices = [
        slice_("gpus", GPU, "node-1", [device("gpu-0"), device("gpu-1", numa=1), device("gpu-2")]),
        nics(0),
    ]
    world = with_cluster_attributes(World(slices=slices, classes=CLASSES), CLUSTER_NUMA)
    problem = "CEL runtime error: no such key: numa (expression '" + NUMA + "')"
    label = "derived attribute example.com/numa (t: derivedAttributes[0])"
    assert world.inventory.derivation_errors() == [
        f"device {GPU}/node-1/gpu-0: {label}: {problem}",
        f"device {GPU}/node-1/gpu-2: {label}: {problem}",
    ]
    assert world.inventory.derivation_summary() == [
        f"{label}: failed on 2 devices, e.g. device {GPU}/node-1/gpu-0: {problem}"
    ]
    # Not fatal for anyone: a plain GPU request takes gpu-0 (the attribute does not matter to it) ...
    assert picked(world.allocate(claim("g", request("gpu", GPU_CLASS)))) == [[("gpu", "gpu-0")]]
    # ... and one that needs the attribute finds it only on gpu-1.
    has_one = '"numa" in device.attributes["example.com"] && device.attributes["example.com"].numa == 1'
    pinned = claim("p", request("gpu", GPU_CLASS, selectors=[{"cel": {"expression": has_one}}]))
    assert picked(world.allocate(pinned)) == [[("gpu", "gpu-1")]]
    # Fixing the devices (a new slice revision) clears the errors.
    world.inventory.upsert_slice(
        parse_resource_slice(
            slice_(
                "gpus",
                GPU,
                "node-1",
                [device("gpu-0", numa=0), device("gpu-1", numa=1), device("gpu-2", numa=0)],
            )
        )
    )
    assert world.inventory.derivation_errors() == []
    assert world.inventory.derivation_summary() == []


def test_first_entry_in_scope_decides_a_name_defined_twice():
    # Unscoped fallback after a GPU-scoped entry: GPUs get numa * 10, NICs get -1.
    attributes = [
        ClusterAttribute("example.com/tag", f"{NUMA} * 10", driver=GPU),
        ClusterAttribute("example.com/tag", "-1"),
    ]
    world = with_cluster_attributes(World(slices=[gpus(2), nics(0)], classes=CLASSES), attributes)
    values = {d.name: d.attribute("example.com/tag") for s in world.inventory.slices() for d in s.devices}
    assert values == {"gpu-0": 20, "nic-0": -1}


def test_device_class_scope_and_class_changes():
    # Scope: class "big" (numa >= 1). gpu-1 is in it, gpu-0 is not; changing the class re-derives.
    classes = [*CLASSES, device_class("big", f"{NUMA} >= 1")]
    world = with_cluster_attributes(
        World(slices=[gpus(0, 1)], classes=classes),
        [ClusterAttribute("example.com/big", "true", device_class="big")],
    )

    def tagged():
        return sorted(
            d.name for s in world.inventory.slices() for d in s.devices if d.attribute("example.com/big")
        )

    assert tagged() == ["gpu-1"]
    world.inventory.upsert_class(parse_device_class(device_class("big", f"{NUMA} >= 0")))
    assert tagged() == ["gpu-0", "gpu-1"]
    world.inventory.delete_class("big")
    assert tagged() == []


def test_cluster_attribute_compile_error_names_the_source():
    world = World(slices=[], classes=CLASSES)
    with pytest.raises(CELCompileError) as error:
        ClusterDerivation(
            [ClusterAttribute("example.com/x", "1 +", source="f.yaml: derivedAttributes[3]")], world.selectors
        )
    assert str(error.value).startswith(
        "derived attribute example.com/x (f.yaml: derivedAttributes[3]): expression '1 +': "
        "CEL compile error: "
    )


def test_devices_out_of_scope_keep_their_identity():
    world = World(slices=[], classes=CLASSES)
    published = {s["metadata"]["name"]: parse_resource_slice(s) for s in (gpus(0), nics(0))}
    for slice_object in published.values():
        world.inventory.upsert_slice(slice_object)
    with_cluster_attributes(world, [ClusterAttribute("example.com/g", "1", driver=GPU)])
    assert stored(world, "nics").devices[0] is published["nics"].devices[0]  # untouched: caches stay valid
    gpu = stored(world, "gpus").devices[0]
    assert gpu is not published["gpus"].devices[0]
    assert gpu.cel.attributes["example.com"] == {"g": 1}
    assert gpu.attribute("example.com/g") == 1 and gpu.attribute(f"{GPU}/numa") == 0


def test_unchanged_devices_keep_their_derived_form_across_slice_updates():
    world = with_cluster_attributes(
        World(slices=[gpus(0, 1)], classes=CLASSES), [ClusterAttribute("example.com/half", f"{NUMA} / 2")]
    )
    before = stored(world, "gpus").devices

    def lookups() -> int:  # evaluations and value-cache hits alike: any look at a device
        stats = world.selectors.stats
        return stats["uncached"] + stats["evaluations"] + stats["hits"]

    looked = lookups()
    # gpu-0 is published unchanged (parsing reuses it), gpu-1 changes.
    world.inventory.upsert_slice(parse_resource_slice(gpus(0, 3), world.inventory.slice("gpus")))
    after = stored(world, "gpus").devices
    assert after[0] is before[0] and after[1] is not before[1]
    assert [d.attribute("example.com/half") for d in after] == [0, 1]
    # Only gpu-1 is evaluated again: its derived attribute and the two class selectors of the index.
    assert lookups() == looked + 3


def test_expressions_longer_than_10_ki_do_not_compile():
    world = World(slices=[gpus(0)], classes=CLASSES)
    long = "1" + " + 1" * 2600  # 10,401 bytes
    c = claim("c", request("gpu", GPU_CLASS, derivedAttributes=[derived("n", long)]))
    with pytest.raises(CELCompileError) as error:
        world.allocate(c)
    text = str(error.value)
    assert text.startswith("claim default/c, request gpu: derived attribute n: expression '1 + 1 + 1")
    assert "...': CEL compile error: expression is 10401 bytes long, more than the limit of 10240" in text
