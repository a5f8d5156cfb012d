"""Filter, prioritize and bind for one pod, on the cluster state (the extender's verbs, transport-free).

The service composes the steps of kube-scheduler's DynamicResources plugin, each a plain class, with one
``CycleState`` (``app.scheduling.cycle``) carried between them:

* PreFilter, ``ClaimsGate`` (``app.scheduling.claimsgate``): the pod's claims resolved, and the rules
  that decide every node at once (pod bound already, bind in flight, a claim missing, written by another
  bind, left from an earlier attempt, unusable, a gate off, admin access refused);
* Filter and Score, ``NodeDecider`` (``app.scheduling.nodedecider``): each node decided by
  ``allocator.decide`` with what the step wants of it (``allocator.decide.Want``: a verdict, a score, the
  devices), decisions kept in one ``DecisionCache`` (``app.scheduling.decisioncache``) per claims shape
  and node while the node's inventory version is unchanged, shared by pods with equal claim specs;
* PostFilter, here: an extended-resource claim left from an earlier attempt fails every node, so the
  service deletes it (binder permitting) and filters once more, the attempt kube-scheduler would make
  next; an allocated claim that can never be bound is deallocated through the binder when it is reserved
  for nobody or only this pod (an Event on the pod says so: ``app.scheduling.podevents``), and
  kube-scheduler tries the pod again once it sees the claim change;
* the node-allocatable fit after Filter (``app.scheduling.nodefit``, gate DRANodeAllocatableResources);
* Reserve and PreBind, ``BindCoordinator`` (``app.scheduling.binding``) with the binds in flight
  (``app.scheduling.inflight``): devices chosen on the node, reserved in the inventory while the
  ``Binder`` writes the claims and the pod.

prioritize gives 0-10 per node from the kept decision (``allocator.scoring``: NUMA and PCIe alignment,
binpack or spread, the firstAvailable rank), choosing devices first on nodes filter passed by counts;
devices inside a node are chosen by the device-selection policy (``allocator.alignment``: ``aligned``
by default, ``first-fit`` for upstream's order).

Decisions hold one lock (the state is a single in-memory index); binder writes happen outside it.
``filter_quick`` / ``prioritize_quick`` are the same decisions for the caller's thread (the event loop):
they give up (None) rather than wait for the lock, search, or decide more than ``QUICK_DEVICE_CHECKS``
allow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from allocator.decide import FILTER_TIMEOUT, Policy, SearchNeeded, Want
from allocator.scoring import LOWEST_FINE_SCORE, FineScore, ScoringConfig, points_of
from allocator.selectors import SelectorCache
from app.scheduling.answerfirst import AnswerFirst
from app.scheduling.binder import Binder, BindError, ClaimDeleter, ClaimReleaser, StateBinder
from app.scheduling.binding import BindCoordinator, Bound
from app.scheduling.bindlog import BindLog
from app.scheduling.claimrules import EffectiveClaims, needs_no_devices
from app.scheduling.claimsgate import ClaimsGate, pod_uid, with_refusals
from app.scheduling.decisioncache import DecisionCache
from app.scheduling.decisions import DecisionStats, FilterOutcome, KeptDecision, PodView, unscored
from app.scheduling.inflight import BindsInFlight, elsewhere
from app.scheduling.nodeadmission import admits
from app.scheduling.nodedecider import FILTER_TIME_BUDGET, QUICK_LOCK_WAIT_SECONDS, NodeDecider, NotQuick
from app.scheduling.nodefit import fit_node_allocatable
from app.scheduling.podevents import PodEvents, deallocated_claim
from app.scheduling.preemptionholds import PreemptionHolds
from app.scheduling.sampling import NodeSampler
from app.state.cluster import ClusterState, object_key
from app.state.podclaims import pod_key

__all__ = ["DecisionStats", "EffectiveClaims", "FilterOutcome", "SchedulingService", "needs_no_devices"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

Obj = Mapping[str, Any]


class SchedulingService:
    """The extender's decisions over a ``ClusterState`` (module docstring)."""

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
        self.lock = threading.RLock()
        self.answer_first = AnswerFirst()
        """Marked by the HTTP layer while it answers filter and prioritize; the informers, the binder's
        API requests and binds step aside meanwhile (``app.scheduling.answerfirst``)."""
        self.binds = BindsInFlight(self.lock)
        self.gate = ClaimsGate(state, self.binds)
        self.decisions = DecisionCache()
        policy = Policy(device_selection, scoring or ScoringConfig(), FILTER_TIMEOUT)
        self.decider = NodeDecider(state, selectors, self.decisions, policy, FILTER_TIME_BUDGET)
        self.binding = BindCoordinator(
            state,
            self.lock,
            self.binds,
            self.decider,
            lambda pod, node, quick: self._filter(pod, [node], None, Want.DEVICES, quick=quick),
            binder or StateBinder(state, self.lock),
            self.answer_first.step_aside,
        )

    # Settings, set before serving (or through ``set_policy`` while serving).

    @property
    def device_selection(self) -> str:
        """``aligned`` or ``first-fit`` (``allocator.alignment``)."""
        return self.decider.policy.device_selection

    @device_selection.setter
    def device_selection(self, value: str) -> None:
        self.decider.policy = dataclasses.replace(self.decider.policy, device_selection=value)

    @property
    def scoring(self) -> ScoringConfig:
        """Scoring policy and weights (``allocator.scoring``)."""
        return self.decider.policy.scoring

    @property
    def filter_timeout(self) -> float | None:
        """Seconds one node's search may run before that node fails as timed out (``SchedulingSettings.
        filter_timeout_seconds``, upstream's ``filterTimeout``); None: no limit."""
        return self.decider.policy.filter_timeout

    @property
    def filter_time_budget(self) -> float:
        """Seconds one filter call may spend deciding (``FILTER_TIME_BUDGET``)."""
        return self.decider.time_budget

    @filter_time_budget.setter
    def filter_time_budget(self, value: float) -> None:
        self.decider.time_budget = value

    @property
    def preemption_holds(self) -> PreemptionHolds:
        """Devices held for preemptors (``app.scheduling.preemptionholds``): filter and bind lift a pod's
        own hold; ``app.kube.runtime`` replaces it with one on the running clock."""
        return self.binding.preemption_holds

    @preemption_holds.setter
    def preemption_holds(self, value: PreemptionHolds) -> None:
        self.binding.preemption_holds = value

    @property
    def binding_timeout_seconds(self) -> float:
        """kube-scheduler's ``bindingTimeout`` (``ClaimsGate.binding_timeout_seconds``)."""
        return self.gate.binding_timeout_seconds

    @binding_timeout_seconds.setter
    def binding_timeout_seconds(self, value: float) -> None:
        self.gate.binding_timeout_seconds = value

    @property
    def binder(self) -> Binder:
        """Writes binds, and (``ClaimDeleter``, ``ClaimReleaser``) PostFilter's deletions and releases."""
        return self.binding.binder

    @binder.setter
    def binder(self, value: Binder) -> None:
        self.binding.binder = value

    @property
    def events(self) -> PodEvents:
        """Where the service's own actions on pods are reported (``app.scheduling.podevents``)."""
        return self.binding.events

    @events.setter
    def events(self, value: PodEvents) -> None:
        self.binding.events = value

    @property
    def bind_log(self) -> BindLog:
        """The last bind outcome per pod, for explain."""
        return self.binding.bind_log

    @property
    def stats(self) -> DecisionStats:
        """How filter decided nodes, for ``/metrics``."""
        return self.decider.stats

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
            self.decider.policy = Policy(device_selection, scoring, filter_timeout)
            self.decider.time_budget = (
                FILTER_TIME_BUDGET if filter_time_budget is None else filter_time_budget
            )
            self.decisions.clear()

    def kept_decisions(self) -> int:
        """Per-pod views plus their private decisions kept (at most ``DecisionCache.max_kept``): metrics."""
        return self.decisions.kept_count

    # The extender's verbs.

    def filter(
        self,
        pod: Obj,
        node_names: Sequence[str],
        nodes: Mapping[str, Obj] | None = None,
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
        *,
        attempt: bool = True,
    ) -> FilterOutcome:
        """Decide each node for ``pod``. ``nodes``: full Node objects when kube-scheduler sent them.
        ``sampler``: the answer may pass on only the sample (``FilterOutcome.sampled``) where that saves
        work; the caller samples the rest (``NodeSampler.sample``). ``names_text``: the names joined by
        newlines when the caller has them so (the wire layer joins them to check them; ``list_key``).
        ``attempt``: False for the verdicts alone (explain), without what a scheduling attempt does besides:
        the pod's hold is not ended, a leftover extended-resource claim not deleted, no claim
        deallocated."""
        if needs_no_devices(pod):
            return _passes_all(node_names)
        fits_nodes = self._fits_node_allocatable()
        if fits_nodes:
            sampler = None  # the node fit below may drop passing nodes: sample after it (the caller does)
        with self.lock, self.preemption_holds.lifted(pod):
            if attempt:
                self._new_attempt(pod)
            pod = self.gate.with_state_status(pod)
            outcome = self._filter(
                pod, node_names, nodes, Want.VERDICT, sampler=sampler, names_text=names_text
            )
        if attempt and outcome.stale_claims and self._delete_stale_claims(outcome.stale_claims):
            # kube-scheduler's PostFilter deleted the claim and the pod is tried again: do that attempt now.
            with self.lock, self.preemption_holds.lifted(pod):
                outcome = self._filter(
                    pod, node_names, nodes, Want.VERDICT, sampler=sampler, names_text=names_text
                )
        if attempt and outcome.unusable is not None:
            self._release_unusable(outcome, pod)
        if fits_nodes and outcome.passed:
            with self.lock:
                fit_node_allocatable(self, pod, outcome, nodes)
        return outcome

    def filter_quick(
        self,
        pod: Obj,
        node_names: Sequence[str],
        nodes: Mapping[str, Obj] | None = None,
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
            self._new_attempt(pod)
            asked = self.gate.with_state_status(pod)  # under the lock, like the state it reads
            with self.preemption_holds.lifted(pod):
                return self._filter(
                    asked, node_names, nodes, Want.VERDICT, quick=True, sampler=sampler, names_text=names_text
                )

        outcome = self._quickly(decide)
        # PostFilter's deletion or release is a write: it belongs on a worker thread.
        if outcome is None or outcome.stale_claims or outcome.unusable is not None:
            return None
        return outcome

    def fits_outside(self, pod: Obj, asked: Sequence[str]) -> str | None:
        """A node of the cluster not in ``asked`` whose devices fit ``pod`` and which kube-scheduler's
        cheap node filters admit (``app.scheduling.nodeadmission``), or None: whether a pod filter
        rejected on all of kube-scheduler's sample would fit elsewhere (``app.scheduling.sampling``)."""
        with self.lock, self.preemption_holds.lifted(pod):
            left_out = set(asked)
            others = [
                name
                for name, node in self.state.objects["Node"].items()
                if name not in left_out and admits(pod, node)
            ]
            if not others:
                return None
            outcome = self._filter(self.gate.with_state_status(pod), others, None, Want.VERDICT)
        return outcome.passed[0] if outcome.passed else None

    def prioritize(
        self, pod: Obj, node_names: Sequence[str], nodes: Mapping[str, Obj] | None = None
    ) -> list[int]:
        """A 0..10 score for each of ``node_names``, in order, from the decisions kept by filter (choosing
        devices on nodes it passed by counts, and deciding nodes it has not seen)."""
        with self.lock, self.preemption_holds.lifted(pod):
            return points_of(cast(list[FineScore], self._score(pod, node_names, nodes, quick=False)))

    def prioritize_quick(
        self, pod: Obj, node_names: Sequence[str], nodes: Mapping[str, Obj] | None = None
    ) -> list[int] | None:
        """``prioritize`` when the lock is free and ``QUICK_DEVICE_CHECKS`` allow what remains
        (scores kept from filter; devices chosen on the few nodes it passed by counts); else None, and the
        caller runs ``prioritize`` on a worker thread."""

        def decide() -> list[int]:
            with self.preemption_holds.lifted(pod):
                return points_of(cast(list[FineScore], self._score(pod, node_names, nodes, quick=True)))

        return self._quickly(decide)

    def rank(
        self,
        pod: Obj,
        node_names: Sequence[str],
        nodes: Mapping[str, Obj] | None = None,
        *,
        deadline: float,
        quick: bool = False,
    ) -> list[FineScore | None] | None:
        """For filter ranking the nodes it passed (``device_scoring: filter``, ``app.scheduling.besttier``):
        their fine scores (``allocator.scoring``: ``prioritize``'s before rounding), deciding until
        ``deadline`` (``time.monotonic``: the end of the filter call's time budget, the wait for the lock
        included), with None for a node not scored by then, which is passed on rather than ranked last.
        ``quick``: as ``prioritize_quick`` (None when it gives up)."""

        def decide() -> list[FineScore | None]:
            seconds = deadline - time.monotonic()
            with self.preemption_holds.lifted(pod):
                return self._score(pod, node_names, nodes, quick=quick, not_scored=None, seconds=seconds)

        if quick:
            return self._quickly(decide)
        with self.lock:
            return decide()

    def scored_attempt(self, pod: Obj) -> PodView | None:
        """The pod's decisions its prioritize scored from, taken right after scoring: ``hold_best`` holds
        only while they are still the pod's (no new attempt, no bind since)."""
        return self.decisions.view(pod_uid(pod))

    def hold_best(
        self, pod: Obj, node_names: Sequence[str], scores: Sequence[int], attempt: PodView | None
    ) -> None:
        """After prioritize's answer ``scores`` for ``node_names`` has gone to kube-scheduler (or filter's
        passing only the best, with their fine scores): the pod's bind planned on the node scored strictly
        best and its devices held until the bind (``BindCoordinator.hold_best``), when the lock is free
        within ``QUICK_LOCK_WAIT_SECONDS``, choosing the devices there is quick and ``attempt``
        (``scored_attempt``) is still the pod's.
        Planning is about half of a warm prioritize's work; done after the answer, it overlaps
        kube-scheduler's own work before the bind (picking the node, its Reserve and Permit plugins, the
        next pod's filter plugins) instead of lengthening its cycle."""
        key, uid = pod_key(pod), pod_uid(pod)
        self._quickly(lambda: self.binding.hold_best(key, uid, node_names, scores, attempt))

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> list[str]:
        """``bind_outcome``'s devices: those this bind allocated."""
        return self.bind_outcome(namespace, name, uid, node_name).devices

    @contextlib.contextmanager
    def reserving_early(self, namespace: str, name: str, uid: str, node_name: str) -> Iterator[None]:
        """Around a bind's ``bind_outcome`` on a worker thread: Reserve on the caller's thread first if that
        is quick (``BindCoordinator.reserve_early``), and release what the bind did not take up once the
        block ends."""
        reservation = self.binding.reserve_early(namespace, name, uid, node_name)
        try:
            yield
        finally:
            if reservation is not None:
                self.binding.drop_early(namespace, name, uid, node_name, reservation)

    def bind_outcome(self, namespace: str, name: str, uid: str, node_name: str) -> Bound:
        """Reserve on ``node_name`` and write it through the binder (``BindCoordinator.bind``); returns
        what it did. Raises BindError; then nothing is written and the devices are free again."""
        return self.binding.bind(namespace, name, uid, node_name)

    # For explain, the node-allocatable fit, preemption and the informers.

    def effective_claims(
        self, pod: Obj, node_name: str, nodes: Mapping[str, Obj] | None = None
    ) -> EffectiveClaims:
        """The claims ``pod`` needs on ``node_name``, the extended-resource claim included.

        Raises ClaimNotReady (a claim is missing, being deleted, not the pod's, or an extended-resource
        claim is left from an earlier attempt) or AllocatorError (a claim or the pod is invalid).
        """
        with self.lock:
            return self.gate.effective_claims(pod, node_name, nodes)

    def choose_devices(self, pod: Obj, node_names: Sequence[str], nodes: Mapping[str, Obj] | None) -> None:
        """Filter ``node_names`` for ``pod`` with the devices chosen on each (``Want.DEVICES``), kept for
        ``kept_decision`` and the bind; the caller holds the lock."""
        self._filter(pod, node_names, nodes, Want.DEVICES)

    def kept_decision(self, pod: Obj, node_name: str) -> KeptDecision | None:
        """The pod's current decision on ``node_name`` from its last filter, or None; the caller holds the
        lock."""
        kept = self.decider.kept(pod_uid(pod), node_name)
        return kept[0] if kept is not None else None

    def claims_written_for_others(self, pod: Obj, node_name: str) -> tuple[str, frozenset[str]]:
        """For explain, as filter decides: why ``node_name`` fails while other binds write claims the pod
        shares ('' when it does not), and those claims (left out on their node)."""
        in_flight = self.binds.claims_of_pod(self.state, pod)
        return elsewhere(in_flight, node_name), frozenset(in_flight)

    def observe(self, kind: str, key: str, obj: Obj | None) -> None:
        """Informer observer (lock held): the watch shows a claim a finished bind wrote, or its deletion;
        a pod held for at prioritize is deleted, recreated or bound."""
        self.binds.observe(kind, key, obj)
        self.binding.holds.observe(kind, key, obj)

    # The cycle.

    def _filter(
        self,
        pod: Obj,
        node_names: Sequence[str],
        nodes: Mapping[str, Obj] | None,
        want: Want,
        *,
        quick: bool = False,
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
        seconds: float | None = None,
    ) -> FilterOutcome:
        """PreFilter, then Filter of the nodes left (under the lock); ``seconds``: the time a score may take
        (``NodeDecider.filter``). ``quick``: raise NotQuick or SearchNeeded (before changing anything of
        the pod's) rather than search or decide more than ``QUICK_DEVICE_CHECKS`` allow."""
        cycle = self.gate.pre_filter(pod, node_names, nodes)
        if isinstance(cycle, FilterOutcome):
            return cycle
        if cycle.beside:
            # Only the node of the binds writing the pod's claims can pass: the others fail, and the
            # sample and the names' text are for a list this filter does not decide.
            node_names = [name for name in node_names if name not in cycle.elsewhere]
            sampler, names_text = None, None
        outcome = self.decider.filter(
            cycle, node_names, want, quick=quick, sampler=sampler, names_text=names_text, seconds=seconds
        )
        outcome = with_refusals(outcome, cycle.refusals)
        outcome.failed.update(cycle.elsewhere)
        return outcome

    def _score(
        self,
        pod: Obj,
        node_names: Sequence[str],
        nodes: Mapping[str, Obj] | None,
        *,
        quick: bool,
        not_scored: FineScore | None = LOWEST_FINE_SCORE,
        seconds: float | None = None,
    ) -> list[FineScore | None]:
        """Each node's fine score (``allocator.scoring``) from the kept decisions, deciding (``Want.SCORE``)
        the nodes without one within ``seconds`` (None: the filter time budget); ``not_scored`` for a node
        that does not fit or was not decided in time.
        Nothing is held: the caller that answers kube-scheduler holds the best node's devices once the
        answer is out (``hold_best``)."""
        pod = self.gate.with_state_status(pod)
        uid = pod_uid(pod)
        key = pod_key(pod)
        self.binding.holds.end(key)  # scored with its own devices free, as filter decided it
        scores = self.decider.scores(uid, node_names)
        places = unscored(scores)
        if places:
            missing = [node_names[i] for i in places]
            self._filter(pod, missing, nodes, Want.SCORE, quick=quick, seconds=seconds)
            for i, score in zip(places, self.decider.kept_scores(uid, missing), strict=True):
                scores[i] = not_scored if score is None else score
        return scores

    def _new_attempt(self, pod: Obj) -> None:
        """Under the lock, as filter starts a pod's cycle: its last attempt ended without a bind, so a
        hold from that attempt's prioritize ends (and every hold whose time is up)."""
        holds = self.binding.holds
        holds.end(pod_key(pod))
        holds.expire()

    def _quickly(self, decide: Callable[[], _T]) -> _T | None:
        """``decide()`` under the lock if it is free within ``QUICK_LOCK_WAIT_SECONDS``; None when it is
        not, or ``decide`` raised NotQuick or SearchNeeded (nothing of the pod's was changed then)."""
        if not self.lock.acquire(timeout=QUICK_LOCK_WAIT_SECONDS):
            return None
        try:
            return decide()
        except (NotQuick, SearchNeeded):
            return None
        finally:
            self.lock.release()

    def _fits_node_allocatable(self) -> bool:
        """Whether filter's answer goes through the node-allocatable fit (``app.scheduling.nodefit``): the
        gate is on and some ResourceSlice publishes ``nodeAllocatableResources``."""
        return bool(self.state.gates.DRANodeAllocatableResources and self.state.node_allocatable_slices)

    # PostFilter.

    def _delete_stale_claims(self, claims: list[tuple[str, str]]) -> bool:
        """Delete leftover extended-resource claims through the binder; False if it cannot or failed."""
        binder = self.binder
        if not isinstance(binder, ClaimDeleter):
            return False
        try:
            with self.answer_first.waiting_on_background():  # the answer waits on these API requests
                return all(binder.delete_claim(key, uid) for key, uid in claims)
        except Exception:
            log.exception("deleting leftover extended-resource claims %s failed", [k for k, _ in claims])
            return False

    def _release_unusable(self, outcome: FilterOutcome, pod: Obj) -> None:
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

    def _release(self, claim: Obj, uid: str) -> bool:
        binder = self.binder
        if not isinstance(binder, ClaimReleaser):
            return False  # offline: no driver sets binding conditions, nothing to release for
        try:
            with self.answer_first.waiting_on_background():  # the answer waits on this API request
                return binder.release_claim(claim, uid)
        except BindError:
            log.exception("deallocating unusable ResourceClaim %s failed", object_key("ResourceClaim", claim))
            return False


def _passes_all(node_names: Sequence[str]) -> FilterOutcome:
    """A pod without claims and without extended resources a DeviceClass could back: decided without the
    lock. The candidate list itself is the answer (the encoder recognises it: no copy, no lookups)."""
    return FilterOutcome(passed=node_names if isinstance(node_names, list) else list(node_names))
