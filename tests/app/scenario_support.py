"""Shared support for the fixture and feature scenarios (``test_fixture_scenarios.py``,
``test_feature_scenarios.py``): fixture paths and names, matchers, the state directory that runs
``dra-extender simulate`` with first-fit, and the placement assertions.

Fixture files are never copied into the repository; without ``../shared/fixtures`` the tests skip.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli.main import main
from app.cli.runtime import build_runtime
from app.cli.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
SKIP_REASON = f"../shared/fixtures not found at {FIXTURES} (a user's clone has no shared/ directory)"

# --- fixture paths (relative to FIXTURES) both files use -------------------------------------------------

NODES = "constructed/cluster-state/nodes.yaml"  # Node hgx-h100-node-01 and ip-192-168-153-160.ec2.internal
NV_CLASSES = "real/nvidia-gpu/deployments/helm/dra-driver-nvidia-gpu/rendered-deviceclasses-v1.yaml"
H100_SLICE = "constructed/nvidia-gpu/h100-8gpu.resourceslice.yaml"
H100_SHARES = "constructed/nvidia-gpu/h100-8gpu-consumable-shares4.resourceslice.yaml"
A100_DYNAMIC_MIG = "constructed/nvidia-gpu/a100-p4d-8gpu-dynamicmig.resourceslices.yaml"
EX_SLICES = "real/dra-example-driver/README.kubectl-get-resourceslice.yaml"  # kind: List, gpu-0..gpu-7
EX_CLASS = "real/dra-example-driver/deployments/helm/dra-example-driver/rendered-deviceclass-gpu-v1.yaml"
EX_DEMO = "real/dra-example-driver/demo/examples"
EX_PARTITIONS = "constructed/dra-example-driver/gpu-profile-2gpu-2partitions.resourceslices.yaml"
BINDING_SLICE = (
    "real/k8s-website/docs/concepts/scheduling-eviction/dynamic-resource-allocation/"
    "alpha-binding-conditions.resourceslice.yaml"
)

# --- node / driver names ----------------------------------------------------------------------------------

H100 = "hgx-h100-node-01"
P4D = "ip-192-168-153-160.ec2.internal"
EX = "dra-example-driver-cluster-worker"
EX_CP = "dra-example-driver-cluster-control-plane"
NV, EXD = "gpu.nvidia.com", "gpu.example.com"
FIRST_FIT = ("--device-selection", "first-fit")  # upstream's device order


# --- matchers and expected results ------------------------------------------------------------------------


class Like:
    """Equal to any string matching a regular expression (generated names, share UIDs)."""

    def __init__(self, pattern: str) -> None:
        self._re = re.compile(pattern)
        self.pattern = pattern

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(self._re.fullmatch(other))

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"<like {self.pattern}>"


UID = Like(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # shareIDs are fresh UIDs


def generated(pod: str, pod_claim: str) -> Like:
    """A template claim name: ``<pod>-<podClaimName>-`` plus 5 characters."""
    return Like(re.escape(f"{pod}-{pod_claim}-") + r"[a-z0-9]{5}")


def extended(pod: str) -> Like:
    """The extended-resource claim of ``pod``: ``<pod>-extended-resources-`` plus 5 characters."""
    return Like(re.escape(f"{pod}-extended-resources-") + r"[a-z0-9]{5}")


def dev(request: str, driver: str, pool: str, device: str, **extra: Any) -> dict[str, Any]:
    """One expected ``devices.results`` entry; ``extra`` holds adminAccess/tolerations/shareID/..."""
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def share(request: str, driver: str, pool: str, device: str, **consumed: str) -> dict[str, Any]:
    """One expected result on a multi-allocatable device: a fresh ``shareID`` and ``consumedCapacity``."""
    return dev(request, driver, pool, device, shareID=UID, consumedCapacity=consumed)


def gpu_partitions(request: str, gpu: int) -> list[dict[str, Any]]:
    """Both partitions of ``gpu-<gpu>`` of the example driver's 2x2 partition profile, in slice order."""
    return [dev(request, EXD, EX, f"gpu-{gpu}-partition-{p}") for p in (0, 1)]


def pinned(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }


# --- hand-written objects ---------------------------------------------------------------------------------


def node(
    name: str, labels: dict[str, str] | None = None, allocatable: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Ready Linux Node with the hostname label plus ``labels`` (and ``status.allocatable``)."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    if allocatable:
        obj["status"]["allocatable"] = allocatable
    return obj


def exactly(name: str, device_class: str, **fields: Any) -> dict[str, Any]:
    """A device request ``name`` of ``device_class``; ``fields`` go into ``exactly`` (count, selectors)."""
    return {"name": name, "exactly": {"deviceClassName": device_class, **fields}}


# --- state directory and simulate -------------------------------------------------------------------------


def load_fixture(rel: str) -> list[dict[str, Any]]:
    """The documents of a fixture file (to read expected opaque config parameters, never results)."""
    return [d for d in yaml.safe_load_all((FIXTURES / rel).read_text()) if d]


def _keyed(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{p['namespace']}/{p['name']}": p for p in pods}


class StateDir:
    """A state directory in tmp_path: fixture files (verbatim or edited copies) plus hand-written objects.

    ``pods_only``: ``simulate`` also checks that the output document holds nothing but ``pods``."""

    def __init__(self, path: Path, *, pods_only: bool = False) -> None:
        path.mkdir()
        self.path = path
        self.pods_only = pods_only
        self._count = 0

    def _next(self, label: str) -> Path:
        self._count += 1
        return self.path / f"{self._count:02d}-{label.replace('/', '__')}"

    def fixture(self, *relative: str) -> StateDir:
        for rel in relative:
            source = FIXTURES / rel
            assert source.is_file(), f"fixture missing: {source}"
            shutil.copyfile(source, self._next(rel))
        return self

    def edited(self, rel: str, edit: Any) -> StateDir:
        """A fixture file with ``edit(document)`` applied to each document (a driver option's effect)."""
        documents = load_fixture(rel)
        for document in documents:
            edit(document)
        self._next(rel).write_text(yaml.safe_dump_all(documents, sort_keys=False))
        return self

    def objects(self, label: str, *objects: dict[str, Any]) -> StateDir:
        self._next(f"{label}.yaml").write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
        return self

    def simulate(self, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict[str, Any]]:
        """``dra-extender simulate`` with first-fit; the pods keyed ``namespace/name`` in scheduling order."""
        code = main(["simulate", "--state", str(self.path), *FIRST_FIT, *args])
        out, err = capsys.readouterr()
        assert code == 0, f"simulate exited {code}: {err}"
        document = orjson.loads(out)
        if self.pods_only:
            assert list(document) == ["pods"]
        return _keyed(document["pods"])

    def simulate_state(self) -> tuple[dict[str, dict[str, Any]], Any]:
        """Simulate in process; also returns the cluster state afterwards (pod status, created claims)."""
        runtime = build_runtime(self.path)
        runtime.service.device_selection = "first-fit"
        return _keyed(simulate(runtime.service)["pods"]), runtime.state


def state_dir(tmp_path: Path, *, pods_only: bool = False) -> StateDir:
    """The ``state`` fixture of both files: skips without the shared fixtures."""
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)
    return StateDir(tmp_path / "state", pods_only=pods_only)


# --- assertions -------------------------------------------------------------------------------------------


def _normalize_config(config: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``requests`` cleared (null / absent / empty) all mean "every request" (§15)."""
    out = []
    for entry in config or []:
        entry = dict(entry)
        if not entry.get("requests"):
            entry.pop("requests", None)
        out.append(entry)
    return out


def assert_placed(
    pod_out: dict[str, Any],
    node_name: str,
    claims: list[tuple[Any, list[dict[str, Any]]]],
    *,
    failed_nodes: set[str] | None = None,
    config: list[list[dict[str, Any]]] | None = None,
    node_selectors: list[dict[str, Any] | None] | None = None,
    check_config: bool = True,
) -> None:
    """Pod bound to ``node_name``; per claim (name, expected results in order); allocations pinned to the
    node unless ``node_selectors`` gives the expected ``nodeSelector`` per claim (None = absent).
    With ``check_config`` the claim's config is compared with ``config`` (default: none per claim)."""
    assert pod_out["error"] is None, pod_out["error"]
    assert pod_out["node"] == node_name, pod_out["reasons"]
    assert [c["name"] for c in pod_out["claims"]] == [name for name, _ in claims]
    for i, (claim_out, (_, expected)) in enumerate(zip(pod_out["claims"], claims, strict=True)):
        allocation = claim_out["allocation"]
        assert allocation is not None, f"claim {claim_out['name']} not allocated"
        assert allocation["devices"]["results"] == expected
        want_selector = node_selectors[i] if node_selectors is not None else pinned(node_name)
        assert allocation.get("nodeSelector") == want_selector
        if check_config:
            want_config = config[i] if config is not None else []
            assert _normalize_config(allocation["devices"].get("config")) == want_config
    if failed_nodes is not None:
        assert set(pod_out["reasons"]) == failed_nodes


def assert_generated(
    pods: dict[str, dict[str, Any]],
    key: str,
    pod_claim: str,
    node_name: str,
    results: list[dict[str, Any]],
    **kw: Any,
) -> None:
    """Pod ``key`` (``namespace/name``) placed on ``node_name`` with one claim, generated from a template
    for its pod claim ``pod_claim`` (see ``generated``), holding ``results``; ``kw`` as ``assert_placed``."""
    assert_placed(pods[key], node_name, [(generated(key.partition("/")[2], pod_claim), results)], **kw)


def results_of(pod_out: dict[str, Any]) -> list[dict[str, Any]]:
    """The allocated ``devices.results`` of the pod's first claim."""
    return pod_out["claims"][0]["allocation"]["devices"]["results"]


def assert_unschedulable(pod_out: dict[str, Any], candidates: set[str], *, reasons_said: bool = True) -> None:
    """Not placed, no fatal error, every candidate node has a reason (``reasons_said``: a non-empty
    string), no claim allocated."""
    assert pod_out["node"] is None
    assert pod_out["error"] is None, pod_out["error"]
    assert set(pod_out["reasons"]) == candidates
    if reasons_said:
        assert all(isinstance(why, str) and why for why in pod_out["reasons"].values())
    assert all(c["allocation"] is None for c in pod_out["claims"])


def assert_fatal(pod_out: dict[str, Any], error_prefix: str) -> None:
    assert pod_out["node"] is None
    assert pod_out["error"] is not None and pod_out["error"].startswith(error_prefix), pod_out["error"]
    assert all(c["allocation"] is None for c in pod_out["claims"])


def assert_demo_partitions_pod0(pods: dict[str, dict[str, Any]], **kw: Any) -> None:
    """The partitionable-devices demo's pod0 (count 2) on the 2x2 partition profile: partition-0 and
    partition-1 of gpu-0, which use its 80Gi / 100 compute exactly."""
    assert_placed(
        pods["partitionable-devices/pod0"],
        EX,
        [(generated("pod0", "gpu-partitions"), gpu_partitions("gpu-partition", 0))],
        failed_nodes={EX_CP},
        **kw,
    )
