"""Every manifest under ../shared/fixtures/{real,constructed} loads with strict=True, or fails for its reason.

The expectation is written out below, file by file, from reading each file and its SOURCES.md entry:

* ``INVALID``: not valid ``resource.k8s.io/v1`` input. Helm/Go templates, KEP/doc excerpts that are not YAML
  (``...`` elisions) or not objects (fragments without ``kind``; the Helm ``values.yaml`` is treated the same
  way: "no kind → error"), classic DRA (``v1alpha2``), and objects that upstream validation rejects (most are
  SOURCES.md NOTE entries; some are findings of this review: see the comments). The value is a piece of the
  expected error message that names the reason.
* ``LOADS_DESPITE_NOTE``: SOURCES.md has a NOTE, but the problem only shows at allocation time (a CEL
  runtime error, a constraint that can never match) or concerns other files of the same excerpt group; the
  objects themselves are valid v1 input.
* ``SKIPPED_KINDS_ONLY``: files made only of kinds the loader does not use (OBSOLETE classic-DRA Jobs and
  driver CRDs): they load with warnings and contribute nothing.
* Everything else must load.

Files that are not manifests (LICENSE, generate_constructed.py, SOURCES.md) are not walked: only
``*.yaml|*.yml|*.json``. A user's clone has no ``../shared`` directory: the tests skip there.
"""

from __future__ import annotations

import re

import pytest

from app.state.claimgen import generate_template_claims
from app.state.podgroups import GROUP, POD_GROUP_VERSIONS
from app.state.statedir import KIND_FIELDS, ClusterObjects, StateLoadError, load_state
from tests.app.scenario_support import FIXTURES, SKIP_REASON

pytestmark = pytest.mark.fixtures


TEMPLATE = "Helm/Go template directive"
NOT_YAML = "not valid YAML"
ELISIONS = "the file contains `...` elisions"
NO_KIND = "kind: Required value"
CLASSIC_DRA = "apiVersion: resource.k8s.io/v1alpha2 is classic DRA"
NO_NODE_SELECTION = "spec: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
FLAT_REQUEST = "spec.devices.requests[0].deviceClassName: flat (v1beta1) request field"
MATCH_ATTRIBUTE_LIST = "spec.devices.constraints[0].matchAttribute: must be a string, got list"
NO_API_VERSION = "apiVersion: Required value"
NO_NAME = "metadata.name: Required value"
NO_POOL = "spec.pool: Required value"

_HELM = "real/nvidia-gpu/deployments/helm/dra-driver-nvidia-gpu/templates"
_PERF = "real/k8s-kubernetes/test/integration/scheduler_perf/dra/templates"
_KEP = "real/k8s-enhancements"
_E2E = "real/k8s-kubernetes/test/e2e/dra/test-driver/deploy/example"
_WEB = "real/k8s-website/docs/concepts/scheduling-eviction/dynamic-resource-allocation"

INVALID: dict[str, str] = {
    # --- Helm charts and Go text/templates: `{{ ... }}` is not plain YAML ---------------------------------
    "real/dra-example-driver/deployments/helm/dra-example-driver/templates/deviceclass.yaml": TEMPLATE,
    "real/dra-example-driver/deployments/helm/dra-example-driver/templates/resourcequota.yaml": TEMPLATE,
    "real/intel/charts/intel-gaudi-resource-driver/templates/device-class.yaml": TEMPLATE,
    "real/intel/charts/intel-gpu-resource-driver/templates/device-class.yaml": TEMPLATE,
    "real/intel/charts/intel-qat-resource-driver/templates/device-class.yaml": TEMPLATE,
    f"{_HELM}/deviceclass-compute-domain-daemon.yaml": TEMPLATE,
    f"{_HELM}/deviceclass-compute-domain-default-channel.yaml": TEMPLATE,
    f"{_HELM}/deviceclass-gpu.yaml": TEMPLATE,
    f"{_HELM}/deviceclass-mig.yaml": TEMPLATE,
    f"{_HELM}/deviceclass-vfio-gpu.yaml": TEMPLATE,
    "real/nvidia-gpu/templates/compute-domain-daemon-claim-template.tmpl.yaml": TEMPLATE,
    "real/nvidia-gpu/templates/compute-domain-workload-claim-template.tmpl.yaml": TEMPLATE,
    # scheduler_perf fills in {{.Index}} etc.; several of these would even parse as YAML, with
    # placeholder text in names and values, so the directive itself is the error.
    f"{_PERF}/deviceclass-extended-resource.yaml": TEMPLATE,
    f"{_PERF}/deviceclass-implicit-extended-resource-v1.yaml": TEMPLATE,
    f"{_PERF}/deviceclass-implicit-extended-resource.yaml": TEMPLATE,
    f"{_PERF}/node-with-dra-test-driver.yaml": TEMPLATE,
    f"{_PERF}/pod-with-extended-resource.yaml": TEMPLATE,
    f"{_PERF}/pod-with-implicit-extended-resource-mod25.yaml": TEMPLATE,
    f"{_PERF}/resourceclaim-partitionable-backtracking.yaml": TEMPLATE,
    f"{_PERF}/resourceclaim-with-selector.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-basic-devices.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-compatibilitygroups-devices.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-consumablecapacity-v1.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-consumablecapacity.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-consumablecapacity@374c3ef-v1.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-consumablecapacity@374c3ef.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-list-attributes-devices.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-partitionable-countersets.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-partitionable-devices.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-partitionable-v1.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-partitionable.yaml": TEMPLATE,
    f"{_PERF}/resourceslice-podgroup.yaml": TEMPLATE,
    # a PodGroup is read since workload-level claims (app.state.podgroups): its templated name is the error
    f"{_PERF}/podgroup-with-claim-template.yaml": TEMPLATE,
    # No template directive, but only `generateName`: not an object a state can hold (finding).
    f"{_PERF}/pod-with-claim-template.yaml": f"Pod default/?: {NO_NAME}",
    # --- KEP / doc excerpts that are not YAML (`...` elisions, markdown indentation, broken quotes) -------
    f"{_KEP}/kep-4381/README.block03.L458-L488.yaml": ELISIONS,
    f"{_KEP}/kep-4815/README.block02.L279-L292.yaml": NOT_YAML,
    f"{_KEP}/kep-4817/README.block01.L325-L341.yaml": ELISIONS,
    f"{_KEP}/kep-5075/README.block01.L606-L624.yaml": ELISIONS,
    f"{_KEP}/kep-5075/README.block02.L630-L640.yaml": ELISIONS,
    f"{_KEP}/kep-5075/README.block03.L646-L664.yaml": ELISIONS,
    f"{_KEP}/kep-5075/README.block04.L670-L689.yaml": ELISIONS,
    f"{_KEP}/kep-5491/README.block04.L1137-L1169.yaml": NOT_YAML,
    f"{_KEP}/kep-5517/README.block01.L524-L581.yaml": NOT_YAML,
    f"{_KEP}/kep-5517/README.block02.L593-L657.yaml": NOT_YAML,
    f"{_KEP}/kep-5517/README.block03.L668-L726.yaml": NOT_YAML,
    f"{_KEP}/kep-5517/README.block04.L734-L829.yaml": NOT_YAML,
    f"{_KEP}/kep-5517/README.block05.L838-L884.yaml": NOT_YAML,
    f"{_WEB}/alpha-consumable-capacity.resourceclaim-status-fragment.yaml": ELISIONS,
    # --- fragments without kind (status excerpts, KEP snippets, Helm values) ------------------------------
    "real/amd-rocm/docs/demo.claim-status-fragment.yaml": NO_KIND,
    "real/dra-example-driver/deployments/helm/dra-example-driver/values.yaml": NO_KIND,
    "real/dranet/site/content/docs/concepts/interface-status.claim-status.yaml": NO_KIND,
    f"{_KEP}/kep-4815/README.block05.L991-L1023.yaml": NO_KIND,
    f"{_KEP}/kep-4815/README.block06.L1028-L1149.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block06.L1325-L1346.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block07.L1367-L1384.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block08.L1403-L1429.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block09.L1458-L1483.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block10.L1504-L1537.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block11.L1567-L1595.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block13.L2035-L2050.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block14.L2765-L2776.yaml": NO_KIND,
    f"{_KEP}/kep-5517/README.block15.L2811-L2822.yaml": NO_KIND,
    f"{_KEP}/kep-6072/README.block01.L81-L83.fragment.yaml": NO_KIND,
    f"{_KEP}/kep-6072/README.block02.L221-L223.fragment.yaml": NO_KIND,
    # --- classic DRA (removed in 1.31) ---------------------------------------------------------------------
    "real/nvidia-gpu/demo/specs/mig+mps/sharing-demo-claims-1.yaml": CLASSIC_DRA,
    "real/nvidia-gpu/demo/specs/mig+mps/sharing-demo-claims.yaml": CLASSIC_DRA,
    "real/nvidia-gpu/demo/specs/selectors/claims.yaml": CLASSIC_DRA,
    "real/nvidia-gpu/demo/specs/selectors/pods.yaml": "spec.resourceClaims[0].source: the pre-1.31",
    # --- objects upstream validation rejects ---------------------------------------------------------------
    # trimmed dumps without driver/pool; quick-start also keeps the v1beta1 `basic:` wrapper under v1
    "real/amd-rocm/docs/demo.resourceslice-trimmed.yaml": "spec.driver: Required value",
    "real/dranet/site/content/docs/quick-start.resourceslice.yaml": "spec.devices[0].basic: the v1beta1",
    # KEP-5004 slice without pool (v1beta1 original and its v1 conversion) (finding)
    f"{_KEP}/kep-5004/README.block03.L156-L179.yaml": NO_POOL,
    f"{_KEP}/kep-5004/README.block03.L156-L179-v1.yaml": NO_POOL,
    # hand conversion that keeps the KEP's elided metadata/pool (its banner says so)
    f"{_KEP}/kep-4381/README.block03.L458-L488-v1.yaml": f"ResourceSlice ?: {NO_NAME}",
    # Pod without apiVersion: dra-example-driver upstream omission (finding); Intel lower-cased Pod fields
    "real/dra-example-driver/demo/examples/device-taints-tolerations/device-taint-pod-noschedule/"
    "4-pod-not-scheduled.yaml": f"Pod basic-resourceclaimtemplate/pod-no-schedule: {NO_API_VERSION}",
    "real/intel/deployments/gpu/examples/pod-inline-aligned-gpus.yaml": "(found 'apiversion'",
    # KEP-4815: counter slice without node selection (block03 is not flagged in SOURCES.md, but upstream
    # validation requires node selection on every slice, counter-only ones included: finding); TPU example
    f"{_KEP}/kep-4815/README.block03.L682-L754.yaml": f"ResourceSlice counter-slice: {NO_NODE_SELECTION}",
    f"{_KEP}/kep-4815/README.block04.L791-L923.yaml": NO_NODE_SELECTION,
    # KEP-4816: matchAttribute written as a list (v1beta2/v1beta1 originals and v1 conversions)
    f"{_KEP}/kep-4816/README.block02.L733-L763.yaml": MATCH_ATTRIBUTE_LIST,
    f"{_KEP}/kep-4816/README.block02.L733-L763-v1.yaml": MATCH_ATTRIBUTE_LIST,
    f"{_KEP}/kep-4816/README.block03.L794-L823.yaml": MATCH_ATTRIBUTE_LIST,
    f"{_KEP}/kep-4816/README.block03.L794-L823-v1.yaml": MATCH_ATTRIBUTE_LIST,
    # KEP-5491 excerpts without apiVersion / metadata (finding)
    f"{_KEP}/kep-5491/README.block01.L262-L274.yaml": f"ResourceSlice ?: {NO_API_VERSION}",
    f"{_KEP}/kep-5491/README.block03.L373-L395.yaml": f"ResourceClaim default/?: {NO_NAME}",
    f"{_KEP}/kep-5491/README.block05.L1183-L1215.yaml": f"ResourceClaim default/?: {NO_API_VERSION}",
    # KEP-5517: attribute and capacity written as bare values (finding; SOURCES: field names changed)
    f"{_KEP}/kep-5517/README.block12.L1963-L1983.yaml": "attributes[dra.example.com/type]: must be an object",
    # KEP-5963: counter slices without node selection, claims in the v1beta1 flat request shape under v1
    f"{_KEP}/kep-5963/README.block02.L316-L370.yaml": NO_NODE_SELECTION,
    f"{_KEP}/kep-5963/README.block03.L376-L402.yaml": FLAT_REQUEST,
    f"{_KEP}/kep-5963/README.block04.L419-L484.yaml": NO_NODE_SELECTION,
    f"{_KEP}/kep-5963/README.block05.L490-L516.yaml": FLAT_REQUEST,
    f"{_KEP}/kep-5963/README.block06.L535-L608.yaml": NO_NODE_SELECTION,
    f"{_KEP}/kep-5963/README.block07.L614-L640.yaml": FLAT_REQUEST,
    f"{_KEP}/kep-5963/README.block08.L661-L726.yaml": NO_NODE_SELECTION,
    # DeviceTaintRule with `selector:` instead of `deviceSelector:`
    f"{_E2E}/devicetaintpolicy.yaml": "spec.selector: unknown field",
    # kubernetes.io examples: `expression` beside `cel`, attribute name with '-', bare capacity quantity
    "real/k8s-website/content/en/examples/dra/resourceclaim.yaml": "selectors[0].expression: unknown field",
    f"{_WEB}/alpha-list-type-attributes.resourceslice.yaml": "'supported-models' is not a C identifier",
    f"{_WEB}/alpha-node-allocatable.cpu-resourceslice.yaml": "got the bare quantity '128'",
}

LOADS_DESPITE_NOTE: dict[str, str] = {
    "real/amd-rocm/example/example-partitions-same-parent.yaml": (
        "matchAttribute gpu.amd.com/deviceID cannot match partitions: a scheduling outcome, valid input"
    ),
    "real/intel/deployments/gpu/examples/pod-inline-gpu-dranet.yaml": (
        'CEL device.attributes["dra.net/rdma"].bool compiles; it fails at evaluation (allocator error)'
    ),
    f"{_KEP}/kep-5963/README.block01.L296-L303.yaml": "the NOTE is about the group's claims and slices",
    "real/dra-driver-cpu/deployment/helm/dra-driver-cpu/templates/deviceclass.yaml": (
        "SOURCES.md says Helm template, but the file is plain YAML without directives"
    ),
}

POD_GROUP_API_VERSIONS = tuple(f"{GROUP}/{v}" for v in POD_GROUP_VERSIONS)

SKIPPED_KINDS_ONLY: dict[str, list[str]] = {
    "real/nvidia-gpu/demo/specs/mig+mps/sharing-demo-job.yaml": ["Job"],
    "real/nvidia-gpu/demo/specs/mig+mps/sharing-demo-job-1.yaml": ["Job"],
    "real/nvidia-gpu/demo/specs/mig+mps/sharing-demo-parameters.yaml": [
        "GpuClaimParameters",
        "GpuClaimParameters",
        "MigDeviceClaimParameters",
        "MigDeviceClaimParameters",
    ],
    "real/nvidia-gpu/demo/specs/mig+mps/sharing-demo-parameters-1.yaml": ["MigDeviceClaimParameters"],
    "real/nvidia-gpu/demo/specs/selectors/parameters.yaml": ["GpuClaimParameters", "GpuClaimParameters"],
}

# SOURCES.md phrases that mark a file as not (plain, valid) v1 input.
SOURCES_MARKERS = (
    "NOTE",
    "OBSOLETE",
    "INVALID",
    "TRIMMED",
    "not parseable as plain YAML",
    "fragment(no kind)",
    "(not plain YAML)",
    "go/helm template placeholders",
)


def _manifests() -> list[str]:
    if not FIXTURES.is_dir():
        return []
    return sorted(
        str(path.relative_to(FIXTURES))
        for top in ("real", "constructed")
        for path in (FIXTURES / top).rglob("*")
        if path.is_file() and path.suffix in (".yaml", ".yml", ".json")
    )


MANIFESTS = _manifests()


@pytest.fixture(autouse=True)
def _need_fixtures() -> None:
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)


def dra_objects(objects: ClusterObjects) -> dict[tuple[str, str, str], dict]:
    return {
        (kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
        for kind in KIND_FIELDS
        for obj in objects.of_kind(kind)
        if kind not in ("Node", "Pod")
    }


# --- every file --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", MANIFESTS or [pytest.param("none", marks=pytest.mark.skip(SKIP_REASON))])
def test_fixture_loads_or_fails_for_its_reason(relative: str) -> None:
    path = FIXTURES / relative
    if relative in INVALID:
        with pytest.raises(StateLoadError) as caught:
            load_state(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: ")
        assert INVALID[relative] in message
        return
    objects = load_state(path)
    for obj in (o for kind in KIND_FIELDS for o in objects.of_kind(kind)):
        # PodGroups are kept as published (app.state.podgroups reads the fields every version shares).
        versions = ("v1", "resource.k8s.io/v1") if obj["kind"] != "PodGroup" else POD_GROUP_API_VERSIONS
        assert obj["apiVersion"] in versions
    if relative in SKIPPED_KINDS_ONLY:
        assert objects.count() == 0
        assert [warning.split(": ")[1].split(" ")[0] for warning in objects.warnings] == SKIPPED_KINDS_ONLY[
            relative
        ]


def test_expectation_lists_name_existing_files() -> None:
    listed = set(INVALID) | set(LOADS_DESPITE_NOTE) | set(SKIPPED_KINDS_ONLY)
    assert sorted(listed - set(MANIFESTS)) == []
    assert not set(INVALID) & (set(LOADS_DESPITE_NOTE) | set(SKIPPED_KINDS_ONLY))


def test_every_file_sources_marks_as_not_valid_is_classified() -> None:
    """Each SOURCES.md entry with a NOTE/OBSOLETE/template/fragment mark is in one of the explicit lists."""
    marked = []
    section = ""
    for line in (FIXTURES / "SOURCES.md").read_text().splitlines():
        heading = re.match(r"## `((?:real/[^`/]+)|constructed)/?`", line)
        if heading:
            section = heading.group(1)
            continue
        row = re.match(r"\| `([^`]+)` \| .*? \| (.*) \|$", line)
        if row and section and any(marker in row.group(2) for marker in SOURCES_MARKERS):
            marked.append(f"{section}/{row.group(1)}")
    assert len(marked) > 50  # the parser still understands SOURCES.md
    classified = set(INVALID) | set(LOADS_DESPITE_NOTE) | set(SKIPPED_KINDS_ONLY)
    # scheduler_perf files without `{{ }}` carry the group's "template" remark but are plain, valid YAML.
    plain_perf = {m for m in marked if m.startswith(_PERF) and "{{" not in (FIXTURES / m).read_text()}
    assert sorted(set(marked) - classified - plain_perf) == []


# --- converted content -------------------------------------------------------------------------------------


def _v1_pairs() -> list[tuple[str, str]]:
    pairs = []
    for converted in MANIFESTS:
        if converted.endswith("-v1.yaml"):
            original = converted.removesuffix("-v1.yaml") + ".yaml"
            if original in MANIFESTS:
                pairs.append((original, converted))
    return pairs


@pytest.mark.parametrize(
    ("original", "converted"), _v1_pairs() or [pytest.param("", "", marks=pytest.mark.skip(SKIP_REASON))]
)
def test_conversion_matches_the_v1_sibling(original: str, converted: str) -> None:
    """Older-version originals convert to exactly the DRA objects of their mechanical ``-v1.yaml`` copy."""
    if original in INVALID or converted in INVALID:
        # Conversion neither repairs nor breaks an object: both are rejected.
        assert original in INVALID and converted in INVALID
        return
    assert dra_objects(load_state(FIXTURES / original)) == dra_objects(load_state(FIXTURES / converted))


def test_enough_v1_pairs_are_compared() -> None:
    compared = [p for p in _v1_pairs() if p[0] not in INVALID]
    assert len(compared) >= 30


def test_v1alpha3_slice_devices_are_unwrapped() -> None:
    objects = load_state(FIXTURES / "real/nvidia-gpu/demo/clusters/kind/scripts/imex-resourceslice.yaml")
    first = objects.resource_slices[0]
    assert first["apiVersion"] == "resource.k8s.io/v1"
    assert first["spec"]["devices"][0] == {
        "name": "imex-channel-0",
        "attributes": {"type": {"string": "imex-channel"}, "channel": {"int": 0}},
    }
    assert "nodeSelector" in first["spec"]


def test_v1beta1_template_request_is_under_exactly() -> None:
    objects = load_state(FIXTURES / "real/nvidia-gpu/demo/specs/quickstart/v1beta1/gpu-test1.yaml")
    (template,) = objects.resource_claim_templates
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    ]
    assert names_of(objects.pods) == ["pod1", "pod2"]
    assert {p["metadata"]["namespace"] for p in objects.pods} == {"gpu-test1"}


def test_v1alpha3_device_taint_rule_becomes_v1() -> None:
    objects = load_state(FIXTURES / "constructed/intel/gaudi3-unhealthy.devicetaintrule.yaml")
    (rule,) = objects.device_taint_rules
    assert rule["apiVersion"] == "resource.k8s.io/v1"
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gaudi.intel.com",
        "pool": "gaudi3-node-01",
        "device": "0000-9b-00-0-0x1060",
    }


def test_kubectl_list_output_is_flattened() -> None:
    objects = load_state(FIXTURES / "real/dra-example-driver/README.kubectl-get-resourceslice.yaml")
    (slice_,) = objects.resource_slices
    assert len(slice_["spec"]["devices"]) == 8
    assert slice_["spec"]["devices"][0]["capacity"] == {"memory": {"value": "80Gi"}}


# --- whole directories and claim generation ----------------------------------------------------------------


def test_constructed_cluster_state_directory_loads_and_needs_no_new_claims() -> None:
    objects = load_state(FIXTURES / "constructed/cluster-state")
    assert (len(objects.nodes), len(objects.pods), len(objects.resource_claims)) == (2, 5, 5)
    assert objects.warnings == []
    # every pod already names its claim in status: the controller has nothing to do
    assert generate_template_claims(objects) == []
    assert len(objects.resource_claims) == 5


def test_claims_are_generated_for_a_real_demo() -> None:
    objects = load_state(FIXTURES / "real/nvidia-gpu/demo/specs/quickstart/v1/gpu-test1.yaml")
    notes = generate_template_claims(objects)
    assert len(notes) == 2 and len(objects.resource_claims) == 2
    for pod, claim in zip(objects.pods, objects.resource_claims, strict=True):
        (status,) = pod["status"]["resourceClaimStatuses"]
        assert status["resourceClaimName"] == claim["metadata"]["name"]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]


def test_template_in_another_namespace_is_not_used() -> None:
    # Upstream demo bug: the template is in gpu-test-vfio, the pod in gpu-test-vfiopci.
    objects = load_state(FIXTURES / "real/nvidia-gpu/demo/specs/quickstart/v1beta1/gpu-test-vfiopci.yaml")
    assert generate_template_claims(objects) == [
        "pod gpu-test-vfiopci/pod1: pod claim gpu: "
        "ResourceClaimTemplate gpu-test-vfiopci/single-gpu not found; no claim created"
    ]
    assert objects.resource_claims == []


def names_of(objects: list[dict]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objects]
