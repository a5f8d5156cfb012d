"""Stable UIDs for objects that come without one: Pods and PodGroups of a state directory (so the owner
references of their generated claims hold), generated ResourceClaims, the claims extended resources stand
for, the scratch objects of an explanation. The same kind, namespace and name give the same UID on every
load and in every process."""

from __future__ import annotations

import uuid

__all__ = ["stable_uid"]

_UID_NAMESPACE = uuid.UUID(
    "6f1d3c9e-2b8a-5c47-9e0d-5a3b7c1e4f20"
)  # fixed: uids must not change between loads


def stable_uid(kind: str, namespace: str | None, name: str) -> str:
    """A deterministic UUID string for an object that has none (same inputs → same uid on every load)."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace or ''}/{name}"))
