"""A bind's Reserve made as the bind arrives (``BindCoordinator.reserve_early``): taken up by the bind's
thread only while the pod and its claims are unchanged, released by the request that made it and only
that one, never waiting on the service lock on the event loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from app.config.settings import Settings
from app.http.api import create_app
from app.scheduling.binder import BindError, BindPlan
from app.scheduling.service import SchedulingService
from tests.app.test_api import (
    NS,
    _args,
    _bind,
    _client,
    _post,
    _with_second_one_gpu_pod,
    _worker_threads_held,
)
from tests.signalling import held_by_another_thread

UID = f"uid-pod-{NS}-p-one"


def _allocated(service: SchedulingService, claim: str) -> list[tuple[str, str]]:
    allocation = ((service.state.get("ResourceClaim", f"{NS}/{claim}") or {}).get("status") or {}).get(
        "allocation"
    )
    return [(r["pool"], r["device"]) for r in ((allocation or {}).get("devices") or {}).get("results", [])]


def _nothing_held(service: SchedulingService) -> None:
    assert not service.state.inventory.reservations()
    assert service.binds.node_of(f"{NS}/p-one") is None


def _chosen_on_n2(service: SchedulingService) -> None:
    """p-one's devices on n2 chosen and kept, as prioritize leaves them for the bind."""
    with service.lock:
        service.choose_devices(service.state.get("Pod", f"{NS}/p-one"), ["n2"], None)


async def test_a_pod_deleted_before_the_bind_s_thread_runs_is_not_bound():
    """The early plan was made from the pod as it was: the bind's thread plans again and meets the
    deletion, as it did before reservations were made early."""
    service = _with_second_one_gpu_pod()
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))
        await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2"]))
        with pytest.MonkeyPatch.context() as patch:
            go = _worker_threads_held(patch)
            binding = asyncio.ensure_future(_post(client, "bind", _bind("p-one", "n2")))
            for _ in range(500):
                if service.state.inventory.reservations():
                    break
                await asyncio.sleep(0.01)
            assert service.state.inventory.reservations(), "no early reservation to test with"
            with service.lock:
                service.state.remove("Pod", f"{NS}/p-one")
            go.set()
            error = (await binding).json()["Error"]
    assert error == f"pod {NS}/p-one not found"
    assert _allocated(service, "one") == []
    _nothing_held(service)


class _FailingOnce:
    """A binder whose first write fails (then the state binder writes)."""

    def __init__(self, then: object) -> None:
        self.then = then
        self.failed = False

    def bind(self, plan: BindPlan) -> None:
        if not self.failed:
            self.failed = True
            raise BindError("the API server said no")
        self.then.bind(plan)  # type: ignore[attr-defined]


def test_a_request_releases_its_own_early_reservation_and_not_a_retry_s():
    service = _with_second_one_gpu_pod()
    service.binding.binder = _FailingOnce(service.binding.binder)
    coordinator = service.binding
    _chosen_on_n2(service)
    first = coordinator.reserve_early(NS, "p-one", UID, "n2")
    assert first is not None
    with pytest.raises(BindError, match="said no"):
        coordinator.bind(NS, "p-one", UID, "n2")  # took the reservation up, failed, released it
    _nothing_held(service)
    _chosen_on_n2(service)  # kube-scheduler's retry: a new cycle, then the bind
    retry = coordinator.reserve_early(NS, "p-one", UID, "n2")
    assert retry is not None
    coordinator.drop_early(NS, "p-one", UID, "n2", first)  # the first request ends late
    assert service.state.inventory.reservations(), "the first request released the retry's reservation"
    assert coordinator.bind(NS, "p-one", UID, "n2").devices == [f"{NS}/one: gpu.example.com/n2/gpu-0"]
    coordinator.drop_early(NS, "p-one", UID, "n2", retry)  # taken up already: nothing to release
    assert _allocated(service, "one") == [("n2", "gpu-0")]
    _nothing_held(service)


def test_dropping_an_early_reservation_does_not_wait_for_the_service_lock():
    """The event loop drops a reservation no bind thread took up; the lock may be held for seconds (a
    cold filter): the release then happens once it is free, not on the loop."""
    service = _with_second_one_gpu_pod()
    coordinator = service.binding
    _chosen_on_n2(service)
    reservation = coordinator.reserve_early(NS, "p-one", UID, "n2")
    assert reservation is not None
    with held_by_another_thread(service.lock):
        dropping = threading.Thread(target=coordinator.drop_early, args=(NS, "p-one", UID, "n2", reservation))
        dropping.start()
        dropping.join(10)
        assert not dropping.is_alive(), "drop_early waited for the service lock"
    for _ in range(1000):
        if not service.state.inventory.reservations():
            break
        threading.Event().wait(0.01)
    _nothing_held(service)
