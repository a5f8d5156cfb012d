"""Events on pods (``app.kube.events``, ``app.scheduling.podevents``) against the fake API server, which
refuses what kube-apiserver refuses in a new events.k8s.io/v1 Event: the body of an Event, repeats joining
a series, a series ending after its window, the per-pod spam filter, the write bucket and the bounded
queue (on a stepped clock: no real waits), failed writes; then each action that leaves one: a failed
bind, a deallocated unusable claim, a released orphaned allocation."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.kube.client import KubeClient
from app.kube.events import EventLimits, EventRecorder
from app.scheduling.podevents import PodEvent
from tests.app.kube.conftest import DRIVER, NS, add_pod, bind, eventually, seed_cluster
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.app.kube.test_binding_conditions import FAILED, set_conditions
from tests.app.kube.test_binding_conditions import add_pod as add_conditioned_pod
from tests.app.kube.test_binding_conditions import seed as seed_conditioned
from tests.app.kube.test_recovery import crash_after_status_write
from tests.app.kube.test_unusable_claims import allocate, filter_p, now, synced

EVENTS = f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
START = datetime(2026, 12, 6, 5, 0, 0, 123456, tzinfo=UTC)


class SteppedClock:
    """Virtual time only: ``sleep`` moves it forward at once (and is recorded)."""

    def __init__(self) -> None:
        self.virtual = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.virtual

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.virtual += seconds
        await asyncio.sleep(0)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


class Wall:
    """Wall time for ``eventTime``: START plus the stepped clock's progress."""

    def __init__(self, clock: SteppedClock) -> None:
        self.clock = clock

    def __call__(self) -> datetime:
        return START + timedelta(seconds=self.clock.virtual - 1000.0)


def event(
    note: str = "binding to node n1: it broke", pod: str = "p", reason: str = "FailedBinding"
) -> PodEvent:
    return PodEvent(NS, pod, f"uid-{pod}", "Warning", reason, "Binding", note)


@pytest.fixture
def stepped() -> SteppedClock:
    return SteppedClock()


def recorder_for(client: KubeClient, clock: SteppedClock, **limits: Any) -> EventRecorder:
    return EventRecorder(
        client, "dra-extender-host-a", clock=clock, wall=Wall(clock), limits=EventLimits(**limits)
    )


def stored(api: FakeKubeAPI) -> list[dict[str, Any]]:
    return sorted(
        api.store.get(("events.k8s.io", "events"), {}).values(), key=lambda e: e["metadata"]["name"]
    )


def event_writes(api: FakeKubeAPI) -> list[str]:
    return [r.method for r in api.requests if r.path.startswith(EVENTS)]


async def test_an_event_is_written_as_events_k8s_io_v1_defines_it(api, client, stepped):
    recorder = recorder_for(client, stepped)
    recorder.record(event())
    await recorder.flush()
    [written] = stored(api)
    assert written["metadata"]["name"] == f"p.{int(START.timestamp() * 1e9):x}"
    assert {k: v for k, v in written.items() if k not in ("metadata", "apiVersion", "kind")} == {
        "eventTime": "2026-12-06T05:00:00.123456Z",
        "reportingController": "dra-extender",
        "reportingInstance": "dra-extender-host-a",
        "action": "Binding",
        "reason": "FailedBinding",
        "type": "Warning",
        "note": "binding to node n1: it broke",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": "p", "uid": "uid-p"},
    }
    assert written["apiVersion"] == "events.k8s.io/v1" and written["metadata"]["namespace"] == NS


async def test_repeats_join_one_series_and_coalesce_into_one_write(api, client, stepped):
    recorder = recorder_for(client, stepped)
    for _ in range(3):
        recorder.record(event())
        stepped.virtual += 10
    await recorder.flush()
    [written] = stored(api)
    # Three occurrences before the first write: one Event, created with its series.
    assert written["series"] == {"count": 3, "lastObservedTime": "2026-12-06T05:00:20.123456Z"}
    recorder.record(event())
    recorder.record(event())
    await recorder.flush()
    assert event_writes(api) == ["POST", "PATCH"]
    [written] = stored(api)
    assert written["series"]["count"] == 5
    assert written["eventTime"] == "2026-12-06T05:00:00.123456Z"  # the first occurrence's


async def test_another_note_or_pod_is_another_event(api, client, stepped):
    recorder = recorder_for(client, stepped)
    recorder.record(event())
    recorder.record(event(note="binding to node n2: it broke"))
    recorder.record(event(pod="q"))
    await recorder.flush()
    assert event_writes(api) == ["POST", "POST", "POST"]
    assert sorted(e["note"] + " " + e["regarding"]["name"] for e in stored(api)) == [
        "binding to node n1: it broke p",
        "binding to node n1: it broke q",
        "binding to node n2: it broke p",
    ]


async def test_a_series_ends_after_its_window_without_repeats(api, client, stepped):
    recorder = recorder_for(client, stepped, series_window_seconds=360)
    recorder.record(event())
    stepped.virtual += 359
    recorder.record(event())  # within the window: count 2
    stepped.virtual += 360
    recorder.record(event())  # 360 s after the last occurrence: a new Event
    await recorder.flush()
    counts = [(e.get("series") or {}).get("count", 1) for e in stored(api)]
    assert counts == [2, 1]


async def test_the_spam_filter_drops_new_events_of_one_pod_beyond_its_burst(api, client, stepped):
    recorder = recorder_for(client, stepped, pod_burst=3, pod_refill_seconds=300)
    for i in range(4):
        recorder.record(event(note=f"attempt {i}"))
    recorder.record(event(pod="q"))  # another pod has its own bucket
    recorder.record(event(note="attempt 0"))  # a repeat of a written Event is no new Event
    assert recorder.dropped == {"pod-rate": 1}
    stepped.virtual += 300  # one token back
    recorder.record(event(note="attempt 4"))
    recorder.record(event(note="attempt 5"))
    assert recorder.dropped == {"pod-rate": 2}
    await recorder.flush()
    mine = [e["note"] for e in stored(api) if e["regarding"]["name"] == "p"]
    assert sorted(mine) == ["attempt 0", "attempt 1", "attempt 2", "attempt 4"]


async def test_writes_are_paced_by_a_token_bucket(api, client, stepped):
    recorder = recorder_for(client, stepped, writes_per_second=2, write_burst=2)
    for i in range(5):
        recorder.record(event(pod=f"p{i}"))
    await recorder.flush()
    assert len(stored(api)) == 5
    # Two at once (the burst), then one every half second.
    assert stepped.sleeps == [0.5, 0.5, 0.5]


async def test_the_queue_is_bounded(api, client, stepped):
    recorder = recorder_for(client, stepped, queue_size=2)
    for i in range(3):
        recorder.record(event(pod=f"p{i}"))
    assert recorder.dropped == {"queue-full": 1}
    await recorder.flush()
    assert [e["regarding"]["name"] for e in stored(api)] == ["p0", "p1"]


async def test_the_series_and_pod_buckets_kept_are_bounded(api, client, stepped):
    recorder = recorder_for(client, stepped, max_series=2)
    for pod in ("a", "b", "c", "a"):  # a is forgotten when c comes: its repeat is a new Event
        recorder.record(event(pod=pod))
        await recorder.flush()
    assert event_writes(api) == ["POST"] * 4


async def test_a_failed_write_is_dropped_and_the_next_occurrence_writes_the_event(api, client, stepped):
    recorder = recorder_for(client, stepped)
    api.fail("POST", r"/events$", 500, message="etcd hiccup")
    recorder.record(event())
    await recorder.flush()  # does not raise
    assert recorder.dropped == {"write-failed": 1} and stored(api) == []
    recorder.record(event())
    await recorder.flush()
    [written] = stored(api)
    assert written["series"]["count"] == 2


async def test_an_event_gone_from_the_api_server_is_written_anew(api, client, stepped):
    recorder = recorder_for(client, stepped)
    recorder.record(event())
    await recorder.flush()
    [first] = stored(api)
    api.remove("Event", NS, first["metadata"]["name"])  # kube-apiserver's --event-ttl
    recorder.record(event())
    await recorder.flush()
    assert event_writes(api) == ["POST", "PATCH", "POST"]
    assert [e["series"]["count"] for e in stored(api)] == [2]


async def test_a_long_note_and_a_long_pod_name_fit_the_api_limits(api, client, stepped):
    recorder = recorder_for(client, stepped)
    long_name = "p" * 253
    recorder.record(event(note="ü" * 1000, pod=long_name))  # 2000 bytes
    await recorder.flush()
    [written] = stored(api)  # the fake refuses a note over 1024 bytes and a name over 253 characters
    assert written["note"] == "ü" * 510 + "..."
    assert len(written["metadata"]["name"]) == 253 and written["regarding"]["name"] == long_name


async def test_record_from_another_thread_wakes_the_writer(api, client, stepped):
    recorder = recorder_for(client, stepped)
    task = asyncio.create_task(recorder.run())
    try:
        await asyncio.sleep(0)
        await asyncio.to_thread(recorder.record, event())
        await eventually(lambda: stored(api))
    finally:
        task.cancel()


# --- the actions ------------------------------------------------------------------------------------------


def events_of(api: FakeKubeAPI, reason: str) -> list[dict[str, Any]]:
    return [e for e in stored(api) if e["reason"] == reason]


async def test_a_failed_bind_leaves_an_event_naming_the_claim_and_device(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime(identity="host-a")
    api.fail("POST", r"pods/p/binding$", 409, message='pod p is already assigned to node "n2"')
    error = await bind(runtime, "p", "n1")
    assert error == f'pod {NS}/p: binding to node n1: pod p is already assigned to node "n2"'
    [written] = await eventually(lambda: events_of(api, "FailedBinding"))
    assert written["type"] == "Warning" and written["action"] == "Binding"
    assert written["reportingInstance"] == "dra-extender-host-a"
    assert written["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": NS,
        "name": "p",
        "uid": f"uid-pod-{NS}-p",
    }
    # aligned selection on n1 (gpu-0, gpu-1, nothing else in use) takes the first device
    assert written["note"] == (
        f"binding to node n1 with ResourceClaim {NS}/p-gpu ({DRIVER}/n1/gpu-0): {error}"
    )


async def test_a_bind_failing_before_its_plan_names_the_pods_claims(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    error = await bind(runtime, "p", "n9")
    assert error == "node n9 is not known to dra-extender"
    [written] = await eventually(lambda: events_of(api, "FailedBinding"))
    assert written["note"] == f"binding to node n9 with ResourceClaim {NS}/p-gpu: {error}"


async def test_deallocating_an_unusable_claim_leaves_an_event(api, start_runtime):
    seed_conditioned(api)
    add_conditioned_pod(api)
    allocate(api, stamp=now())
    set_conditions(api, attached="False", failed="True")
    runtime = await start_runtime()
    await synced(runtime, lambda s: s.get("devices"))
    await filter_p(runtime)
    [written] = await eventually(lambda: events_of(api, "DeallocatedClaim"))
    assert (written["type"], written["action"], written["regarding"]["name"]) == (
        "Warning",
        "Deallocating",
        "p",
    )
    assert written["note"] == (
        f"deallocated ResourceClaim {NS}/p-gpu ({DRIVER}/n1/gpu-0): it cannot be bound: device "
        f"{DRIVER}/n1/gpu-0: binding failure condition {FAILED} is True (reason: FabricError; message: "
        "no path to the node); the pod can be scheduled again"
    )


async def test_releasing_an_orphaned_allocation_leaves_an_event(api, start_runtime, clock):
    seed_cluster(api)
    add_pod(api, "p")
    crash_after_status_write(api, "p")
    runtime = await start_runtime()
    assert await runtime.releaser.sweep() == []
    clock.advance(301)
    assert await runtime.releaser.sweep() == [f"{NS}/p-gpu"]
    [written] = await eventually(lambda: events_of(api, "ReleasedOrphanedAllocation"))
    assert (written["type"], written["action"], written["regarding"]["uid"]) == (
        "Normal",
        "Releasing",
        f"uid-pod-{NS}-p",
    )
    assert written["note"] == (
        f"released ResourceClaim {NS}/p-gpu ({DRIVER}/n1/gpu-0) (deallocated): allocated for this pod, "
        "which was not bound within 300s (a bind that never finished)"
    )
