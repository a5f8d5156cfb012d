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
  node; as kube-scheduler's PostFilter, the service deallocates it through the binder when it is reserved for
  nobody or only this pod (an Event on the pod says so: ``app.scheduling.podevents``), and kube-scheduler
  tries the pod again once it sees the claim change.
* prioritize: 0-10 per node from the kept decision (``allocator.scoring``: NUMA and PCIe alignment,
  binpack or spread, the firstAvailable rank), choosing devices first on nodes filter passed by counts;
  devices inside a node are chosen by the device-selection policy (``allocator.alignment``: ``aligned``
  by default, ``first-fit`` for upstream's order).
* bind: decide on the chosen node (the kept decision while it is current), reserve those
  devices in the inventory so concurrent filters treat them as used, and let the ``Binder`` write the
  claims and the pod (``app.scheduling.binder``); the reservation is released once the write is done or
  failed (a failed bind is an Event on the pod). One bind per pod at a time: while it writes, a second
  bind of the pod is refused and a filter of it fails every node (kube-scheduler retries both once its
  ``httpTimeout`` passes), so neither can release the first attempt's reservation or delete the
  extended-resource claim it has just created.

Each node is decided by ``allocator.decide`` (counts, search, device choice, score, reason); this service
keeps the state lookups, the decisions per claims shape (``app.scheduling.decisions``), the lock and the
binder. Its filter half is ``app.scheduling.filtering``, its bind half ``app.scheduling.binding``, the
checks of a pod's claims around the allocator ``app.scheduling.claimrules``.

Decisions hold one lock (the state is a single in-memory index); binder writes happen outside it.
``filter_quick`` / ``prioritize_quick`` are the same decisions for the caller's thread (the event loop):
they give up (None) rather than wait for the lock, search, or decide more than ``QUICK_DEVICE_CHECKS``
allow.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from allocator.decide import FILTER_TIMEOUT, SearchNeeded
from allocator.equivalence import EquivalenceCache
from allocator.model import Claim
from allocator.nodeselector import Node
from allocator.scoring import ScoringConfig
from allocator.selectors import SelectorCache
from app.scheduling.binder import Binder, BindError, ClaimDeleter, ClaimReleaser, StateBinder
from app.scheduling.binding import BIND_WAIT, INDEX_LAG_SECONDS, BindCoordination
from app.scheduling.bindlog import BindLog
from app.scheduling.claimrules import (
    EffectiveClaims,
    admin_access_refusal,
    is_allocated,
    needs_no_devices,
    unusable_claim,
)
from app.scheduling.decisions import (
    DecisionStats,
    FilterOutcome,
    KeptDecision,
    PodView,
    ShapeOutcome,
    unscored,
)
from app.scheduling.extended import PodExtendedResources, pod_extended_resources
from app.scheduling.filtering import FilterDecisions, NotQuick
from app.scheduling.nodefit import fit_node_allocatable
from app.scheduling.podevents import DiscardEvents, PodEvents, deallocated_claim
from app.scheduling.preemptionholds import PreemptionHolds
from app.scheduling.sampling import NodeSampler
from app.state.cluster import ClusterState, node_from_api, object_key
from app.state.podclaims import ClaimNotReady, PodClaim, pod_key, state_pod_claims

__all__ = ["DecisionStats", "EffectiveClaims", "FilterOutcome", "SchedulingService", "needs_no_devices"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

FILTER_TIME_BUDGET = 3.0
"""Seconds one filter call may spend searching. kube-scheduler waits 5 s (default ``httpTimeout``) and
the whole scheduling queue waits with it, so a claim whose search explodes (constraints that can never
be met on big nodes) must not hold the service: nodes not decided in time fail with a reason."""


class SchedulingService(FilterDecisions, BindCoordination):
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
        self._pods: dict[str, PodView] = {}
        """Per pod UID, the latest filter's view (oldest dropped first beyond MAX_KEPT_DECISIONS)."""
        self._kept_count = 0
        """Views plus their private decisions in ``_pods`` (bounded by MAX_KEPT_DECISIONS)."""
        self._decisions: dict[bytes, dict[str, KeptDecision]] = {}
        """Per (claims shape, node): pods with equal pending claim specs (one template) get equal
        decisions on a node whose version is unchanged, so most nodes are decided by one lookup."""
        self._outcomes: dict[bytes, ShapeOutcome] = {}
        """Per claims shape, the last answer for a whole node list, patched node by node afterwards."""
        self._equivalence = EquivalenceCache(state.inventory, selectors)
        """Per (claims shape, node signature): alike nodes share one decision (``allocator.equivalence``),
        so a new shape is decided once per distinct node, not once per node."""
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
        self.filter_timeout: float | None = FILTER_TIMEOUT
        """Seconds one node's search may run before that node fails as timed out (``SchedulingSettings.
        filter_timeout_seconds``, upstream's ``filterTimeout``); set before serving."""
        self.stats = DecisionStats()
        self.binding_timeout_seconds = 600.0
        """kube-scheduler's ``bindingTimeout``: how long allocated devices may wait for their binding
        conditions (``ClusterSettings.binding_timeout_seconds``); set before serving."""
        self.events: PodEvents = DiscardEvents()
        """Where the service's own actions on pods are reported (``app.scheduling.podevents``); set before
        serving in cluster mode."""
        self.preemption_holds = PreemptionHolds(state, self.lock)
        """Devices kept for preemptors (``app.scheduling.preemptionholds``): a pod's own decisions run with
        its hold lifted."""

    def set_policy(
        self,
        device_selection: str,
        scoring: ScoringConfig,
        filter_time_budget: float | None,
        filter_timeout: float | None = FILTER_TIMEOUT,
    ) -> None:
        """Device selection, scoring, the filter time budget (None: ``FILTER_TIME_BUDGET``) and one node's
        search timeout (None: no limit), also while serving (a config reload): decisions kept under the
        previous policy are dropped, so the next filter and bind decide under the new one."""
        with self.lock:
            self.device_selection = device_selection
            self.scoring = scoring
            self.filter_time_budget = FILTER_TIME_BUDGET if filter_time_budget is None else filter_time_budget
            self.filter_timeout = filter_timeout
            self._decisions.clear()
            self._outcomes.clear()
            for uid in list(self._pods):
                self._forget(uid)

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
        that does not parse."""
        allocated = [pc for pc in claims if is_allocated(pc)]
        pending_claims = [pc for pc in claims if not is_allocated(pc)]
        pending = [self.state.parsed_claim(pc.key) for pc in pending_claims]
        return allocated, pending_claims, pending

    def _refusals(self, pending: list[Claim]) -> list[str]:
        """Why the API server would refuse writing the allocations of ``pending`` (an adminAccess claim in a
        namespace without the label): kube-scheduler does not check it, so the nodes are decided as for
        any claim and the reasons of a "no" say it too."""
        return [
            refusal
            for claim in pending
            if any(alt.admin_access for r in claim.requests for alt in r.alternatives)
            and (refusal := admin_access_refusal(self.state, claim.key))
        ]

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

    def filter(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
    ) -> FilterOutcome:
        """Decide each node for ``pod``. ``nodes``: full Node objects when kube-scheduler sent them.
        ``sampler``: the answer may pass on only the sample (``FilterOutcome.sampled``) where that saves
        work; the caller samples the rest (``NodeSampler.sample``). ``names_text``: the names joined by
        newlines when the caller has them so (the wire layer joins them to check them; ``list_key``)."""
        if needs_no_devices(pod):
            return _passes_all(node_names)
        fits_nodes = self._fits_node_allocatable()
        if fits_nodes:
            sampler = None  # the node fit below may drop passing nodes: sample after it (the caller does)
        with self.lock, self.preemption_holds.lifted(pod):
            pod = self._with_state_status(pod)
            outcome = self._filter(pod, node_names, nodes, sampler=sampler, names_text=names_text)
        if outcome.stale_claims and self._delete_stale_claims(outcome.stale_claims):
            # kube-scheduler's PostFilter deleted the claim and the pod is tried again: do that attempt now.
            with self.lock, self.preemption_holds.lifted(pod):
                outcome = self._filter(pod, node_names, nodes, sampler=sampler, names_text=names_text)
        if outcome.unusable is not None:
            self._release_unusable(outcome, pod)
        if fits_nodes and outcome.passed:
            with self.lock:
                fit_node_allocatable(self, pod, outcome, nodes)
        return outcome

    def _fits_node_allocatable(self) -> bool:
        """Whether filter's answer goes through the node-allocatable fit (``app.scheduling.nodefit``): the
        gate is on and some ResourceSlice publishes ``nodeAllocatableResources``."""
        return bool(self.state.gates.DRANodeAllocatableResources and self.state.node_allocatable_slices)

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
            key = object_key("ResourceClaim", claim)
            self.events.record(
                deallocated_claim(pod_key(pod), str(uid or ""), key, claim, outcome.unusable_reason)
            )
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
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
    ) -> FilterOutcome | None:
        """``filter`` when its answer needs no search and few device checks, and the lock is free
        (a pod without devices; the claims shape's answer for this node list patched for the few nodes
        changed since); else None, and the caller runs ``filter`` on a worker thread. Never does I/O."""
        if needs_no_devices(pod):
            return _passes_all(node_names)
        if self._fits_node_allocatable():
            return None  # node fit reads every pod of the node: a worker thread's job

        def decide() -> FilterOutcome:
            asked = self._with_state_status(pod)  # under the lock, like the state it reads
            with self.preemption_holds.lifted(pod):
                return self._filter(
                    asked, node_names, nodes, quick=True, sampler=sampler, names_text=names_text
                )

        outcome = self._quickly(decide)
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
        NotQuick or SearchNeeded (nothing of the pod's was changed then)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return decide()
        except (NotQuick, SearchNeeded):
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
        places = unscored(scores)
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
        places = unscored(scores)
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

    def _unusable_claim(self, allocated: list[PodClaim]) -> tuple[PodClaim, str] | None:
        """The first allocated claim that can never be bound, and why. Raises InvalidInputError for a
        malformed ``allocationTimestamp``."""
        return unusable_claim(allocated, self.state.gates, self.binding_timeout_seconds)


def _passes_all(node_names: Sequence[str]) -> FilterOutcome:
    """A pod without claims and without extended resources a DeviceClass could back: decided without the
    lock. The candidate list itself is the answer (the encoder recognises it: no copy, no lookups)."""
    return FilterOutcome(passed=node_names if isinstance(node_names, list) else list(node_names))
