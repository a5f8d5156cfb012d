"""ResourceClaim objects as a bind and recovery read and rewrite them: their identity, whether they are
still reserved for a pod, and the bodies that release a pod or drop the delete-protection finalizer. Pure:
no I/O (``app.kube.binder`` and ``app.kube.recovery`` write what these build)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from app.scheduling.binder import FINALIZER, BindError
from app.state.podgroups import reserves

__all__ = [
    "check_claim",
    "check_reserved",
    "meta_of",
    "release_pod",
    "reserves_consumer",
    "split_key",
    "uid_of",
    "without_finalizer",
]


def meta_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(meta_of(obj).get("uid") or "")


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def reserved_for(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in status.get("reservedFor") or () if isinstance(r, Mapping)]


def reserves_consumer(
    status: Mapping[str, Any], pod_uid: str, consumer: Mapping[str, Any] | None = None
) -> bool:
    return reserves(reserved_for(status), pod_uid, consumer)


def check_claim(key: str, claim: Mapping[str, Any], uid: str) -> None:
    """Raises BindError when ``claim`` is no longer the claim ``uid`` (empty: unknown) or is being deleted."""
    meta = meta_of(claim)
    if uid and meta.get("uid") != uid:
        raise BindError(f"ResourceClaim {key} was replaced by a new claim of the same name")
    if meta.get("deletionTimestamp"):
        raise BindError(f"ResourceClaim {key} is being deleted")


def check_reserved(
    key: str,
    claim: Mapping[str, Any],
    uid: str,
    pod_uid: str,
    when: str,
    consumer: Mapping[str, Any] | None = None,
) -> Mapping[str, Any]:
    """``claim``'s status; raises BindError unless it is still claim ``uid``, allocated and reserved for
    pod ``pod_uid`` or ``consumer`` (``when``: words for the error)."""
    check_claim(key, claim, uid)
    status = claim.get("status") or {}
    if not status.get("allocation") or not reserves_consumer(status, pod_uid, consumer):
        raise BindError(f"ResourceClaim {key}: the pod's reservation was removed {when}")
    return status


def release_pod(
    claim: Mapping[str, Any], pod_uid: str, *, deallocate: bool
) -> tuple[dict[str, Any], bool, bool]:
    """The ``/status`` body releasing pod ``pod_uid``: a copy of ``claim`` without the pod in
    ``status.reservedFor`` and, with ``deallocate`` when no consumer is left, without the allocation and
    ``status.devices``. Also whether the pod was reserved and whether the allocation is cleared."""
    status = claim.get("status") or {}
    reserved = reserved_for(status)
    keep = [r for r in reserved if r.get("uid") != pod_uid]
    body = copy.deepcopy(dict(claim))
    new_status = body.setdefault("status", {})
    new_status["reservedFor"] = keep or None
    deallocated = deallocate and not keep and bool(status.get("allocation"))
    if deallocated:
        new_status["allocation"] = None
        new_status["devices"] = None
    return body, len(keep) != len(reserved), deallocated


def without_finalizer(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of ``claim`` without ``FINALIZER`` in ``metadata.finalizers``; None when it is not there."""
    finalizers = list(meta_of(claim).get("finalizers") or ())
    if FINALIZER not in finalizers:
        return None
    body = copy.deepcopy(dict(claim))
    body["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER] or None
    return body
