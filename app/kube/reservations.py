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

``fence`` holds the devices of an allocation write the rollback found missing while the claim was still at
the version the write was sent with, and which the rollback did not change: a server that took the
request before its client gave up may still carry it out, its precondition met. The hold ends at the
first newer version of the claim (that write, or any other change, after which the write fails its
precondition), or after ``ttl``.

Not thread-safe by itself: every method runs under the scheduling service's lock (``observe`` is an
informer observer, called with the lock held).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from allocator.deviceuse import AllocatedDevice, written_token
from app.kube.clock import Clock
from app.state.cluster import ClusterState, object_version, version_number

__all__ = ["WrittenReservations"]

log = logging.getLogger(__name__)


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
        """Keep ``devices`` reserved for claim ``key``, which a rolled-back allocation write left at
        ``version`` (its precondition: the write, unanswered, may still be carried out), until the index
        shows a newer version or ``ttl`` passes. Whatever changes the claim first, the write itself or
        another, ends the window: after that the write cannot succeed."""
        with self.lock:
            self.release(key)
            current = self.state.get("ResourceClaim", key)
            if object_version(current) > version_number(version):
                return  # changed since: the write fails its precondition
            # The index's own version too, when the watch has not shown ``version`` yet.
            stale = frozenset({version, _version(current)} if current is not None else {version})
            self._held[key] = _Held(devices, stale, self.clock.now(), confirmed=False)
            self.state.inventory.reserve(self.token(key), devices)

    def release(self, key: str) -> None:
        with self.lock:
            if self._held.pop(key, None) is not None:
                self.state.inventory.release(self.token(key))

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (lock held): a new version of a held claim, or its deletion, confirms it."""
        if kind != "ResourceClaim":
            return
        held = self._held.get(key)
        if held is None:
            return
        if obj is None or _version(obj) not in held.stale:
            del self._held[key]
            self.state.inventory.release(self.token(key))

    def expire(self) -> list[str]:
        """Drop reservations of unconfirmed writes older than ``ttl``; returns their claim keys."""
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
        return old

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def keys(self) -> list[str]:
        with self.lock:
            return list(self._held)
