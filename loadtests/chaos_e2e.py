"""The chaos run against the e2e control plane (``python -m loadtests.chaos --e2e``): etcd, kube-apiserver
and kube-controller-manager v1.37.2 (``e2e.controlplane``, as ``make e2e`` starts them), and the extender
as the shipped sidecar runs it, reaching kube-apiserver through a ``FaultProxy``. kube-scheduler is
emulated by the run (``loadtests.chaos.Scheduler``: all pending pods at once, abandoned calls retried in
the next round), for pods of a scheduler name of its own, so it never competes with a real one. The
extender releases orphans as the replica next to the leading kube-scheduler: the shipped Lease names this
host (kube-scheduler's own when one runs here, else one the run creates).

Per round, chosen at random (seeded): 409s on claim status writes, 500s on bindings, claim writes done but
never answered, slow claim creations and bindings (held longer than the httpTimeout), stale and duplicate
ResourceClaim and Pod watch events, dropped watches; every few rounds a restart of kube-apiserver, or of
the extender (killed or terminated), while the round's binds run. Then the proxy stops interfering, the
run waits past the orphan grace period and reads claims and pods back from kube-apiserver: double
allocations and orphans as ``loadtests.chaos.audit`` counts them, and internal errors the extender logged.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.config.extenderconfig import API_VERSION, KIND
from e2e.controlplane import EXTENDER_NAMESPACE, ROOT, ControlPlane, build_binaries, remove
from e2e.workload import Scenario
from loadtests.chaos import Scheduler, Workload, audit, summary
from loadtests.faultproxy import FaultProxy

__all__ = ["RUN_DIR", "chaos_e2e", "run"]

RUN_DIR = ROOT / ".cache" / "chaos-e2e"
SCHEDULER = "chaos-scheduler"
HTTP_TIMEOUT = 1.0
"""kube-scheduler's ``httpTimeout`` here: a bind on a real API server takes a few writes of some ms each,
so under load many exceed it and are retried while they still write."""
GRACE_SECONDS = 10.0
CLUSTER_SETTINGS = {
    "orphanGracePeriodSeconds": GRACE_SECONDS,
    "orphanCheckIntervalSeconds": 1,
    "backoffMaxSeconds": 2,  # back at once after a kube-apiserver restart
    "watchIdleSeconds": 20,
}
"""The extender's config file: the shipped sidecar's arguments otherwise (``e2e.controlplane``)."""


class _Chaos:
    def __init__(self, sc: Scenario, proxy: FaultProxy, extender: str, rng: random.Random) -> None:
        self.sc = sc
        self.proxy = proxy
        self.extender = extender
        self.rng = rng
        self.scheduler = Scheduler(rng, HTTP_TIMEOUT)
        self.faults: Counter[str] = Counter()
        self.gates: list[asyncio.Event] = []

    def seed(self, pods: int) -> list[str]:
        """The ``Workload`` as API objects of the scenario's namespace (blocking: call it on a thread)."""
        sc = self.sc
        workload = Workload.draw(pods, self.rng)
        sc.add_nodes(workload.nodes, 2)
        for name in workload.shared:
            sc.add_claim(name)
        extended = f"deviceclass.resource.kubernetes.io/{sc.device_class}"
        for name, claim, own in workload.pods:
            if own:
                sc.add_claim(claim)
            if claim is None:
                sc.add_pod(name, limits={extended: "1"}, scheduler=SCHEDULER)
            else:
                sc.add_pod(name, claim=claim, scheduler=SCHEDULER)
        return [name for name, _, _ in workload.pods]

    async def round(self, number: int) -> None:
        """Faults for this round, then one scheduling cycle of every pending pod, a restart among them."""
        self._inject()
        pods = await asyncio.to_thread(self.sc.kube.list, "Pod", self.sc.namespace)
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        self.rng.shuffle(pending)
        cycles = [self.scheduler.cycle(p, self.sc.nodes) for p in pending]
        if number % 4 == 2:
            cycles.append(self._restart("kube-apiserver", signal.SIGTERM))
        if number % 5 == 4:
            cycles.append(self._restart(self.extender, signal.SIGKILL if number % 2 else signal.SIGTERM))
        await asyncio.gather(*cycles)

    def _inject(self) -> None:
        proxy, rng = self.proxy, self.rng
        claim_status = r"resourceclaims/[^/]+/status$"
        if rng.random() < 0.7:
            proxy.fail(
                "PUT", claim_status, 409, times=rng.randint(1, 4), reason="Conflict", message="modified"
            )
        if rng.random() < 0.5:
            proxy.fail("POST", r"/binding$", 500, times=rng.randint(1, 2), message="etcd hiccup")
        if rng.random() < 0.3:
            proxy.disconnect("PUT", claim_status)
        for pattern in (r"resourceclaims$", r"/binding$"):
            for _ in range(rng.randint(0, 2)):
                gate = proxy.gate("POST", pattern)
                self.gates.append(gate)
                asyncio.get_running_loop().call_later(HTTP_TIMEOUT * rng.uniform(1.5, 4), gate.set)
                self.faults[f"slow POST {pattern}"] += 1
        if rng.random() < 0.3:
            proxy.drop_watches()
            self.faults["watches dropped"] += 1

    async def replays(self, stop: asyncio.Event) -> None:
        """Stale and duplicate watch events now and then, until ``stop``."""
        while not stop.is_set():
            for collection in ("resourceclaims", "pods"):
                await self.proxy.replay(collection, self.rng.randint(0, 4), self.rng)
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))

    async def _restart(self, name: str, sig: signal.Signals) -> None:
        await asyncio.sleep(self.rng.uniform(0, 1.5))  # while the round's binds write
        started = time.monotonic()
        await asyncio.to_thread(self.sc.plane.components[name].restart, sig)
        self.faults[f"{name} restart ({sig.name})"] += 1
        self.faults[f"{name} restart seconds"] += round(time.monotonic() - started)

    def release(self) -> None:
        """The proxy stops interfering: held requests go on, no more faults."""
        for gate in self.gates:
            gate.set()
        self.proxy.faults.clear()


def _extender_config(plane: ControlPlane) -> Path:
    path = plane.directory / "chaos-extender.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": API_VERSION, "kind": KIND, "cluster": CLUSTER_SETTINGS}))
    return path


def _lead(sc: Scenario) -> None:
    """The shipped kube-scheduler Lease (``--scheduler-lease``, which the extender may read) held by this
    host, unless kube-scheduler holds it already (it runs here too)."""
    sc.kube.ensure(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "dra-scheduler", "namespace": EXTENDER_NAMESPACE},
            "spec": {"holderIdentity": f"{socket.gethostname()}_chaos"},
        }
    )


async def chaos_e2e(
    sc: Scenario, pods: int, rounds: int, seed: int, deadline: float, *, extender: str = "dra-extender"
) -> dict[str, Any]:
    """Run the chaos in scenario ``sc`` (its namespace, driver and DeviceClass) with an extender component
    ``extender`` of its own (stopped at the end); returns the report."""
    plane = sc.plane
    rng = random.Random(seed)
    proxy = FaultProxy(plane.server, plane.ca)
    started = time.monotonic()
    url = await proxy.start()
    chaos = _Chaos(sc, proxy, extender, rng)
    stop = asyncio.Event()
    try:
        await asyncio.to_thread(_lead, sc)
        flags = (f"--config={_extender_config(plane)}", f"--scheduler-name={SCHEDULER}")
        await asyncio.to_thread(plane.start_extender, *flags, name=extender, api_server=url)
        log = plane.components[extender].log
        log_offset = log.stat().st_size
        await asyncio.to_thread(chaos.seed, pods)
        replays = asyncio.create_task(chaos.replays(stop))
        async with httpx.AsyncClient(base_url=plane.extender_urls[extender]) as http:
            chaos.scheduler.http = http
            done = 0
            for number in range(rounds):
                if time.monotonic() - started > deadline:
                    break
                await chaos.round(number)
                done = number + 1
        stop.set()
        await replays
        chaos.release()
        # Binds still writing finish; then past the grace period twice, so every orphan is released.
        await asyncio.sleep(2 * GRACE_SECONDS + 5 * CLUSTER_SETTINGS["orphanCheckIntervalSeconds"])
        claims = await asyncio.to_thread(sc.kube.list, "ResourceClaim", sc.namespace)
        found = await asyncio.to_thread(sc.kube.list, "Pod", sc.namespace)
        report = audit(claims, found, sc.namespace)
        with log.open(errors="replace") as lines:
            lines.seek(log_offset)
            logged = lines.readlines()
        internal = [line.strip() for line in logged if "internal error" in line]
        released = sum("released: allocated for pod" in line for line in logged)
    finally:
        stop.set()
        chaos.release()
        await asyncio.to_thread(plane.components[extender].stop)
        await proxy.stop()
    seconds = time.monotonic() - started
    return {
        "mode": "e2e",
        **summary(pods, done, seed, seconds, report, chaos.faults + proxy.injected, chaos.scheduler.answers),
        "orphans_released_by_the_extender": released,
        "internal_errors": internal[:5],
        "internal_error_count": len(internal),
    }


def run(pods: int, rounds: int, seed: int, deadline: float) -> dict[str, Any]:
    """A control plane of its own in ``RUN_DIR`` (stopped at the end), the chaos in it."""
    remove(RUN_DIR)
    plane = ControlPlane(RUN_DIR, build_binaries())
    try:
        plane.start()
        return asyncio.run(chaos_e2e(Scenario.create(plane, "chaos"), pods, rounds, seed, deadline))
    finally:
        plane.stop()
