"""Filter, prioritize and bind for one pod, on the cluster state (the extender's verbs, transport-free).

* filter: the pod's claims are resolved; a pod without claims passes every node (fast path); allocated
  claims must admit the node through their ``nodeSelector``; the unallocated ones are allocated together
  on each node, followed by the node's extended-resource claim when the pod asks for extended resources
  backed by DRA (``app.scheduling.extended``, KEP-5004). Decisions are kept per (claims shape, node) while the
  node's inventory version is unchanged, shared by pods with equal claim specs; a shape's answer for a
  node list is patched only for nodes changed since. Where free-device counts settle that the claims
  fit (``allocator.counting``), the decision records just that; devices are chosen when the node is
  scored or bound. An extended-resource claim left from an earlier attempt fails every node; as
  kube-scheduler's PostFilter, the service deletes it (binder permitting) and filters once more, which
  is the attempt kube-scheduler would make next. An allocated claim that can never be bound (a binding
  failure condition True, or its binding timeout passed: ``app.scheduling.bindingconditions``) fails every
  node; as
  kube-scheduler's PostFilter, the service deallocates it through the binder when it is reserved for
  nobody or only this pod, and kube-scheduler tries the pod again once it sees the claim change.
* prioritize: 0-10 per node from the kept decision (``allocator.scoring``: NUMA and PCIe alignment,
  binpack or spread, the firstAvailable rank), choosing devices first on nodes filter passed by counts;
  devices inside a node are chosen by the device-selection policy (``allocator.alignment``: ``aligned``
  by default, ``first-fit`` for upstream's order).
* bind: decide on the chosen node (the kept decision while it is current), reserve those
  devices in the inventory so concurrent filters treat them as used, and let the ``Binder`` write the
  claims and the pod (``app.scheduling.binder``); the reservation is released once the write is done or
  failed.
  One bind per pod at a time: while it writes, a second bind of the pod is refused and a filter of it
  fails every node (kube-scheduler retries both once its ``httpTimeout`` passes), so neither can release
  the first attempt's reservation or delete the extended-resource claim it has just created.

Decisions hold one lock (the state is a single in-memory index); binder writes happen outside it.
``filter_quick`` / ``prioritize_quick`` are the same decisions for the caller's thread (the event loop):
they give up (None) rather than wait for the lock, search, or decide more than ``QUICK_DEVICE_CHECKS``
allow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson

from allocator.alignment import select
from allocator.counting import countable, verdict
from allocator.diagnose import diagnose
from allocator.equivalence import EquivalenceCache, Verdict
from allocator.errors import AllocatorError, InvalidInputError, NodeLocalError
from allocator.inventory import AllocatedDevice, Inventory, NodeVersions, allocated_devices
from allocator.model import Claim
from allocator.nodeoperations import DECLARED_FEATURE, requires_declared_feature
from allocator.nodeselector import Node, parse_node_selector
from allocator.scoring import ScoringConfig, score_allocation
from allocator.selectors import SelectorCache
from app.scheduling.binder import (
    Binder,
    BindError,
    BindPlan,
    ClaimDeleter,
    ClaimReleaser,
    ExtendedBind,
    StateBinder,
)
from app.scheduling.bindingconditions import unusable_reason
from app.scheduling.bindlog import BindLog
from app.scheduling.extended import ExtendedClaim, PodExtendedResources, pod_extended_resources
from app.scheduling.nodefit import fit_node_allocatable
from app.state.cluster import ClusterState, node_from_api, object_key
from app.state.podclaims import ClaimNotReady, PodClaim, pod_key, state_pod_claims
from app.state.podgroups import reserves

__all__ = ["DecisionStats", "EffectiveClaims", "FilterOutcome", "SchedulingService", "needs_no_devices"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"

INDEX_LAG_SECONDS = 2.0
"""How long a bind waits for the index to show a claim its pod names. kube-scheduler's informers and ours
see the resourceclaim controller's writes (the generated claim, the pod's ``status.resourceClaimStatuses``)
at slightly different times, so on a real control plane a bind can arrive first. Past this the bind fails
with the reason and kube-scheduler retries the pod."""

INDEX_POLL_SECONDS = 0.02
"""How often a waiting bind looks at the index again."""

MAX_RESERVED_FOR = 256
"""``ResourceClaimReservedForMaxSize``."""

FILTER_TIME_BUDGET = 3.0
"""Seconds one filter call may spend searching. kube-scheduler waits 5 s (default ``httpTimeout``) and
the whole scheduling queue waits with it, so a claim whose search explodes (constraints that can never
be met on big nodes) must not hold the service: nodes not decided in time fail with a reason."""

MAX_UNSEEN = 10_000
"""Claim writes of finished binds kept until the ResourceClaim watch shows them (``SchedulingService``)."""

BIND_WAIT = 20.0
"""Seconds a bind waits for another pod's bind writing a claim they share (about what a bind's claim writes
take, README); then it fails and kube-scheduler retries it."""

MAX_SHAPES = 256
"""Distinct claim specs whose per-node decisions are kept (oldest dropped first): one per template or
shared-claim spec in use, each holding at most one decision per node."""

QUICK_NODES = 8
QUICK_DEVICE_CHECKS = 512
"""How much ``filter_quick`` / ``prioritize_quick`` may decide on the caller's thread (the event loop):
at most ``QUICK_NODES`` nodes and ``QUICK_DEVICE_CHECKS`` requests x devices on them. A warm answer
re-decides only the nodes changed since, usually one, and the handoff to a worker thread costs more than
that on a busy 2-core node. They never search there (only counts, the reason funnel, and choosing devices
where counts found enough, all linear in the devices), so with the default CEL engine this stays within a
few milliseconds and probes stay responsive."""

MAX_KEPT_DECISIONS = 200_000
"""Per-pod views plus their private per-(pod, node) decisions kept between filter and bind, in total; the
oldest pods' are dropped first. kube-scheduler filters one pod at a time, so this only bounds memory when
many pods are filtered but never bound. A view keeps digests of the pod spec and claims, not copies (a
pod spec can be a megabyte); a private decision holds one allocation result (a few hundred bytes)."""


@dataclass(slots=True)
class FilterOutcome:
    """Nodes that fit, nodes that failed (reason), nodes that can never fit, or a fatal error."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""
    stale_claims: list[tuple[str, str]] = field(default_factory=list)
    """(key, uid) of extended-resource claims left from an earlier attempt (deleted by ``filter``)."""
    unusable: Mapping[str, Any] | None = None
    """An allocated claim of the pod that can never be bound, as seen (deallocated by ``filter``)."""


@dataclass(frozen=True, slots=True)
class EffectiveClaims:
    """The claims a pod needs on one node: ``allocated`` ones (their ``nodeSelector`` must admit the
    node) and ``pending`` ones to allocate together, in order, the node's extended-resource claim last
    (``extended``; None when the pod needs none there)."""

    allocated: list[PodClaim]
    pending: list[Claim]
    extended: ExtendedClaim | None


@dataclass(frozen=True, slots=True)
class _Decision:
    """What one node decided for a claims shape, valid while the node's version is unchanged."""

    version: tuple[int, int]
    results: tuple[dict[str, Any], ...] | None
    """One allocation result per claim; None: the claims do not fit."""
    score: int | None
    """0-10; None: the claims fit by free-device counts (``allocator.counting``) and no devices were
    chosen yet (``results`` is empty): prioritize and bind choose them (``select=True``)."""
    reason: str
    unresolvable: bool


@dataclass(slots=True)
class _ShapeOutcome:
    """A claims shape's answer for one node list (``names_key``) as of inventory change ``seq``; reasons
    keep the claim-name placeholders of the shared decisions. ``undecided`` nodes (time budget, unknown
    node) are decided again on every call."""

    names_key: int
    global_version: int
    seq: int
    passed: dict[str, int | None] = field(default_factory=dict)
    """Passing node -> its score (None: fits by counts, not scored yet)."""
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    undecided: set[str] = field(default_factory=set)
    ordered: bool = False
    """``passed`` is in the order of the node list: the answer is that list without the others, which the
    wire layer then checks at C speed instead of filtering every name (``order``)."""

    def covers(self, name: str) -> bool:
        return (
            name in self.passed or name in self.failed or name in self.unresolvable or name in self.undecided
        )

    def record(
        self, names: Iterable[str], decisions: Mapping[str, _Decision], versions: NodeVersions
    ) -> None:
        """Take each node's shared decision into the answer; a node without a current one (not decided in
        time, unknown, not shareable) is undecided and decided again on the next call."""
        for name in names:
            self.failed.pop(name, None)
            self.unresolvable.pop(name, None)
            self.undecided.discard(name)
            decision = decisions.get(name)
            if decision is None or decision.version != (versions.global_version, versions.get(name)):
                self.passed.pop(name, None)
                self.undecided.add(name)
            elif decision.results is not None:
                # A node that still passes keeps its place; one that joins goes last.
                self.ordered = self.ordered and name in self.passed
                self.passed[name] = decision.score
            else:
                self.passed.pop(name, None)
                (self.unresolvable if decision.unresolvable else self.failed)[name] = decision.reason

    def order(self, names: Sequence[str]) -> None:
        """Put ``passed`` in the order of ``names``, the node list."""
        if not self.ordered:
            self.passed = {name: self.passed[name] for name in names if name in self.passed}
            self.ordered = True


@dataclass(slots=True)
class _PodView:
    """What filter decided for one pod, for prioritize and bind.

    Decisions shared by every pod with the same claim specs live in ``SchedulingService._decisions``
    under ``(shape, node)``; ``private`` holds the ones that cannot be shared (shares of multi-allocatable
    devices, nodes as kube-scheduler sent them, extended-resource claims, already-allocated claims).
    """

    uid: str
    shape: bytes
    claims: tuple[str, ...]
    """Keys of the pending claims the decisions are for: a bind reuses them only for the same claims."""
    pod_spec: bytes = b""
    """The pod spec they were made for (containers' extended resources): a bind reuses them only for it."""
    shared: bool = False
    """Whether the decisions are the shape's shared ones (else only ``private`` holds this pod's)."""
    private: dict[str, tuple[_Decision, ExtendedClaim | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Asked:
    """What one filter call decides nodes for: the pod, its view, the claims to allocate, and the per-pod
    extras that keep decisions private (allocated claims, extended resources, Node objects sent)."""

    pod: Mapping[str, Any]
    view: _PodView
    pending: list[Claim]
    allocated: list[PodClaim] = field(default_factory=list)
    extended: PodExtendedResources | None = None
    nodes: Mapping[str, Mapping[str, Any]] | None = None


class _NotQuick(Exception):
    """The quick variant would have to search, or decide more than ``QUICK_DEVICE_CHECKS`` allow."""


@dataclass(slots=True)
class DecisionStats:
    """Counters of how filter decided nodes, for ``/metrics`` (plain integers: the hot path only adds)."""

    hits: int = 0
    """Nodes answered from a kept decision whose node version is unchanged."""
    misses: int = 0
    """Nodes decided anew (counts, or a search)."""
    budget_cuts: int = 0
    """Filter calls whose time budget ran out before every node was decided."""
    budget_undecided_nodes: int = 0
    """Nodes those calls failed with the budget reason."""


class SchedulingService:
    """The extender's decisions over a ``ClusterState``."""

    def __init__(
        self,
        state: ClusterState,
        selectors: SelectorCache,
        binder: Binder | None = None,
        *,
        device_selection: str = "aligned",
        scoring: ScoringConfig | None = None,
    ) -> None:
        self.state = state
        self.selectors = selectors
        if state.inventory.class_index is None:
            # DeviceClass selectors are evaluated as slices and classes arrive, not in filter.
            state.inventory.attach_selectors(selectors)
        self.device_selection = device_selection
        """``aligned`` or ``first-fit`` (``allocator.alignment``); set before serving."""
        self.scoring = scoring or ScoringConfig()
        """Scoring policy and weights (``allocator.scoring``); set before serving."""
        self.lock = threading.RLock()
        self.binder: Binder = binder or StateBinder(state, self.lock)
        self.index_lag_seconds = INDEX_LAG_SECONDS
        """How long a bind waits for the index to show a claim the pod names (``INDEX_LAG_SECONDS``)."""
        self._pods: dict[str, _PodView] = {}
        """Per pod UID, the latest filter's view (oldest dropped first beyond MAX_KEPT_DECISIONS)."""
        self._kept_count = 0
        """Views plus their private decisions in ``_pods`` (bounded by MAX_KEPT_DECISIONS)."""
        self._decisions: dict[bytes, dict[str, _Decision]] = {}
        """Per (claims shape, node): pods with equal pending claim specs (one template) get equal
        decisions on a node whose version is unchanged, so most nodes are decided by one lookup."""
        self._outcomes: dict[bytes, _ShapeOutcome] = {}
        self._equivalence = EquivalenceCache(state.inventory, selectors)
        """Per (claims shape, node signature): alike nodes share one decision (``allocator.equivalence``),
        so a new shape is decided once per distinct node, not once per node."""
        """Per claims shape, the last answer for a whole node list, patched node by node afterwards."""
        self._inflight: dict[str, str] = {}
        """Claim key -> pod key of binds writing a new allocation for that claim right now."""
        self._binding: dict[str, str] = {}
        """Pod key -> node of the bind writing that pod right now. kube-scheduler retries a bind whose
        answer exceeded its ``httpTimeout`` and filters the pod again meanwhile: both must leave the
        first attempt's reservation and the claims it is creating alone."""
        self.bind_log = BindLog()
        """The last bind outcome per pod, for explain."""
        self._unseen: dict[str, tuple[str, str]] = {}
        """Claim key -> (pod key, node) of a finished bind whose claim write the state does not show yet (the
        ResourceClaim watch is behind; oldest dropped beyond MAX_UNSEEN): pods sharing the claim wait for
        it as for a bind in flight, else they would allocate the claim again from the stale copy."""
        self._bind_done = threading.Condition(self.lock)
        """Notified when a bind ends: binds of pods sharing a claim it wrote wait for it."""
        self.bind_wait = BIND_WAIT
        self._attempts = itertools.count(1)
        """Numbers bind attempts, so each reservation token belongs to the attempt that made it."""
        self.filter_time_budget = FILTER_TIME_BUDGET
        self.stats = DecisionStats()
        self.binding_timeout_seconds = 600.0
        """kube-scheduler's ``bindingTimeout``: how long allocated devices may wait for their binding
        conditions (``ClusterSettings.binding_timeout_seconds``); set before serving."""

    # --- helpers ----------------------------------------------------------------------------------

    def _state_pod(self, pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The state's copy of the request's pod (same namespace, name and UID), or None."""
        known = self.state.get("Pod", pod_key(pod))
        if known is None or (known.get("metadata") or {}).get("uid") != (pod.get("metadata") or {}).get(
            "uid"
        ):
            return None
        return known

    def _with_state_status(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request's pod, with ``resourceClaimStatuses`` from the state when the request lacks them."""
        if (pod.get("status") or {}).get("resourceClaimStatuses"):
            return pod
        known = self._state_pod(pod)
        if known is None:
            return pod
        statuses = (known.get("status") or {}).get("resourceClaimStatuses")
        if not statuses:
            return pod
        merged = dict(pod)
        merged["status"] = {**(pod.get("status") or {}), "resourceClaimStatuses": statuses}
        return merged

    def _split_claims(self, claims: list[PodClaim]) -> tuple[list[PodClaim], list[PodClaim], list[Claim]]:
        """Allocated claims, pending ones, and the pending ones parsed. Raises InvalidInputError for a claim
        the API server would refuse."""
        allocated = [pc for pc in claims if _is_allocated(pc)]
        pending_claims = [pc for pc in claims if not _is_allocated(pc)]
        pending = [self.state.parsed_claim(pc.key) for pc in pending_claims]
        for claim in pending:
            self._check_admin_access(claim)
        return allocated, pending_claims, pending

    def _check_admin_access(self, claim: Claim) -> None:
        """KEP-5018: adminAccess is admitted only in namespaces labelled
        ``resource.kubernetes.io/admin-access: "true"`` (API validation; the allocator does not check it)."""
        if not any(alt.admin_access for r in claim.requests for alt in r.alternatives):
            return
        namespace = self.state.get("Namespace", claim.namespace) or {}
        labels = (namespace.get("metadata") or {}).get("labels") or {}
        if labels.get(ADMIN_ACCESS_LABEL) != "true":
            raise InvalidInputError(
                f"claim {claim.key}: admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label "
                f"on the containing namespace {claim.namespace}"
            )

    def _node(self, name: str, nodes: Mapping[str, Mapping[str, Any]] | None) -> Node | None:
        if nodes and name in nodes:
            return node_from_api(nodes[name])
        return self.state.node(name)

    def _node_object(
        self, name: str, nodes: Mapping[str, Mapping[str, Any]] | None
    ) -> Mapping[str, Any] | None:
        """The core/v1 Node dict (for ``status.allocatable``): as sent by kube-scheduler, else the state's."""
        if nodes and name in nodes:
            return nodes[name]
        return self.state.get("Node", name)

    def _extended(self, pod: Mapping[str, Any]) -> PodExtendedResources | None:
        """The pod's DRA-backed extended resources. Raises InvalidInputError for a malformed quantity."""
        return pod_extended_resources(
            pod,
            self.state.objects["DeviceClass"].values(),
            self.state.objects["ResourceClaim"],
            self.state.gates,
        )

    def effective_claims(
        self,
        pod: Mapping[str, Any],
        node_name: str,
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> EffectiveClaims:
        """The claims ``pod`` needs on ``node_name``, the extended-resource claim included (for explain).

        Raises ClaimNotReady (a claim is missing, being deleted, not the pod's, or an extended-resource
        claim is left from an earlier attempt) or AllocatorError (a claim or the pod is invalid).
        """
        with self.lock:
            pod = self._with_state_status(pod)
            allocated, _, pending = self._split_claims(state_pod_claims(self.state, pod))
            extended = self._extended(pod)
            if extended is not None and extended.stale is not None:
                raise ClaimNotReady(self._stale_reason(extended))
            ext = extended.claim_for_node(self._node_object(node_name, nodes)) if extended else None
            return EffectiveClaims(allocated, [*pending, ext.claim] if ext else pending, ext)

    @staticmethod
    def _stale_reason(extended: PodExtendedResources) -> str:
        meta = (extended.stale or {}).get("metadata") or {}
        return (
            f"ResourceClaim {meta.get('namespace') or 'default'}/{meta.get('name')}: extended-resource "
            "claim from an earlier scheduling attempt; it must be deleted before the pod is scheduled again"
        )

    # --- filter -----------------------------------------------------------------------------------

    def filter(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> FilterOutcome:
        """Decide each node for ``pod``. ``nodes``: full Node objects when kube-scheduler sent them."""
        if needs_no_devices(pod):
            return _passes_all(node_names)
        with self.lock:
            pod = self._with_state_status(pod)
            outcome = self._filter(pod, node_names, nodes)
        if outcome.stale_claims and self._delete_stale_claims(outcome.stale_claims):
            # kube-scheduler's PostFilter deleted the claim and the pod is tried again: do that attempt now.
            with self.lock:
                outcome = self._filter(pod, node_names, nodes)
        if outcome.unusable is not None:
            self._release_unusable(outcome, pod)
        if (
            self.state.gates.DRANodeAllocatableResources
            and self.state.node_allocatable_slices
            and outcome.passed
        ):
            with self.lock:
                fit_node_allocatable(self, pod, outcome, nodes)
        return outcome

    def _release_unusable(self, outcome: FilterOutcome, pod: Mapping[str, Any]) -> None:
        """Deallocate ``outcome.unusable`` through the binder when nobody else holds it, and say so in the
        reasons. Unlike a deleted extended-resource claim, the index shows the claim allocated until the
        watch reports the write, so the next attempt is kube-scheduler's, on that claim event."""
        claim = outcome.unusable
        assert claim is not None
        uid = (pod.get("metadata") or {}).get("uid")
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if any(r.get("uid") != uid for r in reserved):
            note = "; it stays allocated: reserved for other pods"
        elif self._release(claim, str(uid or "")):
            note = "; deallocated it, so the pod can be scheduled again"
        else:
            return
        outcome.failed = {name: reason + note for name, reason in outcome.failed.items()}

    def _release(self, claim: Mapping[str, Any], pod_uid: str) -> bool:
        if not isinstance(self.binder, ClaimReleaser):
            return False  # offline: no driver sets binding conditions, nothing to release for
        try:
            return self.binder.release_claim(claim, pod_uid)
        except BindError:
            log.exception("deallocating unusable ResourceClaim %s failed", object_key("ResourceClaim", claim))
            return False

    def filter_quick(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> FilterOutcome | None:
        """``filter`` when its answer needs no search and few device checks, and the lock is free
        (a pod without devices; the claims shape's answer for this node list patched for the few nodes
        changed since); else None, and the caller runs ``filter`` on a worker thread. Never does I/O."""
        if needs_no_devices(pod):
            return _passes_all(node_names)
        if self.state.gates.DRANodeAllocatableResources and self.state.node_allocatable_slices:
            return None  # node fit reads every pod of the node: a worker thread's job
        outcome = self._quickly(
            lambda: self._filter(self._with_state_status(pod), node_names, nodes, quick=True)
        )
        # Deleting a leftover extended-resource claim is a write: it belongs on a worker thread.
        return None if outcome is None or outcome.stale_claims else outcome

    def _delete_stale_claims(self, claims: list[tuple[str, str]]) -> bool:
        """Delete leftover extended-resource claims through the binder; False if it cannot or failed."""
        if not isinstance(self.binder, ClaimDeleter):
            return False
        try:
            return all(self.binder.delete_claim(key, uid) for key, uid in claims)
        except Exception:
            log.exception("deleting leftover extended-resource claims %s failed", [k for k, _ in claims])
            return False

    def _filter(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None,
        *,
        quick: bool = False,
        select: bool = False,
        choose: bool = False,
        beside: frozenset[str] = frozenset(),
    ) -> FilterOutcome:
        """Filter under the lock. ``quick``: raise _NotQuick (before changing anything of the pod's)
        rather than search or decide more than ``QUICK_DEVICE_CHECKS`` allow. ``select``: score every
        passing node (for prioritize) where filter alone may decide by counts; ``choose`` (bind): also
        choose its devices where the score came from an equivalent node.
        ``beside``: claims other pods' binds are writing on the nodes asked (``_filter_beside``)."""
        outcome = FilterOutcome()
        uid = str((pod.get("metadata") or {}).get("uid") or pod_key(pod))
        bound = self._bound_node(pod)
        if bound:
            # kube-scheduler's copy may predate a bind that already happened (e.g. its bind call timed
            # out): only that node fits, and nothing of the pod's (claims included) is touched.
            outcome.passed = [n for n in node_names if n == bound]
            outcome.unresolvable = {
                n: f"pod is already bound to node {bound}" for n in node_names if n != bound
            }
            return outcome
        binding = self._binding.get(pod_key(pod))
        if binding:
            # kube-scheduler gave up waiting for the bind and tries the pod again: the claims the bind is
            # creating are not leftovers, and its devices are not free. The bind decides the outcome.
            reason = f"pod {pod_key(pod)} is being bound to node {binding}; retry once that bind is done"
            outcome.failed = dict.fromkeys(node_names, reason)
            return outcome
        try:
            claims = [pc for pc in state_pod_claims(self.state, pod) if pc.key not in beside]
        except ClaimNotReady as e:
            outcome.unresolvable = {name: str(e) for name in node_names}
            return outcome
        in_flight = self._in_flight(pod, claims)
        if in_flight:
            return self._filter_beside(
                pod, node_names, nodes, in_flight, quick=quick, select=select, choose=choose
            )
        try:
            extended = self._extended(pod)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        if not claims and extended is None:
            outcome.passed = list(node_names)
            return outcome
        if extended is not None and extended.stale is not None:
            meta = extended.stale.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            outcome.unresolvable = {name: self._stale_reason(extended) for name in node_names}
            outcome.stale_claims.append((key, str(meta.get("uid") or "")))
            return outcome
        try:
            allocated, pending_claims, pending = self._split_claims(claims)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        # Shared decisions need the same inputs for every pod: the state's node, no per-pod extras.
        shared = nodes is None and extended is None and not allocated
        if quick and not shared:
            raise _NotQuick
        try:
            unusable = self._unusable_claim(allocated)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        if unusable is not None:
            # Upstream's Filter: the claim is unavailable on every node (Unschedulable, for PostFilter).
            outcome.failed = dict.fromkeys(
                node_names, f"claim {unusable[0].key} cannot be bound: {unusable[1]}"
            )
            outcome.unusable = unusable[0].claim
            return outcome
        view = self._view(uid, pending_claims, pod, shared, keep=select)
        if shared:
            return self._filter_shared(
                outcome, node_names, _Asked(pod, view, pending), quick=quick, select=select, choose=choose
            )
        asked = _Asked(pod, view, pending, allocated, extended, nodes)
        self._decide_nodes(outcome, node_names, asked, select=True, quick=False)
        return outcome

    def _view(
        self, uid: str, pending_claims: list[PodClaim], pod: Mapping[str, Any], shared: bool, *, keep: bool
    ) -> _PodView:
        """The pod's view for this filter: a new one or, with ``keep`` (prioritize and bind completing the
        last filter), the last one while it is for the same claims and pod spec, private decisions and all."""
        view = _PodView(
            uid, _shape(pending_claims), tuple(pc.key for pc in pending_claims), _spec_key(pod), shared
        )
        last = self._pods.get(uid)
        wanted = (view.shape, view.claims, view.pod_spec, view.shared)
        if keep and last is not None and (last.shape, last.claims, last.pod_spec, last.shared) == wanted:
            return last
        self._forget(uid)
        self._pods[uid] = view
        self._keep(1)
        return view

    def kept_decisions(self) -> int:
        """Per-pod views plus their private decisions kept (at most MAX_KEPT_DECISIONS), for metrics."""
        return self._kept_count

    def _forget(self, uid: str) -> None:
        view = self._pods.pop(uid, None)
        if view is not None:
            self._kept_count -= 1 + len(view.private)

    def _keep(self, count: int) -> None:
        """``count`` more kept entries (a view, or private decisions of the newest views): drop the oldest
        views while over MAX_KEPT_DECISIONS, never the newest (the one being filled)."""
        self._kept_count += count
        while self._kept_count > MAX_KEPT_DECISIONS and len(self._pods) > 1:
            self._forget(next(iter(self._pods)))

    def _filter_shared(
        self,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        asked: _Asked,
        *,
        quick: bool,
        select: bool,
        choose: bool,
    ) -> FilterOutcome:
        """Filter from the shape's previous answer for the same node list, deciding again only the
        nodes whose version changed since (usually just the node of the last bind).

        ``select`` (prioritize, bind: a few nodes): choose devices on each passing node and patch the
        shape's answer; the answer keeps the node list filter asked for."""
        inventory = self.state.inventory
        view, pending = asked.view, asked.pending
        seq = inventory.change_seq
        last = self._outcomes.get(view.shape)
        if select:
            if quick and not _quick_enough(inventory, node_names, pending):
                raise _NotQuick
            self._decide_nodes(outcome, node_names, asked, select=True, quick=quick, choose=choose)
            if last is not None and not outcome.error:
                covered = [n for n in node_names if last.covers(n)]
                last.record(covered, self._decisions.get(view.shape, {}), inventory.node_versions())
            return outcome
        names_key = hash(tuple(node_names))
        changed = None
        if last is not None and last.names_key == names_key:
            changed = inventory.nodes_changed_since(last.seq, last.global_version)
        if changed is None:
            if quick:
                raise _NotQuick
            self._decide_nodes(outcome, node_names, asked, select=False, quick=False)
            if not outcome.error:
                last = _ShapeOutcome(names_key, inventory.node_versions().global_version, seq)
                last.record(node_names, self._decisions.get(view.shape, {}), inventory.node_versions())
                self._outcomes[view.shape] = last
                if len(self._outcomes) > MAX_SHAPES:
                    del self._outcomes[next(iter(self._outcomes))]
            return outcome
        redo = [n for n in {*changed, *last.undecided} if last.covers(n)]
        if quick and (last.undecided or not _quick_enough(inventory, redo, pending)):
            raise _NotQuick
        now = FilterOutcome()
        self._decide_nodes(now, redo, asked, select=False, quick=quick)
        self._count(len(node_names) - len(redo), 0)  # the others: from the shape's last answer
        if now.error:
            return now
        last.record(redo, self._decisions.get(view.shape, {}), inventory.node_versions())
        last.seq = seq
        last.order(node_names)
        outcome.passed = list(last.passed)
        outcome.failed = _all_named(last.failed, pending)
        outcome.unresolvable = _all_named(last.unresolvable, pending)
        # Nodes without a shared decision (time budget, unknown node, shares): this call's answer.
        outcome.passed.extend(n for n in now.passed if n in last.undecided)
        outcome.failed.update((n, r) for n, r in now.failed.items() if n in last.undecided)
        outcome.unresolvable.update((n, r) for n, r in now.unresolvable.items() if n in last.undecided)
        return outcome

    def _decide_nodes(
        self,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        asked: _Asked,
        *,
        select: bool,
        quick: bool,
        choose: bool = False,
    ) -> None:
        """Decide ``node_names`` into ``outcome`` (one lookup per node whose decision is current).
        ``select``: a decision by counts is not enough, nodes are scored; ``choose``: devices are chosen
        (not only scored through an equivalent node). ``quick``: raise _NotQuick rather than search. On a
        fatal error ``outcome.error`` is set and the node lists are empty."""
        view, pending = asked.view, asked.pending
        decisions = self._decisions.get(view.shape) if view.shared else None
        versions = self.state.inventory.node_versions()
        named: dict[str, str] = {}  # a shared reason with this pod's claim names, once per distinct reason
        passed, failed, unresolvable = outcome.passed, outcome.failed, outcome.unresolvable
        budget = self.filter_time_budget
        deadline = time.monotonic() + budget
        # Counted once the call is through: a quick attempt that gives up (_NotQuick) is decided again.
        hits = misses = 0
        for index, name in enumerate(node_names):
            if index % 64 == 0 and time.monotonic() > deadline:
                self._cut(failed, node_names[index:], budget)
                break
            # The hot path: one lookup per node while its version is unchanged.
            decision = decisions.get(name) if decisions is not None else None
            if (
                decision is not None
                and decision.version == (versions.global_version, versions.get(name))
                and not (select and decision.score is None)
                and not (choose and not decision.results)
            ):
                hits += 1
                if decision.results is not None:
                    passed.append(name)
                    continue
                reason = named.get(decision.reason)
                if reason is None:
                    reason = named[decision.reason] = _named(decision.reason, pending)
                (unresolvable if decision.unresolvable else failed)[name] = reason
                continue
            if time.monotonic() > deadline:  # the slow path: checked before every search
                self._cut(failed, node_names[index:], budget)
                break
            misses += 1
            try:
                decision = self._decide_node(name, asked, select=select, quick=quick, choose=choose)
            except AllocatorError as e:
                outcome.error = str(e)
                outcome.passed, outcome.failed, outcome.unresolvable = [], {}, {}
                self._count(hits, misses)
                return
            if decisions is None and view.shared:
                decisions = self._decisions.get(view.shape)
            if decision is None:
                unresolvable[name] = f"node {name} is not known to dra-extender"
            elif decision.results is None:
                (unresolvable if decision.unresolvable else failed)[name] = decision.reason
            else:
                passed.append(name)
        self._count(hits, misses)

    def _count(self, hits: int, misses: int) -> None:
        self.stats.hits += hits
        self.stats.misses += misses

    def _cut(self, failed: dict[str, str], undecided: Sequence[str], budget: float) -> None:
        """The time budget ran out: the nodes not decided yet fail with a reason saying so."""
        failed.update(dict.fromkeys(undecided, _budget_reason(budget)))
        self.stats.budget_cuts += 1
        self.stats.budget_undecided_nodes += len(undecided)

    def _decide_node(
        self,
        name: str,
        asked: _Asked,
        *,
        select: bool,
        quick: bool,
        choose: bool = False,
    ) -> _Decision | None:
        """Decide one node the slow way and record it (shared or private). None: the node is unknown.
        Shared decisions may be taken by counts unless ``select``, and from an equivalent node's decision
        unless ``choose``; ``quick``: raise _NotQuick rather than search."""
        version = self.state.inventory.node_version(name)
        node = self._node(name, asked.nodes)
        if node is None:
            return None
        reason = self._allocated_claims_reason(asked.allocated, node, asked.pod)
        if reason:
            return _Decision(version, None, 0, reason, True)
        extended, view = asked.extended, asked.view
        ext = extended.claim_for_node(self._node_object(name, asked.nodes)) if extended else None
        claims = [*asked.pending, ext.claim] if ext else asked.pending
        if view.shared and not choose:
            decision = self._decide_equivalent(node, claims, version, view.shape, select=select, quick=quick)
        else:
            decision = self._decide_here(node, claims, version, select=select or not view.shared, quick=quick)
        if view.shared and not _has_share(decision.results):
            self._remember(view.shape, name, decision, claims)
        else:
            if name not in view.private and self._pods.get(view.uid) is view:
                self._keep(1)
            view.private[name] = (decision, ext)
        return decision

    def _decide_equivalent(
        self,
        node: Node,
        claims: list[Claim],
        version: tuple[int, int],
        shape: bytes,
        *,
        select: bool,
        quick: bool,
    ) -> _Decision:
        """``_decide_here``, or the decision of an equivalent node (``allocator.equivalence``): the
        verdict, reason and score, no devices chosen (``results`` empty: bind chooses them)."""
        context = (version[0], self.device_selection, id(self.scoring))
        table = self._equivalence.table(shape, context, claims, self.scoring.topology)
        signature = table.signature(node)
        found = table.get(signature, scored=select)
        if found is not None:
            results = () if found.fits else None
            reason = _named(found.reason, claims) if found.reason else ""
            return _Decision(version, results, found.score, reason, found.unresolvable)
        decision = self._decide_here(node, claims, version, select=select, quick=quick)
        if not _has_share(decision.results):
            verdict = Verdict(
                decision.results is not None,
                decision.score,
                _placeholders(decision.reason, claims),
                decision.unresolvable,
            )
            table.put(signature, verdict, node, decision.reason)
        return decision

    def _decide_here(
        self, node: Node, claims: list[Claim], version: tuple[int, int], *, select: bool, quick: bool
    ) -> _Decision:
        """``_decide`` on this node, the reasons of slices rejected for it added to a "no"."""
        decision = self._decide(node, claims, version, select=select, quick=quick)
        rejected = self.state.inventory.invalid_slices(node.name)
        if decision.results is None and rejected:
            reason = f"{decision.reason}; slices not used: {'; '.join(rejected)}"
            decision = dataclasses.replace(decision, reason=reason)
        return decision

    def _decide(
        self, node: Node, claims: list[Claim], version: tuple[int, int], *, select: bool, quick: bool
    ) -> _Decision:
        """Allocate ``claims`` on ``node`` and score it, or say why not. Where free-device counts decide
        (``allocator.counting``), "no" skips the search, and so does "yes" unless ``select`` (no devices
        chosen then). ``quick``: raise _NotQuick rather than search. Raises AllocatorError (fatal)."""
        inventory = self.state.inventory
        counted = verdict(inventory, self.selectors, node, claims) if claims and countable(claims) else None
        if counted is not None and counted.no_fit is not None:
            return _Decision(version, None, 0, counted.no_fit.reason, counted.no_fit.unresolvable)
        if counted is not None and not select:
            return _Decision(version, (), None, "", False)
        if counted is None and claims and quick:
            raise _NotQuick
        try:
            results = self._select(node, claims) if claims else []
        except NodeLocalError as e:
            return _Decision(version, None, 0, str(e), True)
        if results is None:
            no_fit = diagnose(inventory, self.selectors, node, claims)
            return _Decision(version, None, 0, no_fit.reason, no_fit.unresolvable)
        return _Decision(version, tuple(results), self._score(node, claims, results), "", False)

    def _remember(self, shape: bytes, node: str, decision: _Decision, claims: list[Claim]) -> None:
        """Cache a decision for every pod with the same claim specs: claim names in the reason become
        placeholders (``_named`` puts the asking pod's claims back)."""
        by_node = self._decisions.get(shape)
        if by_node is None:
            by_node = self._decisions[shape] = {}
            if len(self._decisions) > MAX_SHAPES:
                del self._decisions[next(iter(self._decisions))]
        if decision.reason:
            decision = dataclasses.replace(decision, reason=_placeholders(decision.reason, claims))
        by_node[node] = decision

    def _bound_node(self, pod: Mapping[str, Any]) -> str:
        """The node the state has this pod (same UID) bound to, or ''."""
        known = self._state_pod(pod)
        return str(((known or {}).get("spec") or {}).get("nodeName") or "")

    def _in_flight(self, pod: Mapping[str, Any], claims: list[PodClaim]) -> dict[str, tuple[str, str]]:
        """The pod's claims another pod's bind is allocating right now: claim key -> (that pod, its node)."""
        me = pod_key(pod)
        found = {}
        for pc in claims:
            holder = self._inflight.get(pc.key)
            if holder is not None:
                found[pc.key] = (holder, self._binding[holder])
            elif pc.key in self._unseen and not _is_allocated(pc):
                found[pc.key] = self._unseen[pc.key]
        return {claim: (holder, node) for claim, (holder, node) in found.items() if holder != me}

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (lock held): the watch shows a claim a finished bind wrote, or its deletion."""
        if kind == "ResourceClaim" and key in self._unseen and (obj is None or _has_allocation(obj)):
            del self._unseen[key]
            self._bind_done.notify_all()

    def _filter_beside(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None,
        in_flight: dict[str, tuple[str, str]],
        *,
        quick: bool,
        select: bool,
        choose: bool,
    ) -> FilterOutcome:
        """Filter while other binds write claims this pod shares. Each such claim will be allocated on its
        bind's node, so only that node can pass; there the pod's other claims are decided as usual (the
        written claim's devices are reserved for that bind) and this pod's bind waits for the write.
        Upstream's PreFilter rejects every node instead, unless both pods are in one pod group."""
        failed = {name: reason for name in node_names if (reason := _elsewhere(in_flight, name))}
        here = [name for name in node_names if name not in failed]
        outcome = FilterOutcome()
        if here:
            outcome = self._filter(
                pod, here, nodes, quick=quick, select=select, choose=choose, beside=frozenset(in_flight)
            )
        outcome.failed.update(failed)
        return outcome

    def claims_written_for_others(self, pod: Mapping[str, Any], node_name: str) -> tuple[str, frozenset[str]]:
        """For explain, as filter decides (``_filter_beside``): why ``node_name`` fails while other binds
        write claims the pod shares ('' when it does not), and those claims (left out on their node)."""
        in_flight = self._pod_in_flight(pod)
        return _elsewhere(in_flight, node_name), frozenset(in_flight)

    def _await_claim_writes(self, key: str) -> None:
        """Wait, at most ``bind_wait`` seconds, while other pods' binds write claims this pod shares: once
        written, this bind only adds the pod to them. Raises BindError when the wait runs out (kube-scheduler
        retries the bind)."""
        deadline = time.monotonic() + self.bind_wait
        while in_flight := self._pod_in_flight(self.state.get("Pod", key)):
            left = deadline - time.monotonic()
            if left <= 0:
                claim, (holder, node) = next(iter(in_flight.items()))
                raise BindError(
                    f"claim {claim} is being allocated for pod {holder} on node {node}; "
                    "retry once that bind is done"
                )
            self._bind_done.wait(left)

    def _pod_in_flight(self, pod: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
        """``_in_flight`` for all of the pod's claims; {} for a missing pod or claim (filter and the bind
        plan report those)."""
        if pod is None:
            return {}
        try:
            return self._in_flight(pod, state_pod_claims(self.state, pod))
        except ClaimNotReady:
            return {}

    def _kept(self, uid: str, node: str) -> tuple[_Decision, ExtendedClaim | None] | None:
        """The pod's current decision for ``node`` from its last filter, or None if it is outdated."""
        view = self._pods.get(uid)
        if view is None:
            return None
        found = view.private.get(node)
        if found is None and view.shared:
            shared = self._decisions.get(view.shape, {}).get(node)
            found = (shared, None) if shared is not None else None
        if found is None or found[0].version != self.state.inventory.node_version(node):
            return None
        return found

    def _unusable_claim(self, allocated: list[PodClaim]) -> tuple[PodClaim, str] | None:
        """The first allocated claim that can never be bound, and why. Raises InvalidInputError for a
        malformed ``allocationTimestamp``."""
        now = datetime.now(UTC)
        for pc in allocated:
            why = unusable_reason(
                pc.claim, self.state.gates, self.binding_timeout_seconds, now, f"ResourceClaim {pc.key}"
            )
            if why:
                return pc, why
        return None

    def _allocated_claims_reason(self, allocated: list[PodClaim], node: Node, pod: Mapping[str, Any]) -> str:
        uid = (pod.get("metadata") or {}).get("uid")
        for pc in allocated:
            status = pc.claim.get("status") or {}
            selector = status["allocation"].get("nodeSelector")
            where = f"ResourceClaim {pc.key}: nodeSelector"
            if selector and not parse_node_selector(selector, where).matches(node):
                return f"claim {pc.key} is allocated for other nodes"
            if (
                requires_declared_feature(status["allocation"])
                and DECLARED_FEATURE not in node.declared_features
            ):
                return f"claim {pc.key} allocation requires {DECLARED_FEATURE} feature on the node"
            reserved = status.get("reservedFor") or []
            if len(reserved) >= MAX_RESERVED_FOR and not reserves(reserved, str(uid), pc.consumer):
                return f"claim {pc.key} is reserved for {MAX_RESERVED_FOR} consumers already"
        return ""

    # --- prioritize -------------------------------------------------------------------------------

    def _select(self, node: Node, claims: list[Claim]) -> list[dict[str, Any]] | None:
        """Allocate ``claims`` on ``node`` with the device-selection policy. Raises like the allocator."""
        selection = select(
            self.state.inventory, self.selectors, node, claims, self.device_selection, self.scoring.topology
        )
        return selection.results

    def _score(self, node: Node, claims: list[Claim], results: list[dict[str, Any]]) -> int:
        """0..10 for the allocation ``results`` of ``claims`` on ``node`` (``allocator.scoring``)."""
        if not results:
            return 0
        inventory = self.state.inventory
        return score_allocation(inventory, self.selectors, node, claims, results, self.scoring).score

    def prioritize(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """A 0..10 score for each of ``node_names``, in order, from the decisions kept by filter (choosing
        devices on nodes it passed by counts, and deciding nodes it has not seen)."""
        with self.lock:
            return self._prioritize(pod, node_names, nodes, quick=False)

    def prioritize_quick(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[int] | None:
        """``prioritize`` when the lock is free and ``QUICK_DEVICE_CHECKS`` allow what remains
        (scores kept from filter; devices chosen on the few nodes it passed by counts); else None, and the
        caller runs ``prioritize`` on a worker thread."""
        return self._quickly(lambda: self._prioritize(pod, node_names, nodes, quick=True))

    def _quickly(self, decide: Callable[[], _T]) -> _T | None:
        """``decide()`` under the lock if it is free at once; None when it is not, or ``decide`` raised
        _NotQuick (nothing of the pod's was changed then)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return decide()
        except _NotQuick:
            return None
        finally:
            self.lock.release()

    def _prioritize(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None,
        *,
        quick: bool,
    ) -> list[int]:
        pod = self._with_state_status(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or pod_key(pod))
        scores = self._current_scores(uid, node_names)
        places = _unscored(scores)
        if places:
            missing = [node_names[i] for i in places]
            self._filter(pod, missing, nodes, quick=quick, select=True)
            for i, score in zip(places, self._kept_scores(uid, missing), strict=True):
                scores[i] = score or 0  # 0: the node does not fit, or could not be decided in time
        return scores  # type: ignore[return-value]

    def _current_scores(self, uid: str, node_names: Sequence[str]) -> list[int | None]:
        """Each node's score (in order), from the shape's answer when nothing changed since it (one dict
        read per node, at C speed: kube-scheduler sends every passing node), else node by node."""
        view = self._pods.get(uid)
        last = self._outcomes.get(view.shape) if view is not None and view.shared else None
        inventory = self.state.inventory
        if (
            last is None
            or last.seq != inventory.change_seq
            or last.global_version != inventory.node_versions().global_version
        ):
            return self._kept_scores(uid, node_names)
        scores = list(map(last.passed.get, node_names))
        places = _unscored(scores)
        if places:
            for i, score in zip(places, self._kept_scores(uid, [node_names[i] for i in places]), strict=True):
                scores[i] = score
        return scores

    def _kept_scores(self, uid: str, node_names: Sequence[str]) -> list[int | None]:
        """The score of each node's current decision for the pod, in order (None where it must be decided
        again, or the node was passed by counts and not scored yet)."""
        view = self._pods.get(uid)
        if view is None:
            return [None] * len(node_names)
        shared = self._decisions.get(view.shape, {}) if view.shared else {}
        versions = self.state.inventory.node_versions()
        scores: list[int | None] = []
        for name in node_names:
            found = view.private.get(name)
            decision = found[0] if found is not None else shared.get(name)
            current = decision is not None and decision.version == (
                versions.global_version,
                versions.get(name),
            )
            scores.append(decision.score if current else None)  # type: ignore[union-attr]
        return scores

    # --- bind -------------------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> list[str]:
        """Allocate on ``node_name`` and write it through the binder; returns the devices this bind
        allocated, ``<claim key>: <driver>/<pool>/<device>`` (none for a retried bind of a pod already
        there, or one whose claims were all allocated). Raises BindError; then nothing is written and the
        devices are free again. Either way the outcome goes to ``bind_log``."""
        key = f"{namespace}/{name}"
        try:
            devices = self._bind(key, uid, node_name)
        except Exception as e:
            with self.lock:
                self.bind_log.record(key, uid, node_name, str(e))
            raise
        with self.lock:
            self.bind_log.record(key, uid, node_name, "")
        return devices

    def _bind(self, key: str, uid: str, node_name: str) -> list[str]:
        started = self._start_bind_once_indexed(key, uid, node_name)
        if started is None:
            return []
        plan, token, allocating = started
        written = False
        try:
            self.binder.bind(plan)
            written = True
        finally:
            with self.lock:
                self.state.inventory.release(token)
                self._binding.pop(key, None)
                for claim in allocating:
                    self._inflight.pop(claim, None)
                    if written and not _has_allocation(self.state.get("ResourceClaim", claim)):
                        self._unseen[claim] = (key, node_name)
                while len(self._unseen) > MAX_UNSEEN:
                    del self._unseen[next(iter(self._unseen))]
                self._bind_done.notify_all()
        return [f"{key}: {'/'.join(device.id)}" for key, device in _planned_devices(plan)]

    def _start_bind_once_indexed(
        self, key: str, uid: str, node_name: str
    ) -> tuple[BindPlan, str, list[str]] | None:
        """``_start_bind``, waiting up to ``index_lag_seconds`` (without the lock, so the watches can
        apply events) while the index does not show a claim the pod names yet."""
        deadline = time.monotonic() + self.index_lag_seconds
        while True:
            try:
                with self.lock:
                    return self._start_bind(key, uid, node_name)
            except ClaimNotReady as e:
                if time.monotonic() >= deadline:
                    # Usually the resourceclaim controller has not created the claim yet: a bind error
                    # makes kube-scheduler put the pod back in its queue, so nothing is lost.
                    raise BindError(
                        f"pod {key} is not ready to bind: {e}; kube-scheduler will retry the pod"
                    ) from None
            time.sleep(INDEX_POLL_SECONDS)

    def _start_bind(self, key: str, uid: str, node_name: str) -> tuple[BindPlan, str, list[str]] | None:
        """Under the lock: the bind's plan (after other binds writing claims it shares are done), with its
        devices reserved under a token of this attempt and its claims marked in flight; None when the pod
        is already on that node. Raises ClaimNotReady while the index lacks a claim the pod names."""
        if key in self._binding:
            raise BindError(f"pod {key}: another bind of this pod is in progress (to {self._binding[key]})")
        self._await_claim_writes(key)
        plan = self._bind_plan(key, uid, node_name)
        if plan is None:
            return None
        token = f"bind:{next(self._attempts)}:{key}"
        allocating = [pc.key for pc, allocation in plan.claims if allocation is not None]
        self._inflight.update(dict.fromkeys(allocating, key))
        self._binding[key] = node_name
        self.state.inventory.reserve(token, self._plan_devices(plan))
        return plan, token, allocating

    def _bind_plan(self, key: str, uid: str, node_name: str) -> BindPlan | None:
        """The decision for a bind, or None when the pod is already on that node (a retried bind)."""
        pod = self.state.get("Pod", key)
        if pod is None:
            raise BindError(f"pod {key} not found")
        if self.state.node(node_name) is None:
            raise BindError(f"node {node_name} is not known to dra-extender")
        pod_uid = str((pod.get("metadata") or {}).get("uid") or key)
        if uid and pod_uid != uid:
            raise BindError(f"pod {key}: UID {uid} does not match the current pod")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound == node_name:
                return None
            raise BindError(f"pod {key} is already assigned to node {bound!r}")
        claims = state_pod_claims(self.state, pod)
        pending_claims = [pc for pc in claims if not _is_allocated(pc)]
        pending_keys = tuple(pc.key for pc in pending_claims)
        view = self._pods.get(pod_uid)
        kept = self._kept(pod_uid, node_name)
        if (
            kept is None
            or view is None
            or view.claims != pending_keys
            or view.shape != _shape(pending_claims)
            or view.pod_spec != _spec_key(pod)
            or not kept[0].results
            or kept[0].score is None
        ):
            # Something changed since filter (or filter never ran here), or filter decided by counts or
            # from an equivalent node: decide again, choosing the devices.
            outcome = self._filter(pod, [node_name], None, select=True, choose=True)
            if outcome.error:
                raise BindError(outcome.error)
            if node_name not in outcome.passed:
                reason = outcome.failed.get(node_name) or outcome.unresolvable.get(node_name)
                raise BindError(f"pod {key} does not fit on node {node_name}: {reason}")
            kept = self._kept(pod_uid, node_name)  # None for a pod without claims
        self._forget(pod_uid)
        decision, ext = kept if kept is not None else (None, None)
        pending = iter(decision.results or () if decision is not None else ())
        planned = tuple((pc, None if _is_allocated(pc) else next(pending)) for pc in claims)
        extended = None
        if ext is not None:
            # The extended-resource claim is allocated last (upstream's claim store keeps it last).
            extended = ExtendedBind(ext.obj, next(pending), ext.pod_status())
        return BindPlan(pod, node_name, planned, extended)

    @staticmethod
    def _plan_devices(plan: BindPlan) -> tuple[AllocatedDevice, ...]:
        return tuple(device for _, device in _planned_devices(plan))


def _planned_devices(plan: BindPlan) -> list[tuple[str, AllocatedDevice]]:
    """(claim key, device) of every allocation the plan writes, the extended-resource claim last."""
    allocations = [(pc.key, allocation) for pc, allocation in plan.claims if allocation is not None]
    if plan.extended is not None:
        allocations.append((plan.extended.key, plan.extended.allocation))
    return [
        (key, device)
        for key, allocation in allocations
        for device in allocated_devices(allocation, f"ResourceClaim {key}")
    ]


def needs_no_devices(pod: Mapping[str, Any]) -> bool:
    """No pod claims and no resource name with a domain (every extended resource, and so every resource a
    DeviceClass can back, is domain-qualified): the pod fits every node as far as DRA goes."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return False
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        for kind in ("requests", "limits"):
            if any("/" in str(name) for name in resources.get(kind) or {}):
                return False
    return True


def _has_share(results: tuple[dict[str, Any], ...] | None) -> bool:
    """Whether an allocation holds shares of multi-allocatable devices: each share needs its own
    ``shareID``, so such a decision is never handed to a second pod."""
    return any(r.get("shareID") for a in results or () for r in a["devices"]["results"])


def _placeholders(reason: str, claims: list[Claim]) -> str:
    """A reason with the claims' names as placeholders, to be shared by pods with the same claim specs."""
    for index, claim in enumerate(claims):
        reason = reason.replace(f"claim {claim.key},", f"claim \x00{index}\x00,")
    return reason


def _named(reason: str, claims: list[Claim]) -> str:
    """A cached reason with the asking pod's claim names in it."""
    for index, claim in enumerate(claims):
        reason = reason.replace(f"claim \x00{index}\x00,", f"claim {claim.key},")
    return reason


def _quick_enough(inventory: Inventory, node_names: Sequence[str], claims: list[Claim]) -> bool:
    """Whether deciding ``node_names`` stays within ``QUICK_NODES`` and ``QUICK_DEVICE_CHECKS``."""
    if len(node_names) > QUICK_NODES:
        return False
    requests = sum(len(r.alternatives) for claim in claims for r in claim.requests)
    checks = 0
    for name in node_names:
        node = inventory.node(name)
        if node is not None:
            checks += requests * sum(
                len(s.devices) for pool in inventory.pools_for(node) for s in pool.slices
            )
    return checks <= QUICK_DEVICE_CHECKS


def _unscored(scores: list[int | None]) -> list[int]:
    """Where ``scores`` holds None: C-speed scans, as there are thousands of nodes and usually one such."""
    places: list[int] = []
    try:
        while True:
            places.append(scores.index(None, places[-1] + 1 if places else 0))
    except ValueError:
        return places


def _all_named(reasons: dict[str, str], claims: list[Claim]) -> dict[str, str]:
    """Node -> cached reason, with the asking pod's claim names in each (a node list is built at C speed:
    thousands of full nodes share a handful of distinct reasons)."""
    named = {reason: _named(reason, claims) for reason in set(reasons.values())}
    return dict(zip(reasons, map(named.__getitem__, reasons.values()), strict=True))


def _passes_all(node_names: Sequence[str]) -> FilterOutcome:
    """A pod without claims and without extended resources a DeviceClass could back: decided without the
    lock. The candidate list itself is the answer (the encoder recognises it: no copy, no lookups)."""
    return FilterOutcome(passed=node_names if isinstance(node_names, list) else list(node_names))


def _budget_reason(budget: float) -> str:
    return f"dra-extender: filter time budget ({budget:g} s) used up first"


def _digest(data: bytes) -> bytes:
    """16 bytes standing for ``data`` (kept per pod and shape instead of specs of up to megabytes)."""
    return hashlib.blake2b(data, digest_size=16).digest()


def _shape(claims: Sequence[PodClaim]) -> bytes:
    """The claims' specs, canonical: pods whose pending claims have equal specs get equal decisions."""
    return _digest(
        b"\n".join(orjson.dumps(pc.claim.get("spec"), option=orjson.OPT_SORT_KEYS) for pc in claims)
    )


def _spec_key(pod: Mapping[str, Any]) -> bytes:
    return _digest(orjson.dumps(pod.get("spec"), option=orjson.OPT_SORT_KEYS))


def _is_allocated(pc: PodClaim) -> bool:
    return _has_allocation(pc.claim)


def _elsewhere(in_flight: Mapping[str, tuple[str, str]], node_name: str) -> str:
    """Why ``node_name`` cannot use a claim another pod's bind is writing for its own node, or ''."""
    for claim, (holder, node) in in_flight.items():
        if node != node_name:
            return (
                f"claim {claim} is being allocated for pod {holder} on node {node}; only that node can use it"
            )
    return ""


def _has_allocation(claim: Mapping[str, Any] | None) -> bool:
    return bool(((claim or {}).get("status") or {}).get("allocation"))
