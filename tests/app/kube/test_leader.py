"""``SchedulerLease``: whether this replica's kube-scheduler holds the leader Lease, from a record refreshed
in the background (no request per question), read again once before saying no."""

from __future__ import annotations

import asyncio

from app.kube.client import KubeClient
from app.kube.leader import LeaseRecord, SchedulerLease
from tests.app.kube.conftest import FakeClock
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.app.kube.test_two_replicas import LEASE_NAME, LEASE_NAMESPACE, hold, micro_time

LEASE = f"{LEASE_NAMESPACE}/{LEASE_NAME}"


def lease_reads(api: FakeKubeAPI) -> int:
    return sum(1 for r in api.requests if r.method == "GET" and r.path.endswith(f"/leases/{LEASE_NAME}"))


def tracker(client: KubeClient, clock: FakeClock) -> SchedulerLease:
    return SchedulerLease(client, LEASE, "pod-a", clock=clock)


async def test_held_by_our_scheduler_answers_from_the_last_read(
    api: FakeKubeAPI, client: KubeClient, clock: FakeClock
) -> None:
    hold(api, "pod-a_0f3c", clock.wall())
    lease = tracker(client, clock)
    assert "could not be read (not read yet)" in (lease.refusal() or "")
    await lease.refresh()
    reads = lease_reads(api)
    assert lease.refusal() is None
    assert await lease.refusal_now() is None
    assert lease_reads(api) == reads  # held: no request per question


async def test_another_holder_is_named_after_one_more_read(
    api: FakeKubeAPI, client: KubeClient, clock: FakeClock
) -> None:
    hold(api, "pod-b_77aa", clock.wall())
    lease = tracker(client, clock)
    await lease.refresh()
    refusal = "the leader Lease dra-extender/dra-scheduler is held by 'pod-b_77aa', not by this replica's"
    assert (lease.refusal() or "").startswith(refusal)
    reads = lease_reads(api)
    assert (await lease.refusal_now() or "").startswith(refusal)
    assert lease_reads(api) == reads + 1
    # A holder whose name only starts like ours is another pod's kube-scheduler.
    hold(api, "pod-ab_1", clock.wall())
    assert "held by 'pod-ab_1'" in (await lease.refusal_now() or "")


async def test_a_lease_that_just_moved_here_is_ours_at_the_first_question(
    api: FakeKubeAPI, client: KubeClient, clock: FakeClock
) -> None:
    hold(api, "pod-b_77aa", clock.wall())
    lease = tracker(client, clock)
    await lease.refresh()
    hold(api, "pod-a_0f3c", clock.wall())  # failover: the refresh loop has not run since
    assert lease.refusal() is not None
    assert await lease.refusal_now() is None


async def test_a_lease_not_renewed_within_its_duration_is_held_by_nobody(
    api: FakeKubeAPI, client: KubeClient, clock: FakeClock
) -> None:
    hold(api, "pod-a_0f3c", clock.wall(), duration=15)
    lease = tracker(client, clock)
    await lease.refresh()
    clock.advance(14.5)
    assert lease.refusal() is None
    clock.advance(1)
    expected = (
        "held by 'pod-a_0f3c' (this replica's kube-scheduler (pod-a_...)) was not renewed within its 15s"
    )
    assert expected in (await lease.refusal_now() or "")
    hold(api, "pod-a_0f3c", clock.wall())  # renewed
    assert await lease.refusal_now() is None


async def test_a_failed_read_keeps_the_last_record_until_it_expires(
    api: FakeKubeAPI, client: KubeClient, clock: FakeClock
) -> None:
    hold(api, "pod-a_0f3c", clock.wall(), duration=15)
    lease = tracker(client, clock)
    await lease.refresh()
    api.fail("GET", r"/leases/", 500, times=10)
    await lease.refresh()
    assert lease.refusal() is None
    clock.advance(16)
    assert "was not renewed" in (await lease.refusal_now() or "")


async def test_the_refresh_loop_reads_every_retry_period(
    api: FakeKubeAPI, client: KubeClient, clock: FakeClock
) -> None:
    hold(api, "pod-b_77aa", clock.wall())
    lease = SchedulerLease(client, LEASE, "pod-a", clock=clock, retry_seconds=3.0)
    task = asyncio.create_task(lease.run())
    try:
        hold(api, "pod-a_0f3c", clock.wall())
        while lease.refusal() is not None:
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
    assert set(clock.sleeps) == {3.0}


def test_a_lease_record_reads_the_api_fields() -> None:
    record = LeaseRecord.from_lease(
        {"spec": {"holderIdentity": "h_1", "leaseDurationSeconds": 15, "renewTime": micro_time(100.5)}}
    )
    assert record == LeaseRecord("h_1", 100.5, 15.0)
    assert not record.expired(115.5) and record.expired(115.6)
    # A released Lease (kube-scheduler's ReleaseOnCancel): no holder, one second.
    assert LeaseRecord.from_lease({"spec": {"leaseDurationSeconds": 1}}) == LeaseRecord("", None, 1.0)
    assert LeaseRecord.from_lease({"spec": {"renewTime": "yesterday"}}).renewed is None
    assert LeaseRecord.from_lease({"spec": ["not", "a", "map"]}) == LeaseRecord("", None, None)


async def test_without_a_configured_lease_the_replica_is_the_only_one(client: KubeClient) -> None:
    lease = SchedulerLease(client, None)
    assert lease.refusal() is None
    assert await lease.is_leader()
