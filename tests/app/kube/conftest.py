"""Fixtures for cluster mode: the fake API server (``fakeapi.FakeKubeAPI``), a fake clock, and a started
``ClusterRuntime`` talking to the fake server through the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from app.config.settings import ClusterSettings
from app.kube.client import KubeClient
from app.kube.runtime import ClusterRuntime
from app.scheduling.binder import BindError
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"

TEST_SETTINGS = ClusterSettings(
    watch_idle_seconds=3000.0,  # the client's read timeout, real seconds: never fires unless a test lowers it
    bind_timeout_seconds=1000.0,
    orphan_grace_period_seconds=300.0,
    orphan_check_interval_seconds=86_400.0,  # the most it takes: tests call OrphanReleaser.sweep() themselves
    scheduler_names=("default-scheduler",),  # test pods carry no schedulerName: the API server's default
    api_qps=10_000.0,  # the client's limit runs on real time; tests that count on it set their own
    api_burst=100_000,
)


class FakeClock:
    """Scaled time: ``sleep`` and ``timeout`` take ``scale`` times the real time asked for (a 90 s deadline
    fires after 0.9 s, a 0.5 s backoff takes 5 ms); ``now`` is virtual and moves only with ``advance``
    (grace periods, reservation lifetimes)."""

    def __init__(self, scale: float = 0.01) -> None:
        self.scale = scale
        self.virtual = 1000.0
        self.epoch = time.time() - self.virtual
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.virtual

    def wall(self) -> float:
        """The real wall clock moved on by ``advance`` as ``now`` is."""
        return self.epoch + self.virtual

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(seconds * self.scale)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds * self.scale)

    def advance(self, seconds: float) -> None:
        self.virtual += seconds


async def eventually(check: Callable[[], Any], timeout: float = 3.0) -> Any:
    """Poll ``check`` (a few ms apart) until it returns something truthy; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.002)


def seed_cluster(api: FakeKubeAPI) -> None:
    """Two nodes: n1 with gpu-0 and gpu-1, n2 with gpu-0; DeviceClass ``gpu``; namespace ``ml``."""
    api.add("Namespace", {"metadata": {"name": NS}})
    api.add("Node", node("n1"))
    api.add("Node", node("n2"))
    api.add("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    api.add("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), device("gpu-1")]))
    api.add("ResourceSlice", resource_slice("n2-gpus", DRIVER, "n2", [device("gpu-0")]))


def add_pod(api: FakeKubeAPI, name: str, gpus: int = 1) -> dict:
    """Pod ``name`` in ``ml`` with its own claim ``<name>-gpu`` asking for ``gpus`` devices of class gpu."""
    api.add("ResourceClaim", claim(NS, f"{name}-gpu", [request("gpu", "gpu", gpus)]))
    return api.add("Pod", pod(NS, name, [f"{name}-gpu"]))


async def bind(runtime: ClusterRuntime, name: str, node_name: str, uid: str | None = None) -> str | None:
    """Bind as kube-scheduler's bind call does (from a worker thread); the error text, or None."""
    try:
        await asyncio.to_thread(runtime.service.bind, NS, name, uid or f"uid-pod-{NS}-{name}", node_name)
    except BindError as e:
        return str(e)
    return None


async def silence_watches(api: FakeKubeAPI, kind: str = "ResourceClaim") -> None:
    """From now on watches deliver nothing: drop the open ones and wait until ``kind`` watches again."""
    api.silent_watches = True
    api.drop_watches()
    await eventually(lambda: api.open_watches(kind) == 1)


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeAPI]:
    server = await FakeKubeAPI().start()
    yield server
    await server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


Start = Callable[..., Awaitable[ClusterRuntime]]


@pytest.fixture
async def start_runtime(api: FakeKubeAPI, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Start]:
    """``await start_runtime(**settings_overrides)``: a runtime on the fake API, synced. Several may run
    (a restart is a second runtime); all are stopped at the end."""
    started: list[ClusterRuntime] = []

    async def start(identity: str | None = None, **overrides: Any) -> ClusterRuntime:
        settings = dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path), **overrides)
        runtime = ClusterRuntime(settings, clock=clock, identity=identity)
        started.append(runtime)
        await runtime.start()
        await asyncio.wait_for(runtime.wait_ready(), 5)
        return runtime

    yield start
    for runtime in started:
        await runtime.stop()


@pytest.fixture
async def client(api: FakeKubeAPI, tmp_path: Path) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.connect(api.kubeconfig(tmp_path))
    yield kube
    await kube.close()
