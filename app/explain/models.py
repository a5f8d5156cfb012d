"""The explanations' answers as response models: what ``/api/v1/...`` returns and ``explain -o json``
prints (documented in the OpenAPI at ``/docs``), and the two ways an explanation is refused.

Field names follow the API objects they describe (``request``, ``driver``, ``pool``, ``device``,
``shareID``, ``consumedCapacity``, ``bindingConditions``...). ``NotFound``: an unknown pod, claim or node
(HTTP 404); ``BadObject``: a what-if body that is not a ResourceClaim or ResourceClaimTemplate, or has an
unknown field (400, or 413).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BadObject",
    "ClaimView",
    "NodeDevices",
    "NodeVerdict",
    "NotFound",
    "PodExplanation",
    "WhatIfExplanation",
]


Verdict = Literal["fits", "does-not-fit", "unresolvable", "error"]


class NotFound(LookupError):
    """The pod, claim or node is not in the cluster state (HTTP 404)."""


class BadObject(ValueError):
    """A what-if body that cannot be explained (HTTP ``status``: 400, or 413 for too much YAML); the
    message names the problem."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def optional_text(value: object | None) -> str | None:
    """A model's text field: the value as text, None kept."""
    return None if value is None else str(value)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorAnswer(_Model):
    """Body of a 4xx answer."""

    Error: str


class RejectedDevice(_Model):
    """A device a stage removed: which rule, and why in words."""

    device: str = Field(description="driver/pool/device")
    rule: str = Field(description="e.g. class-selector, request-selector, taint, in-use, counters, capacity")
    message: str


class FunnelStage(_Model):
    stage: str = Field(
        description="in_pools, class_selectors, request_selectors, tolerations, not_in_use, "
        "counters_capacity or constraints"
    )
    title: str
    count: int = Field(description="devices left after this stage")
    rejected: int = Field(description="devices this stage removed")
    rules: dict[str, int] = Field(description="removed devices per rule")
    examples: list[RejectedDevice] = Field(description="a few of the removed devices, named")


class RequestExplanation(_Model):
    """The funnel of one request alternative (``req`` or ``req/sub`` of firstAvailable)."""

    claim: str
    request: str
    deviceClass: str
    allocationMode: str
    needed: int
    usable: int = Field(description="devices left after every stage (an upper bound: the search decides)")
    shortAt: str | None = Field(description="first stage leaving fewer devices than needed, or null")
    stages: list[FunnelStage]


class PickedDevice(_Model):
    request: str
    driver: str
    pool: str
    device: str
    numaNode: str | None = Field(description="resource.kubernetes.io/numaNode (null: unknown)")
    pcieRoot: list[str] = Field(description="resource.kubernetes.io/pcieRoot (empty: unknown)")


class ClaimAllocation(_Model):
    """The allocation a bind on this node would write to one claim."""

    claim: str
    devices: list[PickedDevice]
    allocation: dict[str, Any] = Field(description="status.allocation as it would be written")


class ScoreComponentModel(_Model):
    name: str = Field(description="numa, pcie, packing, intact or prioritized")
    value: float | None = Field(description="0..1; null when it does not apply to this pod")
    weight: float
    detail: str


class ScoreModel(_Model):
    """The prioritize score (kube-scheduler adds score * extender weight * 10) and its arithmetic."""

    score: int = Field(ge=0, le=10)
    unrounded: float = Field(
        description="the score before its rounding to 0..10, cut to the thousandth (7.9166 is 7.916): "
        "device scoring in filter (scheduling.deviceScoring) ranks nodes by it"
    )
    policy: str
    components: list[ScoreComponentModel]


class NodeVerdict(_Model):
    node: str
    verdict: Verdict
    reason: str = Field(
        description="why not (the filter reason); on a fitting node its failed last bind; or ''"
    )
    placement: str | None = Field(description="which device-selection attempt found the allocation")
    allocations: list[ClaimAllocation] = Field(description="for fitting nodes: the claims' new allocations")
    score: ScoreModel | None
    requests: list[RequestExplanation] = Field(description="funnels of the claims still to allocate")


class PodClaimSummary(_Model):
    podClaimName: str
    claim: str = Field(
        description="namespace/name of the ResourceClaim; '' while none is named (see problem)"
    )
    allocated: bool
    extendedResources: bool = False
    podGroup: str = Field(
        default="", description="the PodGroup whose claim this is (reserved once for the whole group), or ''"
    )
    problem: str = Field(
        default="",
        description="given when no node could resolve the pod's claims: why the pod cannot use this one, "
        "as filter reports it (the claim does not exist, no claim was made from the template yet, it is "
        "being deleted, it is not the pod's, the pod's PodGroup is missing, an extended-resource claim is "
        "left from an earlier attempt), or '' for a claim the pod can use",
    )


class LastBind(_Model):
    """The pod's last bind through this extender (kept for the most recently bound pods only)."""

    at: str = Field(description="RFC 3339 UTC")
    node: str
    error: str = Field(description="why it failed, or '' when it succeeded")


class PodExplanation(_Model):
    namespace: str
    name: str
    uid: str
    nodeName: str | None = Field(description="spec.nodeName when the pod is bound already")
    lastBind: LastBind | None = Field(description="the pod's last bind outcome, if one is kept")
    deviceSelection: str
    scoringPolicy: str
    claims: list[PodClaimSummary]
    error: str = Field(description="an error that fails the pod on every node (filter Error), or ''")
    nodes: list[NodeVerdict]


class WhatIfExplanation(_Model):
    kind: str
    namespace: str
    name: str
    deviceSelection: str
    scoringPolicy: str
    error: str
    nodes: list[NodeVerdict]


class ResultDevice(_Model):
    request: str
    driver: str
    pool: str
    device: str
    adminAccess: bool = False
    shareID: str | None = None
    consumedCapacity: dict[str, str] | None = None


class DeviceStatusModel(_Model):
    """``status.devices[]`` as the driver wrote it (DRAResourceClaimDeviceStatus)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    driver: str
    pool: str
    device: str
    shareID: str | None = None
    conditions: list[dict[str, Any]] = Field(default_factory=list)
    data: Any = None
    networkData: dict[str, Any] | None = None


class ClaimView(_Model):
    """A ResourceClaim as the extender sees it."""

    namespace: str
    name: str
    uid: str
    resourceVersion: str
    spec: dict[str, Any]
    allocated: bool
    results: list[ResultDevice]
    allocation: dict[str, Any] | None
    availableOn: list[str] = Field(description="known nodes the allocation's nodeSelector admits")
    reservedFor: list[dict[str, Any]]
    devices: list[DeviceStatusModel] = Field(description="status.devices")
    usedBy: list[str] = Field(description="pods (namespace/name) that reference the claim")
    holdsDevices: list[str] = Field(description="driver/pool/device the inventory records for this claim")


class TaintModel(_Model):
    key: str
    value: str
    effect: str
    source: str = Field(description="ResourceSlice <name> or DeviceTaintRule <name>")
    blocksAllocation: bool


class CapacityModel(_Model):
    value: str
    consumed: str | None = Field(None, description="shares' consumed capacity (multi-allocatable devices)")


class CounterConsumptionModel(_Model):
    counterSet: str
    counters: dict[str, str]


class DeviceInfo(_Model):
    driver: str
    pool: str
    device: str
    slice: str
    attributes: dict[str, Any]
    capacity: dict[str, CapacityModel]
    taints: list[TaintModel]
    allocatedTo: list[str] = Field(description="claims (or binds in flight) holding the device")
    inUse: bool
    allowMultipleAllocations: bool
    consumesCounters: list[CounterConsumptionModel]
    numaNode: str | None
    pcieRoot: list[str]
    derivedAttributeErrors: list[str] = Field(
        default_factory=list,
        description="cluster-wide derived attributes whose expression failed here (absent on the device)",
    )


class CounterModel(_Model):
    value: str
    left: str


class CounterSetModel(_Model):
    name: str
    counters: dict[str, CounterModel]


class PoolInfo(_Model):
    driver: str
    pool: str
    generation: int
    slices: list[str]
    usable: bool
    incomplete: bool
    invalid: str
    counterSets: list[CounterSetModel] = Field(description="shared counters: pool value and what is left")


class ClassUsageModel(_Model):
    deviceClass: str
    total: int
    inUse: int
    free: int
    tainted: int
    groups: int = Field(description="aligned groups (NUMA nodes, else PCIe roots) holding the class")
    wholeFreeGroups: int
    largestFreeGroup: int


class NodeDevices(_Model):
    node: str
    labels: dict[str, str]
    pools: list[PoolInfo]
    devices: list[DeviceInfo]
    usage: list[ClassUsageModel] = Field(description="per DeviceClass: utilisation and fragmentation")
