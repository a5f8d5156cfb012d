"""A short chaos run (``loadtests.chaos_e2e``) on the session's control plane: concurrent binds retried
while they write, kube-apiserver and extender restarts, a proxy's faults and stale watch events. No
device may end in two claims, and no allocation may be left without its bound pod."""

from __future__ import annotations

import asyncio

import pytest

from e2e.workload import Scenario
from loadtests.chaos_e2e import chaos_e2e

pytestmark = pytest.mark.e2e


def test_chaos_leaves_no_double_allocation_and_no_orphan(scenario: Scenario) -> None:
    report = asyncio.run(chaos_e2e(scenario, 12, 5, seed=1, deadline=180, extender="dra-extender-chaos"))
    assert report["rounds"] == 5, report
    assert (report["double_allocations"], report["orphans"], report["internal_errors"]) == ({}, [], []), (
        report
    )
    assert report["pods_bound"] > 0, report
    scenario.notes.append(f"chaos: {report['pods_bound']} of 12 pods bound, {report['faults']}")
