"""Why a pod, or a what-if ResourceClaim / ResourceClaimTemplate, fits a node or not (read-only).

Served at ``/api/v1/namespaces/{ns}/pods/{name}/explain`` and ``POST /api/v1/explain``
(``app.http.explain``) and printed by ``dra-extender explain`` (``app.cli.explain``).

Per node an explanation gives the verdict filter would give (``fits``, ``does-not-fit``,
``unresolvable``, ``error``) with its reason, per claim and request alternative the device funnel of
``allocator.funnel`` (in pools → class selectors → request selectors → taints → not in use → counters /
capacity → constraints, with named rejected devices and the rule), and for nodes that fit the allocation
the device-selection policy would choose and its score broken down (``allocator.decide.allocate``).

Nothing is created or kept: the functions below read the cluster state under the service lock (taken
per node, within filter's time budget) and never write it, never keep per-(pod, node) results, never
reserve devices. Errors: ``NotFound`` for an unknown pod or node; ``BadObject`` for a what-if body that
is not a ResourceClaim or ResourceClaimTemplate, or has a field its apiVersion does not have
(``app.explain.models``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from allocator.cel.limits import claim_cost_problems
from allocator.decide import NoFit, Policy, allocate
from allocator.errors import AllocatorError
from allocator.funnel import (
    RequestFunnel,
    claim_funnels,
    node_devices,
)
from allocator.model import Claim, parse_claim
from allocator.nodeselector import Node
from allocator.scoring import ScoreBreakdown
from app.explain.models import (
    BadObject,
    ClaimAllocation,
    ErrorAnswer,
    FunnelStage,
    LastBind,
    NodeVerdict,
    NotFound,
    PickedDevice,
    PodClaimSummary,
    PodExplanation,
    RejectedDevice,
    RequestExplanation,
    ScoreComponentModel,
    ScoreModel,
    Verdict,
    WhatIfExplanation,
    optional_text,
)
from app.explain.views import known_nodes
from app.scheduling.claimrules import admin_access_refusal, allocated_claims_reason
from app.scheduling.claimsgate import stale_reason
from app.scheduling.extended import ExtendedClaim
from app.scheduling.service import SchedulingService
from app.state.cluster import object_key
from app.state.convert import ConversionError, to_v1
from app.state.documents import check_encodable, load_yaml_document
from app.state.knownfields import strict_decoding_error
from app.state.podclaims import ClaimNotReady, ClaimProblem, PodClaim, state_claim_problems, state_pod_claims

__all__ = ["explain_object", "explain_pod", "parse_object", "what_if"]

_T = TypeVar("_T")


MAX_YAML_BYTES = 256 << 10
"""A what-if body that is YAML is parsed only up to this size (256 KiB; a ResourceClaim has at most 32
requests, a few KB). The state loader's YAML rules build a document at
about 0.4 MB/s here (a 6.9 MB claim of 60,000 requests: 16 s on this 2-core machine), so the body cap
alone (8 MiB) would let one request hold a worker thread for many seconds. JSON bodies (orjson, hundreds
of MB/s) get the whole body cap."""


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
        unrounded=breakdown.unrounded,
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
                    numaNode=optional_text(topology.numa(device)) if device else None,
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
        decided = allocate(
            inventory,
            selectors,
            node,
            pending,
            Policy(service.device_selection, service.scoring, service.filter_timeout),
        )
    except AllocatorError as e:
        return verdict("error", str(e))
    if isinstance(decided, NoFit):
        return verdict("unresolvable" if decided.unresolvable else "does-not-fit", decided.reason)
    assert decided.breakdown is not None  # devices were chosen for the pending claims
    return NodeVerdict(
        node=node.name,
        verdict="fits",
        reason="",
        placement=decided.placement,
        allocations=_allocations(service, node, pending, decided.results),
        score=_score_model(decided.breakdown),
        requests=funnels,
    )


def _nodes(service: SchedulingService, only: str | None) -> list[Node]:
    if only is None:
        return known_nodes(service)
    node = service.state.node(only)
    if node is None:
        raise NotFound(f"node {only} not found")
    return [node]


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
    summaries: list[PodClaimSummary] | None = None

    def explain(target: Node) -> NodeVerdict:
        nonlocal summaries
        try:
            effective = service.effective_claims(pod, target.name)
        except ClaimNotReady as e:
            return _node_verdict(service, target, [], str(e))
        except AllocatorError as e:
            raise _PodError(str(e)) from e
        if summaries is None:
            summaries = _claim_summaries(
                pod, service, effective.allocated, effective.pending, effective.extended
            )
        elsewhere, written = service.claims_written_for_others(pod, target.name)
        if elsewhere:
            return _node_verdict(service, target, [], elsewhere, kind="does-not-fit")
        pending = [claim for claim in effective.pending if claim.key not in written]
        blocked = allocated_claims_reason(effective.allocated, target, pod)
        return _node_verdict(service, target, pending, blocked)

    try:
        verdicts, error = _each_node(service, nodes, explain), ""
    except _PodError as e:
        verdicts, error = [], str(e)
    error = next((v.reason for v in verdicts if v.verdict == "error"), error)
    uid = str(meta.get("uid") or "")
    with service.lock:
        if summaries is None:  # no node resolved the pod's claims: each one with what stands in the way
            summaries = _unresolved_summaries(pod, service)
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
    summaries = [_resolved_summary(pc, allocated=True) for pc in allocated]
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


def _unresolved_summaries(pod: Mapping[str, Any], service: SchedulingService) -> list[PodClaimSummary]:
    """The claims of a pod no node could resolve, as its spec names them, each with its problem (filter's
    reason for it); then an extended-resource claim left from an earlier attempt, which blocks the pod."""
    summaries = [
        PodClaimSummary(
            podClaimName=found.pod_claim_name, claim=found.key, allocated=False, problem=found.problem
        )
        if isinstance(found, ClaimProblem)
        else _resolved_summary(found, allocated=bool((found.claim.get("status") or {}).get("allocation")))
        for found in state_claim_problems(service.state, pod)
    ]
    try:
        extended = service.gate.extended(pod)
    except AllocatorError:
        extended = None  # a malformed quantity: no claim to name (filter's answer reports it)
    if extended is not None and extended.stale is not None:
        summaries.append(
            PodClaimSummary(
                podClaimName="",
                claim=object_key("ResourceClaim", extended.stale),
                allocated=False,
                extendedResources=True,
                problem=stale_reason(extended),
            )
        )
    return summaries


def _resolved_summary(pc: PodClaim, *, allocated: bool) -> PodClaimSummary:
    return PodClaimSummary(
        podClaimName=str(pc.pod_claim_name), claim=pc.key, allocated=allocated, podGroup=_group_name(pc)
    )


def _group_name(pc: PodClaim) -> str:
    return str((pc.consumer or {}).get("name") or "")


def parse_object(body: bytes | str) -> dict[str, Any]:
    """A JSON or YAML document: one ResourceClaim or ResourceClaimTemplate, every field known to its
    apiVersion (strict field validation: ``app.state.knownfields``). Raises BadObject (status 413 for YAML
    beyond ``MAX_YAML_BYTES``)."""
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
    else:
        try:
            check_encodable(obj, "body")  # the claim is copied and digested by encoding it
        except ValueError as e:
            raise BadObject(str(e)) from None
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
    # Typed by a person: a typo (`cuont: 2`) would otherwise silently mean "count unset".
    unknown = strict_decoding_error({"apiVersion": "resource.k8s.io/v1", **obj})
    if unknown:
        raise BadObject(unknown)
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


def _devices(obj: Mapping[str, Any]) -> Any:
    spec = obj.get("spec") or {}
    if obj["kind"] == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    return spec.get("devices")


def _devices_path(obj: Mapping[str, Any]) -> str:
    return "spec.spec.devices" if obj["kind"] == "ResourceClaimTemplate" else "spec.devices"


def what_if(service: SchedulingService, body: bytes, node: str | None) -> WhatIfExplanation:
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
            # The API server refuses expressions over its CEL cost limits (allocator.cel.limits).
            cost = claim_cost_problems(_devices(obj), _devices_path(obj), service.selectors)
            if cost:
                error = f"{obj['kind']} {namespace}/{name}: " + "; ".join(cost)
            # Creating such a claim: the API server refuses admin access without the namespace label.
            elif any(alt.admin_access for r in claim.requests for alt in r.alternatives):
                error = admin_access_refusal(service.state, claim.key)
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


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorAnswer, "description": "Unknown object"}}
