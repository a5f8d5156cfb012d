"""Devices a bind wrote to a ResourceClaim, kept reserved until the ResourceClaim watch shows the write.

kube-scheduler sends no reserve/unreserve, and filters the next pods while a bind is in flight. While the
bind runs, ``SchedulingService.bind`` reserves its devices (token ``bind:<pod>``) and releases them when the
binder returns. But the write is in the index only once the watch delivers it, which may be later: without
a second reservation a filter in between would see the devices free and give them to another claim.

So after each successful ``status.allocation`` write the binder calls ``hold(claim, devices, stale)``:
``stale`` are the resourceVersions the claim had *before* the write (the index's copy, the finalizer write's
answer, re-reads after conflicts). The first time the index receives a version of that claim that is not
stale (a watch event or a relist), or the claim disappears, the reservation is released: from then on the
claim's own allocation holds the devices (or, after a rollback, nothing does). ``hold`` on a claim the index
already shows at a newer version does nothing (the watch was faster than the binder).

A write the server answered stays reserved however long the watch is silent: the write is there, and
dropping the reservation would hand its devices out again before the index shows them. Only a write whose
outcome is unknown (sent, no answer, and the rollback could not re-read the claim: ``confirmed=False``)
expires after ``ttl`` seconds, with a warning: by then replaced watches (their replay) or a relist would
have shown the write had it landed. ``expire`` is called by the recovery loop.

``fence`` holds the devices of an allocation write a bind rolled back without knowing its outcome (no
answer, or a 5xx): a server that took the request before its client gave up may carry it out later, and
if the rollback found nothing to undo, the claim is still at the version the write was sent with, its
precondition. Each fence holds its devices under a token of its own, apart from ``hold``'s, until the
claim is seen at a newer version than that, by the index or by the rollback itself (``passed``: its
re-read, or the answer to its own write), after which the write fails its precondition; or until the
claim is deleted, or ``FENCE_SECONDS`` pass. Meanwhile even the same claim's next bind takes other
devices.

Not thread-safe by itself: every method runs under the scheduling service's lock (``observe`` is an
informer observer, called with the lock held).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from allocator.deviceuse import AllocatedDevice, written_token
from app.kube.clock import Clock
from app.state.cluster import ClusterState, object_version, version_number

__all__ = ["FENCE_SECONDS", "WrittenReservations"]

log = logging.getLogger(__name__)


FENCE_SECONDS = 90.0
"""How long a fenced write may still be carried out: kube-apiserver stops working on a request at its
``--request-timeout`` (60 s by default), and a write it has not carried out by then it never will."""


@dataclass(frozen=True, slots=True)
class _Fence:
    token: str
    version: int
    since: float


@dataclass(slots=True)
class _Held:
    devices: tuple[AllocatedDevice, ...]
    stale: frozenset[str]
    since: float
    confirmed: bool


def _version(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


class WrittenReservations:
    """Claim key → devices written but not yet seen back. See the module docstring."""

    def __init__(
        self, state: ClusterState, lock: AbstractContextManager[Any], clock: Clock, ttl: float
    ) -> None:
        self.state = state
        self.lock = lock
        self.clock = clock
        self.ttl = ttl
        self._held: dict[str, _Held] = {}
        self._fences: dict[str, list[_Fence]] = {}
        self._fence_ids = itertools.count(1)

    @staticmethod
    def token(key: str) -> str:
        return written_token(key)

    def hold(
        self,
        key: str,
        devices: tuple[AllocatedDevice, ...],
        stale: Iterable[str],
        *,
        created: bool = False,
        confirmed: bool = True,
    ) -> bool:
        """Reserve ``devices`` for claim ``key`` until a non-stale version of it is seen. Returns False (and
        reserves nothing) when the index already has a newer version. ``created``: the bind created the
        claim, so the index may not have it at all yet. ``confirmed``: the server answered the write (else
        the reservation may expire, see the module docstring)."""
        stale_set = frozenset(v for v in stale if v)
        with self.lock:
            current = self.state.get("ResourceClaim", key)
            if current is None and not created:
                return False
            if current is not None and _version(current) not in stale_set:
                return False
            self._held[key] = _Held(devices, stale_set, self.clock.now(), confirmed)
            self.state.inventory.reserve(self.token(key), devices)
            return True

    def fence(self, key: str, devices: tuple[AllocatedDevice, ...], version: str) -> None:
        """Keep ``devices`` reserved for a rolled-back write to claim ``key`` sent with resourceVersion
        ``version`` whose outcome is unknown (see the module docstring). Nothing when the index already
        shows the claim newer: the write can no longer succeed."""
        sent = version_number(version)
        with self.lock:
            if object_version(self.state.get("ResourceClaim", key)) > sent:
                return
            fence = _Fence(f"{self.token(key)}:fence:{next(self._fence_ids)}", sent, self.clock.now())
            self._fences.setdefault(key, []).append(fence)
            self.state.inventory.reserve(fence.token, devices)

    def passed(self, key: str, version: str | None) -> None:
        """A rollback read or wrote claim ``key`` at ``version`` (None: the claim the bind wrote is gone):
        the fences of writes sent with an older version end, those writes can no longer succeed."""
        with self.lock:
            self._moved_on(key, None if version is None else version_number(version))

    def _moved_on(self, key: str, seen: int | None) -> None:
        """Under the lock: claim ``key`` is at version ``seen`` (None: gone); end the fences it passed."""
        if key in self._fences:
            self._end_fences(key, lambda fence: seen is None or seen > fence.version)

    def _end_fences(self, key: str, ended: Callable[[_Fence], bool]) -> None:
        """Under the lock: release the fences of claim ``key`` that have ``ended``."""
        fences = self._fences.get(key, [])
        for fence in [f for f in fences if ended(f)]:
            fences.remove(fence)
            self.state.inventory.release(fence.token)
        if not fences:
            self._fences.pop(key, None)

    def release(self, key: str) -> None:
        with self.lock:
            if self._held.pop(key, None) is not None:
                self.state.inventory.release(self.token(key))

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (lock held): a new version of a held claim, or its deletion, confirms it."""
        if kind != "ResourceClaim":
            return
        self._moved_on(key, None if obj is None else object_version(obj))
        held = self._held.get(key)
        if held is None:
            return
        if obj is None or _version(obj) not in held.stale:
            del self._held[key]
            self.state.inventory.release(self.token(key))

    def expire(self) -> list[str]:
        """Drop reservations of unconfirmed writes older than ``ttl``, and fences older than
        ``FENCE_SECONDS`` (or ``ttl``, when shorter); returns the claim keys of the reservations."""
        now = self.clock.now()
        with self.lock:
            old = [
                key for key, held in self._held.items() if not held.confirmed and now - held.since >= self.ttl
            ]
            for key in old:
                log.warning(
                    "ResourceClaim %s: a write with unknown outcome never showed in the index; "
                    "reservation dropped",
                    key,
                )
                del self._held[key]
                self.state.inventory.release(self.token(key))
            for key in list(self._fences):
                self._end_fences(key, lambda fence: now - fence.since >= min(self.ttl, FENCE_SECONDS))
        return old

    def __contains__(self, key: object) -> bool:
        return key in self._held or key in self._fences

    def keys(self) -> list[str]:
        with self.lock:
            return list(self._held.keys() | self._fences.keys())
