"""``KubeBinder``: a bind decision written to the API server the way kube-scheduler's PreBind + Bind do.

Per claim of the plan, in the pod's ``spec.resourceClaims`` order (upstream ``bindClaim``,
extender-protocol.md §5.2), each step with the claim's resourceVersion as precondition:

1. the claim is being deleted → fail; allocating, but the claim already has an allocation → fail ("got
   allocated elsewhere"), unless it is reserved for this very pod (an earlier attempt of this bind wrote
   it: nothing to do, which makes a retried bind idempotent and reuses an allocation left by a crash);
2. allocating and the finalizer ``resource.kubernetes.io/delete-protection`` missing → ``PUT`` the claim
   with it (main resource: ``/status`` drops metadata changes);
3. ``PUT .../status`` with ``status.allocation`` (when allocating) and the pod appended to
   ``status.reservedFor`` as ``{resource: pods, name, uid}``;

a 409 on step 2 or 3 re-reads the claim from the API server (the index may be stale) and starts over, at
most ``CONFLICT_ATTEMPTS`` times (client-go ``retry.DefaultRetry``). Then, for a pod with DRA-backed
extended resources (``BindPlan.extended``), the special claim is created, written like the others, and
``pod.status.extendedResourceClaimStatus`` is patched. Then, with DRADeviceBindingConditions and
DRAResourceClaimDeviceStatus on, when a claim of the pod (allocated now or before) has result entries with
``bindingConditions``, the bind waits as upstream PreBind does (extender-protocol.md §4.2): every
``ClusterSettings.binding_poll_seconds`` it reads those claims until, for each such device, every binding
condition type is ``True`` in the claim's ``status.devices[]`` entry of that (driver, pool, device, shareID);
it fails when one of the device's ``bindingFailureConditions`` is ``True``, when the pod's reservation or
the claim goes away, or after ``binding_timeout_seconds``. The wait has its own budget (not
``bind_timeout_seconds``), runs without the service lock, and the devices stay reserved meanwhile. Last, each
claim of the pod is re-read (it must still have the UID the bind wrote, an allocation and the pod in
``reservedFor``: a claim deleted and recreated under its name fails the bind), but the one whose write was
the last request (its answer is as fresh), and
``POST pods/{name}/binding`` is sent with the pod's UID as precondition; a 409 "already assigned to node
X" is success only when X is the chosen node.

Before anything, a replica whose kube-scheduler does not hold the leader Lease refuses the bind, saying
who holds it (``app.kube.leader``: from the last read of the Lease, read again once before refusing); it
writes nothing, and neither do its filter's claim releases and deletions.

Any failure rolls back what this bind wrote, newest first: the pod status patch, the reservedFor entry and the
allocation (re-read, then ``PUT .../status``), the finalizer it added, the claim it created; the bind answers
``Error``. A write that got no answer after it was sent, a 5xx (which a proxy can give after the server
stored it), or any answer to aiohttp's second try of a PUT whose connection closed before the first was
answered (``KubeAPIError.maybe_done``), may have been carried out: the status write's devices stay held and
its rollback re-reads the claim, the finalizer's rollback drops it if it is there, a pod status patch is
cleared, and the binding's outcome is read from the pod. A write the bind's deadline cuts short may have
been carried out too: the finalizer, the allocation and the pod status patches are recorded before they are
sent, so the rollback covers them (re-reading each claim first), and a binding it cuts short is read back
from the pod. A PodGroup's reservedFor entry and the allocation it holds are every member's, and another
member may run on them: a rollback leaves them, as upstream's Unreserve leaves claims reserved for the
group. A claim found allocated and reserved for the pod where this bind meant to allocate it (a 409
answering aiohttp's second try of a write the server carried out) is taken as this bind's write: held, and
undone by a rollback. Any of these allocation writes may also be carried out after the rollback, its
resourceVersion precondition met when the rollback wrote nothing to the claim: its devices stay held until the
claim changes or kube-apiserver has given up on the request (``WrittenReservations.fence``). When the binding
request may have been carried out and the pod cannot be re-read, nothing is rolled back (a bound pod whose
claims were released could never start): the allocation stays, and recovery (``app.kube.recovery``) either
sees the pod bound or releases it after the grace period.

After each allocation write the devices stay reserved in the index until the ResourceClaim watch shows
the write (``app.kube.reservations``), so filters running meanwhile treat them as used.

``bind`` is synchronous (the ``Binder`` protocol; the API layer runs it in a worker thread) and runs the
writes on the event loop that owns the client (``loop``). One bind per pod at a time: a concurrent bind of
the same pod (kube-scheduler retrying while the first is still writing) fails at once.

The claim bodies (release, finalizer) are ``app.kube.claimbodies``'s, the binding-conditions wait
``app.kube.bindwait``'s, and what a bind wrote with its rollback ``app.kube.bindjournal``'s.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import threading
from collections.abc import AsyncIterator, Container, Mapping
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

from allocator.deviceuse import allocated_devices
from allocator.errors import InvalidInputError
from allocator.nodeselector import Node, parse_node_selector
from app.config.settings import ClusterSettings
from app.kube.bindjournal import CONFLICT_ATTEMPTS, Journal, roll_back
from app.kube.bindwait import Wait, await_binding_conditions
from app.kube.claimbodies import (
    check_claim,
    check_reserved,
    meta_of,
    release_pod,
    reserves_consumer,
    split_key,
    uid_of,
)
from app.kube.client import CORE_PODS, ConflictError, KubeAPIError, NotFoundError, Resource
from app.kube.clock import Clock, SystemClock
from app.kube.leader import SchedulerLease
from app.kube.reservations import WrittenReservations
from app.scheduling.binder import (
    FINALIZER,
    BindError,
    BindPlan,
    ExtendedBind,
    claim_after_bind,
    node_allocatable_statuses,
)
from app.scheduling.bindingconditions import conditioned_results
from app.state.cluster import ClusterState, object_key
from app.state.podclaims import pod_key

__all__ = ["CONFLICT_ATTEMPTS", "KubeBinder"]

log = logging.getLogger(__name__)

_ALREADY_ASSIGNED = re.compile(r'is already assigned to node "([^"]*)"')


class KubeBinder:
    """Writes bind plans to the API server. ``claims``: the ResourceClaim Resource (set after discovery);
    ``loop``: the event loop the client runs on (set when the runtime starts); ``lease``: the kube-scheduler
    Lease that says whether this replica may write (None: the only replica)."""

    def __init__(
        self,
        client: Any,
        state: ClusterState,
        lock: AbstractContextManager[Any],
        reservations: WrittenReservations,
        settings: ClusterSettings,
        *,
        clock: Clock | None = None,
        claims: Resource | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        lease: SchedulerLease | None = None,
    ) -> None:
        self.client = client
        self.lease = lease or SchedulerLease(client, None)
        self.state = state
        self.lock = lock
        self.reservations = reservations
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.claims = claims
        self.loop = loop
        self._inflight: dict[str, str] = {}
        self._inflight_lock = threading.Lock()
        self._claim_writers: dict[str, tuple[asyncio.Lock, int]] = {}
        """Per claim being written: its lock and how many binds hold or await it (dropped at 0)."""

    # --- synchronous entry points (worker threads) --------------------------------------------------------

    def _run(self, coro: Any) -> Any:
        loop = self.loop
        if loop is None or self.claims is None:
            coro.close()
            raise BindError("dra-extender is not connected to the API server yet")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("KubeBinder blocks until the writes are done: call it from a worker thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def bind(self, plan: BindPlan) -> None:
        """Write ``plan``. Raises BindError (everything written rolled back, or left for recovery)."""
        self._check_lease(plan)
        uid = uid_of(plan.pod)
        with self._inflight_lock:
            if uid in self._inflight:
                raise BindError(f"pod {pod_key(plan.pod)}: another bind of this pod is in progress")
            self._inflight[uid] = pod_key(plan.pod)
        try:
            self._run(self.bind_async(plan))
        finally:
            with self._inflight_lock:
                self._inflight.pop(uid, None)

    def _check_lease(self, plan: BindPlan) -> None:
        """Raises BindError unless this replica's kube-scheduler holds the leader Lease; reads the Lease
        only when the last read says it does not."""
        if self.lease.refusal() is None:
            return
        refusal = self._run(self.lease.refusal_now())
        if refusal is not None:
            log.warning("bind pod=%s node=%s refused: %s", pod_key(plan.pod), plan.node, refusal)
            raise BindError(f"not binding pod {pod_key(plan.pod)}: {refusal}; only the active replica binds")

    def in_flight(self) -> set[str]:
        """UIDs of the pods being bound right now."""
        with self._inflight_lock:
            return set(self._inflight)

    def delete_claim(self, key: str, uid: str) -> bool:
        """``ClaimDeleter``: delete ResourceClaim ``key`` if it still has ``uid``; True when it is gone."""
        return bool(self._run(self._delete_claim(key, uid)))

    async def _delete_claim(self, key: str, uid: str) -> bool:
        assert self.claims is not None
        if self.lease.refusal() is not None:
            return False  # a standby writes nothing
        namespace, name = split_key(key)
        try:
            answer = await self.client.delete(self.claims, namespace, name, uid=uid)
        except NotFoundError:
            return True
        except ConflictError:
            return False  # another claim of that name now
        except KubeAPIError as e:
            raise BindError(f"deleting ResourceClaim {key}: {e}") from e
        # A claim with finalizers is only marked for deletion (its answer is the claim itself).
        return not meta_of(answer).get("finalizers")

    def release_claim(self, claim: Mapping[str, Any], pod_uid: str) -> bool:
        """``ClaimReleaser``: what upstream's PostFilter does for a claim that can never be bound."""
        return bool(self._run(self._release_claim(claim, pod_uid)))

    async def _release_claim(self, claim: Mapping[str, Any], pod_uid: str) -> bool:
        assert self.claims is not None
        if self.lease.refusal() is not None:
            return False  # a standby writes nothing
        body, _, deallocated = release_pod(claim, pod_uid, deallocate=True)
        if not deallocated:
            return False  # reserved for another pod as well
        try:
            await self.client.replace(self.claims, body, subresource="status")
        except (ConflictError, NotFoundError):
            return False  # changed or gone since filter looked: the next filter decides again
        except KubeAPIError as e:
            raise BindError(f"deallocating ResourceClaim {object_key('ResourceClaim', claim)}: {e}") from e
        return True

    # --- the bind -----------------------------------------------------------------------------------------

    async def bind_async(self, plan: BindPlan) -> None:
        """The writes of ``plan`` (see the module docstring). Raises BindError."""
        journal = Journal([])
        try:
            async with self.clock.timeout(self.settings.bind_timeout_seconds):
                for pod_claim, allocation in plan.claims:
                    # A wait for this claim's turn, or a read of it, comes after the last write.
                    journal.fresh = ""
                    async with self._writing(pod_claim.key):
                        consumer = pod_claim.consumer
                        await self._bind_claim(
                            pod_claim.key, pod_claim.claim, allocation, plan, journal, consumer=consumer
                        )
                if plan.extended is not None:
                    await self._bind_extended(plan.extended, plan, journal)
                await self._patch_node_allocatable(plan, journal)
                if not journal.waits:
                    await self._check_before_binding(plan, journal, {journal.fresh})
                    await self._post_binding(plan, journal)
            if journal.waits:
                assert self.claims is not None
                await await_binding_conditions(
                    self.client, self.claims, self.clock, self.settings, plan, journal.waits
                )
                # The binding gets a budget of its own after the wait.
                async with self.clock.timeout(self.settings.bind_timeout_seconds):
                    # The wait's last poll has just read its claims.
                    await self._check_before_binding(plan, journal, {wait.key for wait in journal.waits})
                    await self._post_binding(plan, journal)
        except (BindError, KubeAPIError, TimeoutError) as e:
            if (
                isinstance(e, TimeoutError)
                and journal.binding_sent
                and await self._binding_landed(plan, journal)
            ):
                return  # the deadline cut the binding short after the server had bound the pod
            message = (
                str(e)
                if not isinstance(e, TimeoutError)
                else (f"the writes took longer than {self.settings.bind_timeout_seconds}s")
            )
            if journal.outcome_unknown:
                log.error(
                    "bind pod=%s node=%s: %s; outcome unknown, writes left for recovery",
                    pod_key(plan.pod),
                    plan.node,
                    message,
                    extra={"pod": pod_key(plan.pod), "node": plan.node, "reason": message},
                )
                raise BindError(f"pod {pod_key(plan.pod)}: {message} (outcome unknown)") from e
            assert self.claims is not None
            await roll_back(self.client, self.claims, self.reservations, plan, journal)
            raise BindError(f"pod {pod_key(plan.pod)}: {message}") from e

    async def _fresh(self, key: str) -> dict[str, Any]:
        assert self.claims is not None
        namespace, name = split_key(key)
        try:
            claim: dict[str, Any] = await self.client.get(self.claims, namespace, name)
        except NotFoundError as e:
            raise BindError(f"ResourceClaim {key} was deleted") from e
        return claim

    @asynccontextmanager
    async def _writing(self, key: str) -> AsyncIterator[None]:
        """One bind at a time writes claim ``key``. Pods sharing a claim are bound in parallel, and each
        write carries the claim's resourceVersion: unordered, every bind but one conflicts, re-reads and
        conflicts again (hundreds of pods sharing a claim ran out of attempts on a real API server). In
        turn, a bind re-reads at most once."""
        lock, users = self._claim_writers.get(key) or (asyncio.Lock(), 0)
        self._claim_writers[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._claim_writers[key]
            if users == 1:
                del self._claim_writers[key]
            else:
                self._claim_writers[key] = (lock, users - 1)

    async def _bind_claim(
        self,
        key: str,
        known: Mapping[str, Any],
        allocation: dict[str, Any] | None,
        plan: BindPlan,
        journal: Journal,
        *,
        created: bool = False,
        consumer: Mapping[str, Any] | None = None,
    ) -> None:
        """The finalizer, then allocation and reservedFor (the pod, or ``consumer``: its PodGroup), retried
        on conflicts; the caller holds ``_writing(key)``."""
        assert self.claims is not None
        pod_uid = uid_of(plan.pod)
        devices = allocated_devices(allocation, f"ResourceClaim {key}") if allocation else ()
        # The index holds v1; writes must carry the claim as the server serves it.
        claim = dict(known) if self.claims.version == "v1" or created else await self._fresh(key)
        uid = uid_of(known)
        stale = {str(meta_of(known).get("resourceVersion") or "")}
        last: ConflictError | None = None
        for attempt in range(CONFLICT_ATTEMPTS):
            if attempt:
                claim = await self._fresh(key)
            meta = meta_of(claim)
            stale.add(str(meta.get("resourceVersion") or ""))
            check_claim(key, claim, uid)
            status = claim.get("status") or {}
            if status.get("allocation"):
                if reserves_consumer(status, pod_uid, consumer):
                    self._check_node(key, status["allocation"], plan.node)
                    if allocation is not None:
                        # This bind's write, answered 409 or an error after the server carried it out
                        # (aiohttp sends a PUT again on a dropped kept-alive connection), or an earlier
                        # attempt's the index does not show yet: held and rolled back as this bind's.
                        found = status["allocation"]
                        self._took(journal, key, uid_of(claim) or uid, found, stale, created, consumer)
                    self._note_wait(journal, key, uid_of(claim) or uid, status["allocation"], consumer)
                    journal.reserved.append((key, uid_of(claim) or uid, consumer))
                    return
                if allocation is not None:
                    raise BindError(f"ResourceClaim {key} got allocated elsewhere in the meantime")
                # A shared claim the index saw allocated may have been re-allocated since: it must still
                # admit this node before the pod joins reservedFor.
                self._check_node(key, status["allocation"], plan.node)
            elif allocation is None:
                raise BindError(f"ResourceClaim {key} was deallocated in the meantime")
            written = journal.entry(key, uid_of(claim) or uid)
            written.created = written.created or created
            written.consumer_uid = str((consumer or {}).get("uid") or "")
            try:
                if allocation is not None and FINALIZER not in (meta.get("finalizers") or ()):
                    body = copy.deepcopy(claim)
                    body["metadata"]["finalizers"] = [*(meta.get("finalizers") or ()), FINALIZER]
                    # Recorded before it is sent (a write cancelled in flight may be stored): the rollback
                    # re-reads the claim and drops the finalizer only if it is there.
                    added_before, written.finalizer_added = written.finalizer_added, True
                    try:
                        claim = await self.client.replace(self.claims, body)
                    except KubeAPIError as e:
                        if not e.maybe_done:
                            written.finalizer_added = added_before
                        raise
                    stale.add(str(meta_of(claim).get("resourceVersion") or ""))
                body = claim_after_bind(claim, allocation, plan.pod, self.state.gates, consumer)
                # Recorded before it is sent, as the finalizer: the rollback re-reads the claim and removes
                # only the pod's own entry (a PodGroup's entry and allocation are every member's, and it
                # leaves them).
                before = written.status_written, written.allocated
                written.devices = devices
                written.sent_version = str(meta_of(body).get("resourceVersion") or "")
                written.unconfirmed = True  # until answered: even a PodGroup's write may land late
                written.status_written, written.allocated = True, allocation is not None
                unanswered: KubeAPIError | None = None
                try:
                    await self.client.replace(self.claims, body, subresource="status")
                except KubeAPIError as e:
                    if isinstance(e, ConflictError) and e.resent:
                        # aiohttp's second try met a claim moved past this write's version: the first try
                        # may have been carried out, never later. Held and undone by a rollback like any
                        # write (recorded above); the conflict retry's re-read finds it if it was.
                        written.unconfirmed = False
                        if devices:
                            self.reservations.hold(key, devices, stale, created=created)
                        raise
                    if isinstance(e, ConflictError) or not e.maybe_done:
                        written.status_written, written.allocated = before
                        written.unconfirmed = False
                        raise
                    # Maybe written: roll back (re-read first) or, if that fails, keep the devices held.
                    unanswered = e
                written.unconfirmed = unanswered is not None
                if devices:
                    self.reservations.hold(key, devices, stale, created=created, confirmed=unanswered is None)
                if unanswered is not None:
                    raise unanswered
                self._note_wait(journal, key, written.uid, body["status"]["allocation"], consumer)
                journal.reserved.append((key, written.uid, consumer))
                journal.fresh = key
                return
            except ConflictError as e:
                last = e
                log.debug("ResourceClaim %s: conflict (attempt %d): %s", key, attempt + 1, e)
        raise BindError(f"ResourceClaim {key}: still conflicting after {CONFLICT_ATTEMPTS} attempts: {last}")

    def _took(
        self,
        journal: Journal,
        key: str,
        uid: str,
        allocation: Mapping[str, Any],
        stale: set[str],
        created: bool,
        consumer: Mapping[str, Any] | None,
    ) -> None:
        """Claim ``key`` is found allocated and reserved for the pod (or ``consumer``, its PodGroup) where
        this bind meant to allocate it: its devices held until the index shows it and, when the entry is
        the pod's own, recorded as this bind's write, which its rollback undoes (a PodGroup's entry is
        every member's, as in ``_bind_claim``)."""
        if consumer is None:
            written = journal.entry(key, uid)
            written.status_written = written.allocated = True
        devices = allocated_devices(allocation, f"ResourceClaim {key}")
        if devices:
            self.reservations.hold(key, devices, stale, created=created)

    def _note_wait(
        self,
        journal: Journal,
        key: str,
        uid: str,
        allocation: Mapping[str, Any],
        consumer: Mapping[str, Any] | None,
    ) -> None:
        """Remember claim ``key`` for the binding-conditions wait if its allocation needs one."""
        gates = self.state.gates
        if not (gates.DRADeviceBindingConditions and gates.DRAResourceClaimDeviceStatus):
            return  # upstream waits only with both gates on
        results = conditioned_results(allocation)
        if results:
            journal.waits.append(Wait(key, uid, results, consumer))

    def _check_node(self, key: str, allocation: Mapping[str, Any], node: str) -> None:
        selector = allocation.get("nodeSelector")
        if not selector:
            return
        with self.lock:
            known = self.state.node(node) or Node(node, {})
        try:
            admits = parse_node_selector(selector, f"ResourceClaim {key}: nodeSelector").matches(known)
        except InvalidInputError:
            admits = False
        if not admits:
            raise BindError(f"ResourceClaim {key} is allocated for other nodes than {node}")

    async def _patch_node_allocatable(self, plan: BindPlan, journal: Journal) -> None:
        """DRANodeAllocatableResources: ``pod.status.nodeAllocatableResourceClaimStatuses`` before the
        binding, as upstream's PreBind (the kubelet sizes the pod's cgroups from it)."""
        try:
            statuses = node_allocatable_statuses(self.state, plan)
        except InvalidInputError as e:
            raise BindError(str(e)) from e
        if not statuses:
            return
        # Cleared with an empty list, not null: it says "cleared" to a reader that knows the field.
        await self._patch_pod_status(plan, journal, "nodeAllocatableResourceClaimStatuses", statuses, [])

    async def _patch_pod_status(
        self, plan: BindPlan, journal: Journal, status_field: str, value: Any, cleared: Any
    ) -> None:
        """Set one field of the pod's status; the rollback sets it to ``cleared`` unless the server
        certainly refused the patch (not ``KubeAPIError.maybe_done``)."""
        namespace, name = split_key(pod_key(plan.pod))
        journal.fresh = ""
        # Recorded before it is sent: the bind's deadline cancels a patch in flight, which may be stored.
        journal.pod_status[status_field] = cleared
        try:
            await self.client.patch(
                CORE_PODS, namespace, name, {"status": {status_field: value}}, subresource="status"
            )
        except KubeAPIError as e:
            if not e.maybe_done:
                del journal.pod_status[status_field]
            raise

    async def _bind_extended(self, extended: ExtendedBind, plan: BindPlan, journal: Journal) -> None:
        """KEP-5004: create the extended-resource claim, allocate it like the others, point the pod at it."""
        assert self.claims is not None
        if self.claims.version not in ("v1", "v1beta2"):
            raise BindError(
                f"extended-resource claims need resource.k8s.io/v1 or v1beta2 (served: {self.claims.version})"
            )
        body = copy.deepcopy(dict(extended.claim))
        body["apiVersion"] = self.claims.api_version
        body["kind"] = "ResourceClaim"
        body.pop("status", None)
        namespace = str(meta_of(body).get("namespace") or "default")
        journal.fresh = ""
        created = await self.client.create(self.claims, namespace, body)
        key = f"{namespace}/{meta_of(created).get('name')}"
        journal.entry(key, uid_of(created)).created = True
        async with self._writing(key):
            await self._bind_claim(key, created, extended.allocation, plan, journal, created=True)
        await self._patch_pod_status(plan, journal, "extendedResourceClaimStatus", extended.pod_status, None)

    async def _check_before_binding(self, plan: BindPlan, journal: Journal, read: Container[str]) -> None:
        """Re-read every claim of the pod (but those just ``read`` or written) right before the binding. A
        claim deleted and recreated under its name (or released) meanwhile would let the pod start without
        its devices: raises BindError."""
        pod_uid = uid_of(plan.pod)
        for key, uid, consumer in journal.reserved:
            if key in read:
                continue
            check_reserved(key, await self._fresh(key), uid, pod_uid, "before the pod was bound", consumer)

    async def _post_binding(self, plan: BindPlan, journal: Journal) -> None:
        meta = meta_of(plan.pod)
        namespace, name = split_key(pod_key(plan.pod))
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": plan.node},
        }
        journal.binding_sent = True
        try:
            await self.client.create(CORE_PODS, namespace, body, name=name, subresource="binding")
        except ConflictError as e:
            match = _ALREADY_ASSIGNED.search(e.message)
            if match and match.group(1) == plan.node:
                return  # a retried bind: bound by an earlier attempt
            raise BindError(f"binding to node {plan.node}: {e.message}") from e
        except KubeAPIError as e:
            if e.maybe_done and await self._binding_landed(plan, journal):
                return
            raise

    async def _binding_landed(self, plan: BindPlan, journal: Journal) -> bool:
        """After a binding that may have been carried out: whether the server has the pod bound to the
        plan's node (read, not assumed). When the pod cannot be read (but for a 404: it is gone), the
        outcome is unknown (marked in ``journal``): False."""
        namespace, name = split_key(pod_key(plan.pod))
        try:
            pod = await self.client.get(CORE_PODS, namespace, name)
        except NotFoundError:
            return False  # deleted: whatever it was bound to, its claims are released
        except KubeAPIError:
            journal.outcome_unknown = True
            return False
        return uid_of(pod) == uid_of(plan.pod) and (pod.get("spec") or {}).get("nodeName") == plan.node

    # --- rollback -----------------------------------------------------------------------------------------
