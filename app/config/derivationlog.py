"""Logging cluster-wide derived attribute errors once per attribute, as they change.

In cluster mode the config is installed before the first ResourceSlice arrives, so the errors appear
while slices stream in, and change with every slice revision. ``DerivationLog.report`` logs each
attribute's line (``Inventory.derivation_summary``: device count and an example) when it is new or its
count changed, and once when an attribute stops failing; never one line per device."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any

from allocator.inventory import Inventory

__all__ = ["DerivationLog"]

log = logging.getLogger(__name__)


class DerivationLog:
    """Remembers what was logged last (one line per failing attribute, so bounded by the config)."""

    def __init__(self, inventory: Inventory, lock: AbstractContextManager[Any]) -> None:
        self.inventory = inventory
        self.lock = lock
        self._logged: dict[str, int] = {}

    def report(self) -> None:
        with self.lock:
            counts = self.inventory.derivation_counts()
            lines = dict(zip(counts, self.inventory.derivation_summary(), strict=True))
        for attribute, count in counts.items():
            if self._logged.get(attribute) != count:
                log.error("%s", lines[attribute])
        for attribute in self._logged.keys() - counts.keys():
            log.info("%s: no longer fails on any device", attribute)
        self._logged = counts
