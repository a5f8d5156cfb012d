"""Explanations: why a pod fits where it fits, what a claim holds, what a node offers (REST, read-only).

Routes (included by ``app.http.api.create_app``; documented in its OpenAPI at ``/docs``)::

    GET  /api/v1/namespaces/{ns}/pods/{name}/explain[?node=N]   → PodExplanation
    GET  /api/v1/namespaces/{ns}/resourceclaims/{name}          → ClaimView
    GET  /api/v1/nodes/{name}/devices                           → NodeDevices
    POST /api/v1/explain[?node=N]   ResourceClaim | ResourceClaimTemplate (JSON or YAML) → WhatIfExplanation

Per node an explanation gives the verdict filter would give (``fits``, ``does-not-fit``,
``unresolvable``, ``error``) with its reason, per claim and request alternative the device funnel of
``allocator.explain`` (in pools → class selectors → request selectors → taints → not in use → counters /
capacity → constraints, with named rejected devices and the rule), and for nodes that fit the allocation
the device-selection policy would choose and its score broken down (``allocator.scoring``).

Nothing is created or kept: the functions below read the cluster state under the service lock (taken
per node, within filter's time budget, one pod or what-if explanation at a time: a second one gets 429)
and never write it, never keep per-(pod, node) results, never reserve devices. The same functions feed
the CLI (``app.cli.explain``). Errors: ``NotFound`` (HTTP 404) for an unknown pod, claim or node;
``BadObject`` (HTTP 400) for a what-if body that is not a ResourceClaim or ResourceClaimTemplate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from allocator.alignment import select
from allocator.cel import Version
from allocator.diagnose import diagnose
from allocator.errors import AllocatorError, NodeLocalError
from allocator.explain import (
    RequestFunnel,
    claim_funnels,
    class_usage,
    counters_left,
    node_devices,
    taint_source,
)
from allocator.model import Claim, parse_claim
from allocator.nodeselector import Node, parse_node_selector
from allocator.quantity import format_like
from allocator.scoring import ScoreBreakdown, score_allocation
from app.http.bodies import BodyBudget, BodyRejected, read_body
from app.scheduling.extended import ExtendedClaim
from app.scheduling.service import SchedulingService
from app.state.convert import ConversionError, to_v1
from app.state.podclaims import ClaimNotReady, PodClaim, claim_names, state_pod_claims
from app.state.statedir import load_yaml_document

__all__ = [
    "BadObject",
    "ClaimView",
    "NodeDevices",
    "NodeVerdict",
    "NotFound",
    "PodExplanation",
    "WhatIfExplanation",
    "claim_view",
    "explain_object",
    "explain_pod",
    "explain_router",
    "known_nodes",
    "node_devices_view",
    "parse_object",
]

Verdict = Literal["fits", "does-not-fit", "unresolvable", "error"]
_T = TypeVar("_T")


class NotFound(LookupError):
    """The pod, claim or node is not in the cluster state (HTTP 404)."""


class BadObject(ValueError):
    """A what-if body that cannot be explained (HTTP ``status``: 400, or 413 for too much YAML); the
    message names the problem."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


MAX_YAML_BYTES = 256 << 10
"""A what-if body that is YAML is parsed only up to this size (256 KiB; a ResourceClaim has at most 32
requests, a few KB). The state loader's YAML rules build a document at
about 0.4 MB/s here (a 6.9 MB claim of 60,000 requests: 16 s on this 2-core machine), so the body cap
alone (8 MiB) would let one request hold a worker thread for many seconds. JSON bodies (orjson, hundreds
of MB/s) get the whole body cap."""


# --- response models --------------------------------------------------------------------------------------


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
    claim: str = Field(description="namespace/name of the ResourceClaim")
    allocated: bool
    extendedResources: bool = False
    podGroup: str = Field(
        "", description="the PodGroup whose claim this is (reserved once for the whole group), or ''"
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


# --- helpers ----------------------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if isinstance(value, Version):
        return value.text
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def _text(value: object | None) -> str | None:
    return None if value is None else str(value)


def _funnel_model(funnel: RequestFunnel) -> RequestExplanation:
    return RequestExplanation(
        claim=funnel.claim,
        request=funnel.request,
        deviceClass=funnel.device_class,
        allocationMode=funnel.mode,
        needed=funnel.needed,
        usable=funnel.usable,
        shortAt=funnel.short or None,
        stages=[
            FunnelStage(
                stage=s.name,
                title=s.title,
                count=s.count,
                rejected=s.rejected,
                rules=dict(s.rules),
                examples=[
                    RejectedDevice(device=r.device, rule=r.rule, message=r.message) for r in s.examples
                ],
            )
            for s in funnel.stages
        ],
    )


def _score_model(breakdown: ScoreBreakdown) -> ScoreModel:
    return ScoreModel(
        score=breakdown.score,
        policy=breakdown.policy,
        components=[
            ScoreComponentModel(name=c.name, value=c.value, weight=c.weight, detail=c.detail)
            for c in breakdown.components
        ],
    )


def _allocations(
    service: SchedulingService, node: Node, claims: Sequence[Claim], results: Sequence[Mapping[str, Any]]
) -> list[ClaimAllocation]:
    topology = service.scoring.topology
    index = {nd.device.id: nd.device for nd in node_devices(service.state.inventory, node)}
    allocations = []
    for claim, allocation in zip(claims, results, strict=False):
        picked = []
        for entry in allocation["devices"]["results"]:
            device = index.get((entry["driver"], entry["pool"], entry["device"]))
            picked.append(
                PickedDevice(
                    request=entry["request"],
                    driver=entry["driver"],
                    pool=entry["pool"],
                    device=entry["device"],
                    numaNode=_text(topology.numa(device)) if device else None,
                    pcieRoot=sorted(map(str, topology.roots(device))) if device else [],
                )
            )
        allocations.append(ClaimAllocation(claim=claim.key, devices=picked, allocation=dict(allocation)))
    return allocations


def _node_verdict(
    service: SchedulingService,
    node: Node,
    pending: Sequence[Claim],
    blocked: str,
    kind: Verdict = "unresolvable",
) -> NodeVerdict:
    """Decide ``node`` as filter would, without keeping anything, and explain it. ``blocked``: why the
    node fails before any search, with verdict ``kind``."""
    inventory, selectors = service.state.inventory, service.selectors
    funnels = [
        _funnel_model(f) for claim in pending for f in claim_funnels(inventory, selectors, node, claim)
    ]

    def verdict(kind: Verdict, reason: str) -> NodeVerdict:
        return NodeVerdict(
            node=node.name,
            verdict=kind,
            reason=reason,
            placement=None,
            allocations=[],
            score=None,
            requests=funnels,
        )

    if blocked:
        return verdict(kind, blocked)
    if not pending:
        return verdict("fits", "")  # no funnels either
    try:
        selection = select(
            inventory, selectors, node, pending, service.device_selection, service.scoring.topology
        )
    except NodeLocalError as e:
        return verdict("unresolvable", str(e))
    except AllocatorError as e:
        return verdict("error", str(e))
    if selection.results is None:
        no_fit = diagnose(inventory, selectors, node, pending)
        return verdict("unresolvable" if no_fit.unresolvable else "does-not-fit", no_fit.reason)
    breakdown = score_allocation(inventory, selectors, node, pending, selection.results, service.scoring)
    return NodeVerdict(
        node=node.name,
        verdict="fits",
        reason="",
        placement=selection.placement,
        allocations=_allocations(service, node, pending, selection.results),
        score=_score_model(breakdown),
        requests=funnels,
    )


def known_nodes(service: SchedulingService) -> list[Node]:
    """The nodes of the state the inventory knows, sorted by name (call under the service lock)."""
    return [
        n for name in sorted(service.state.objects["Node"]) if (n := service.state.node(name)) is not None
    ]


def _nodes(service: SchedulingService, only: str | None) -> list[Node]:
    if only is None:
        return known_nodes(service)
    node = service.state.node(only)
    if node is None:
        raise NotFound(f"node {only} not found")
    return [node]


# --- explain a pod ----------------------------------------------------------------------------------------


def _each_node(
    service: SchedulingService, nodes: Sequence[Node], explain: Callable[[Node], NodeVerdict]
) -> list[NodeVerdict]:
    """``explain(node)`` for each node, within filter's time budget (later nodes are reported as not
    explained). Each node is explained under the service lock, which is released in between: a filter or
    bind waits for one node's explanation at most, never for a whole one."""
    deadline = time.monotonic() + service.filter_time_budget
    verdicts = []
    for target in nodes:
        if time.monotonic() > deadline:
            late = "not explained: the time budget ran out; ask for this node alone with ?node="
            verdicts.append(_node_verdict(service, target, [], late + target.name))
            continue
        with service.lock:
            verdicts.append(explain(target))
        time.sleep(0)  # let a thread waiting for the lock take it before the next node
    return verdicts


class _PodError(Exception):
    """The pod cannot be explained on any node (an invalid claim): the explanation's ``error``."""


def explain_pod(
    service: SchedulingService, namespace: str, name: str, node: str | None = None
) -> PodExplanation:
    """Explain every node (or ``node``) for pod ``namespace/name``. Raises NotFound."""
    with service.lock:
        pod = service.state.get("Pod", f"{namespace}/{name}")
        if pod is None:
            raise NotFound(f"pod {namespace}/{name} not found")
        nodes = _nodes(service, node)
    meta = pod.get("metadata") or {}
    summaries: list[PodClaimSummary] = []

    def explain(target: Node) -> NodeVerdict:
        try:
            effective = service.effective_claims(pod, target.name)
        except ClaimNotReady as e:
            return _node_verdict(service, target, [], str(e))
        except AllocatorError as e:
            raise _PodError(str(e)) from e
        if not summaries:
            summaries.extend(
                _claim_summaries(pod, service, effective.allocated, effective.pending, effective.extended)
            )
        elsewhere, written = service.claims_written_for_others(pod, target.name)
        if elsewhere:
            return _node_verdict(service, target, [], elsewhere, kind="does-not-fit")
        pending = [claim for claim in effective.pending if claim.key not in written]
        blocked = service._allocated_claims_reason(effective.allocated, target, pod)
        return _node_verdict(service, target, pending, blocked)

    try:
        verdicts, error = _each_node(service, nodes, explain), ""
    except _PodError as e:
        verdicts, error = [], str(e)
    error = next((v.reason for v in verdicts if v.verdict == "error"), error)
    uid = str(meta.get("uid") or "")
    with service.lock:
        last = service.bind_log.last(f"{namespace}/{name}", uid)
    if last is not None and last.error:
        # The node fits now, yet kube-scheduler's bind there failed: say so where the verdict is read.
        failed = f"the last bind here failed at {last.at}: {last.error}"
        verdicts = [
            v.model_copy(update={"reason": failed}) if v.node == last.node and v.verdict == "fits" else v
            for v in verdicts
        ]
    return PodExplanation(
        namespace=namespace,
        name=name,
        uid=uid,
        nodeName=(pod.get("spec") or {}).get("nodeName") or None,
        lastBind=None if last is None else LastBind(at=last.at, node=last.node, error=last.error),
        deviceSelection=service.device_selection,
        scoringPolicy=service.scoring.policy,
        claims=summaries,
        error=error,
        nodes=verdicts,
    )


def _claim_summaries(
    pod: Mapping[str, Any],
    service: SchedulingService,
    allocated: Sequence[PodClaim],
    pending: Sequence[Claim],
    extended: ExtendedClaim | None,
) -> list[PodClaimSummary]:
    try:
        resolved = {pc.key: pc for pc in state_pod_claims(service.state, pod)}
    except ClaimNotReady:
        resolved = {}
    summaries = [
        PodClaimSummary(
            podClaimName=pc.pod_claim_name, claim=pc.key, allocated=True, podGroup=_group_name(pc)
        )
        for pc in allocated
    ]
    extended_key = extended.key if extended is not None else None
    for claim in pending:
        pc = resolved.get(claim.key)
        summaries.append(
            PodClaimSummary(
                podClaimName=pc.pod_claim_name if pc is not None else "",
                claim=claim.key,
                allocated=False,
                extendedResources=claim.key == extended_key,
                podGroup=_group_name(pc) if pc is not None else "",
            )
        )
    return summaries


def _group_name(pc: PodClaim) -> str:
    return str((pc.consumer or {}).get("name") or "")


# --- what-if ----------------------------------------------------------------------------------------------


def parse_object(body: bytes | str) -> dict[str, Any]:
    """A JSON or YAML document: one ResourceClaim or ResourceClaimTemplate. Raises BadObject (status 413
    for YAML beyond ``MAX_YAML_BYTES``)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        if len(body) > MAX_YAML_BYTES:
            raise BadObject(
                f"a YAML body may have at most {MAX_YAML_BYTES} bytes (JSON: the body cap)", status=413
            ) from None
        try:
            obj = load_yaml_document(body, "body")
        except ValueError as e:
            raise BadObject(f"body is neither JSON nor YAML: {e}") from None
    if not isinstance(obj, dict):
        raise BadObject("body must be one ResourceClaim or ResourceClaimTemplate object")
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, dict):
        raise BadObject("spec: must be an object")
    kind = obj.get("kind") or ("ResourceClaimTemplate" if "spec" in (spec or {}) else "ResourceClaim")
    if kind not in ("ResourceClaim", "ResourceClaimTemplate"):
        raise BadObject(f"kind {kind}: expected ResourceClaim or ResourceClaimTemplate")
    meta = obj.get("metadata")
    if meta is not None and (
        not isinstance(meta, dict)
        or any(k in meta and not isinstance(meta[k], str) for k in ("name", "namespace", "uid"))
    ):
        raise BadObject("metadata: must be an object whose name, namespace and uid are strings")
    obj = {**obj, "kind": kind}
    if obj.get("apiVersion", "resource.k8s.io/v1") != "resource.k8s.io/v1":
        try:
            obj = to_v1(obj)  # older resource.k8s.io versions, as the state loader accepts them
        except ConversionError as e:
            raise BadObject(str(e)) from None
    return obj


def _what_if_claim(obj: Mapping[str, Any]) -> Claim:
    """The allocator view of a ResourceClaim, or of the claim a ResourceClaimTemplate would make."""
    meta = dict(obj.get("metadata") or {})
    meta.setdefault("name", "what-if")
    meta["namespace"] = meta.get("namespace") or "default"
    spec = obj.get("spec")
    if obj["kind"] == "ResourceClaimTemplate":
        spec = (spec or {}).get("spec")
    return parse_claim({"metadata": meta, "spec": spec})


def _what_if(service: SchedulingService, body: bytes, node: str | None) -> WhatIfExplanation:
    """Parse a what-if body and explain it. Raises BadObject, NotFound."""
    return explain_object(service, parse_object(body), node)


def explain_object(
    service: SchedulingService, obj: Mapping[str, Any], node: str | None = None
) -> WhatIfExplanation:
    """What-if: where the claim (or the template's claim) would fit now. Nothing is created.

    Raises NotFound for an unknown ``node``; an invalid claim is reported in ``error``."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name") or "what-if"
    with service.lock:
        nodes = _nodes(service, node)
        error, verdicts = "", []
        try:
            claim = _what_if_claim(obj)
            # Also the state loader's checks the allocator's parser leaves out (fully qualified names).
            to_v1({"apiVersion": "resource.k8s.io/v1", **obj})
            service._check_admin_access(claim)
        except AllocatorError as e:
            error = str(e)
        except ConversionError as e:
            error = f"{obj['kind']} {namespace}/{name}: {e}"
    if not error:
        verdicts = _each_node(service, nodes, lambda target: _node_verdict(service, target, [claim], ""))
        error = next((v.reason for v in verdicts if v.verdict == "error"), "")
    return WhatIfExplanation(
        kind=str(obj["kind"]),
        namespace=namespace,
        name=name,
        deviceSelection=service.device_selection,
        scoringPolicy=service.scoring.policy,
        error=error,
        nodes=verdicts,
    )


# --- a claim ----------------------------------------------------------------------------------------------


def _result_device(entry: Mapping[str, Any]) -> ResultDevice:
    return ResultDevice(
        request=str(entry.get("request") or ""),
        driver=str(entry.get("driver") or ""),
        pool=str(entry.get("pool") or ""),
        device=str(entry.get("device") or ""),
        adminAccess=entry.get("adminAccess") is True,
        shareID=entry.get("shareID"),
        consumedCapacity=entry.get("consumedCapacity"),
    )


def claim_view(service: SchedulingService, namespace: str, name: str) -> ClaimView:
    """The claim ``namespace/name`` with its allocation, status.devices, holders. Raises NotFound."""
    key = f"{namespace}/{name}"
    with service.lock:
        obj = service.state.get("ResourceClaim", key)
        if obj is None:
            raise NotFound(f"resourceclaim {key} not found")
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        allocation = status.get("allocation") or None
        available: list[str] = []
        if allocation:
            selector = allocation.get("nodeSelector")
            parsed = parse_node_selector(selector, f"ResourceClaim {key}: nodeSelector") if selector else None
            available = [n.name for n in known_nodes(service) if parsed is None or parsed.matches(n)]
        results = ((allocation or {}).get("devices") or {}).get("results") or []
        holds = sorted(
            "/".join(d)
            for d in {(r.get("driver"), r.get("pool"), r.get("device")) for r in results}
            if key in service.state.inventory.holders(d)  # type: ignore[arg-type]
        )
        return ClaimView(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            resourceVersion=str(meta.get("resourceVersion") or ""),
            spec=dict(obj.get("spec") or {}),
            allocated=bool(allocation),
            results=[_result_device(r) for r in results],
            allocation=dict(allocation) if allocation else None,
            availableOn=available,
            reservedFor=list(status.get("reservedFor") or []),
            devices=[DeviceStatusModel.model_validate(d) for d in status.get("devices") or []],
            usedBy=_pods_using(service, namespace, name),
            holdsDevices=holds,
        )


def _pods_using(service: SchedulingService, namespace: str, name: str) -> list[str]:
    return [
        key
        for key, pod in sorted(service.state.objects["Pod"].items())
        if ((pod.get("metadata") or {}).get("namespace") or "default") == namespace
        and name in claim_names(pod)
    ]


# --- a node's devices -------------------------------------------------------------------------------------


def node_devices_view(service: SchedulingService, name: str) -> NodeDevices:
    """Every device visible from node ``name``: attributes, capacity, taints and their source, holders,
    counters left per pool, and per-class utilisation. Raises NotFound."""
    with service.lock:
        node = service.state.node(name)
        if node is None:
            raise NotFound(f"node {name} not found")
        inventory, topology = service.state.inventory, service.scoring.topology
        pools = []
        for pool in inventory.pools_for(node):
            left = counters_left(inventory, pool)
            pools.append(
                PoolInfo(
                    driver=pool.driver,
                    pool=pool.pool,
                    generation=pool.generation,
                    slices=[s.name for s in pool.slices],
                    usable=pool.usable,
                    incomplete=pool.incomplete,
                    invalid=pool.invalid,
                    counterSets=[
                        CounterSetModel(
                            name=set_name,
                            counters={
                                c: CounterModel(value=q.text, left=format_like(left[set_name][c], q))
                                for c, q in sorted(counters.items())
                            },
                        )
                        for set_name, counters in sorted(pool.counter_sets.items())
                    ],
                )
            )
        devices = []
        members = []
        for nd in node_devices(inventory, node):
            device = nd.device
            members.append(device)
            consumed = inventory.consumed_capacity(device.id)
            devices.append(
                DeviceInfo(
                    driver=device.driver,
                    pool=device.pool,
                    device=device.name,
                    slice=nd.slice.name,
                    attributes={k: _json_value(v) for k, v in sorted(device.attributes.items())},
                    capacity={
                        k: CapacityModel(
                            value=c.value.text,
                            consumed=format_like(consumed[k], c.value) if k in consumed else None,
                        )
                        for k, c in sorted(device.capacity.items())
                    },
                    taints=[
                        TaintModel(
                            key=t.key,
                            value=t.value,
                            effect=t.effect,
                            source=taint_source(t, nd.slice.name),
                            blocksAllocation=t.blocks_allocation,
                        )
                        for t in inventory.taints(device)
                    ],
                    allocatedTo=inventory.holders(device.id),
                    inUse=inventory.is_allocated(device.id),
                    allowMultipleAllocations=device.allow_multiple_allocations,
                    derivedAttributeErrors=inventory.derivation_errors_of(device),
                    consumesCounters=[
                        CounterConsumptionModel(
                            counterSet=c.counter_set,
                            counters={k: q.text for k, q in sorted(c.counters.items())},
                        )
                        for c in device.consumes_counters
                    ],
                    numaNode=_text(topology.numa(device)),
                    pcieRoot=sorted(map(str, topology.roots(device))),
                )
            )
        usage = class_usage(inventory, service.selectors, node, topology.groups(members))
        return NodeDevices(
            node=name,
            labels=dict(node.labels),
            pools=pools,
            devices=devices,
            usage=[
                ClassUsageModel(
                    deviceClass=u.device_class,
                    total=u.total,
                    inUse=u.in_use,
                    free=u.free,
                    tainted=u.tainted,
                    groups=u.groups_total,
                    wholeFreeGroups=u.groups_free,
                    largestFreeGroup=u.largest_free_group,
                )
                for u in usage
            ],
        )


# --- HTTP -------------------------------------------------------------------------------------------------


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"Error": message})


def _or_404(view: Callable[..., _T], *args: Any) -> _T | JSONResponse:
    """``view(*args)``, or the 404 answer when it raises NotFound."""
    try:
        return view(*args)
    except NotFound as e:
        return _error(404, str(e))


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorAnswer, "description": "Unknown object"}}

_WHAT_IF_BODY = {
    "requestBody": {
        "required": True,
        "description": "One ResourceClaim or ResourceClaimTemplate (resource.k8s.io/v1), JSON or YAML.",
        "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


def explain_router(service: SchedulingService, max_body_bytes: int, budget: BodyBudget) -> APIRouter:
    """The read-only explanation routes over ``service`` (sync routes run in the thread pool)."""
    router = APIRouter(prefix="/api/v1", tags=["explain"])
    # One pod or what-if explanation at a time: each may search every node, and several in turn would
    # keep filter and bind waiting for the lock between their nodes. A second one is refused at once.
    running = threading.Lock()

    def alone(view: Callable[..., _T], *args: Any) -> _T | JSONResponse:
        if not running.acquire(blocking=False):
            answer = _error(429, "another explanation is running; retry when it is done")
            answer.headers["Retry-After"] = "1"
            return answer
        try:
            return _or_404(view, *args)
        except BadObject as e:
            return _error(e.status, str(e))
        finally:
            running.release()

    @router.get(
        "/namespaces/{namespace}/pods/{name}/explain",
        response_model=PodExplanation,
        responses=_NOT_FOUND,
        summary="Why a pod fits (or not) on each node, with device funnels, allocation and score",
    )
    def pod_explain(
        namespace: str,
        name: str,
        node: str | None = Query(None, description="explain only this node"),
    ) -> PodExplanation | JSONResponse:
        return alone(explain_pod, service, namespace, name, node)

    @router.get(
        "/namespaces/{namespace}/resourceclaims/{name}",
        response_model=ClaimView,
        responses=_NOT_FOUND,
        summary="A ResourceClaim as the extender sees it: allocation, status.devices, holders",
    )
    def get_claim(namespace: str, name: str) -> ClaimView | JSONResponse:
        return _or_404(claim_view, service, namespace, name)

    @router.get(
        "/nodes/{name}/devices",
        response_model=NodeDevices,
        responses=_NOT_FOUND,
        summary="A node's devices: attributes, capacity, taints and their source, holders, counters left",
    )
    def get_node_devices(name: str) -> NodeDevices | JSONResponse:
        return _or_404(node_devices_view, service, name)

    @router.post(
        "/explain",
        response_model=WhatIfExplanation,
        responses={
            400: {"model": ErrorAnswer, "description": "Not a ResourceClaim or ResourceClaimTemplate"},
            413: {"model": ErrorAnswer, "description": "Body larger than max_body_bytes"},
            **_NOT_FOUND,
        },
        openapi_extra=_WHAT_IF_BODY,
        summary="What-if: where would this ResourceClaim or ResourceClaimTemplate fit now (nothing created)",
    )
    async def what_if(
        request: Request, node: str | None = Query(None, description="explain only this node")
    ) -> WhatIfExplanation | JSONResponse:
        try:
            body = await read_body(request, max_body_bytes, budget)
        except BodyRejected as e:
            refused = _error(e.status, e.message)
            refused.headers.update(e.headers)
            return refused
        # Parsed on a worker thread, in turn with the other explanations: a YAML body of megabytes takes
        # seconds, which on the event loop would hold every probe and filter.
        return await run_in_threadpool(alone, _what_if, service, body, node)

    return router
