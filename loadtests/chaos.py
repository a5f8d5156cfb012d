"""Chaos run: concurrent binds with retries against the fake API server under faults; counts double
allocations and orphans (issue 14). A script, not a test: it prints one JSON report and exits 0 when
both counts are 0, 1 otherwise. ``--e2e``: against the e2e control plane instead (``loadtests.chaos_e2e``).

    .venv/bin/python -m loadtests.chaos [--e2e] [--pods 50] [--rounds 12] [--seed 1] [--deadline 180]

Everything listens on 127.0.0.1 (the fake API server of ``tests/app/kube/fakeapi.py``; the extender's
app is called in-process) and the run stops by itself after ``--rounds`` scheduling rounds or
``--deadline`` seconds. Per round, kube-scheduler is emulated for every pending pod (filter →
prioritize → bind over the extender's HTTP app, all pods at once) with a short ``httpTimeout``: a bind
that does not answer in time is abandoned, and the pod is filtered and bound again while the first bind
may still be writing. Faults, chosen at random per round (seeded): 409 conflicts and 500s on claim and
binding writes, claim writes sent but never answered, slow claim creations and bindings (longer than the
httpTimeout), stale and duplicate watch events (replayed older claim versions, repeated current ones),
dropped watches, compaction (410, relist), an API server outage, and restarts of the extender (a new
runtime rebuilds its index from the API; binds of the old one fail when its client closes).

After the last round the run waits for the orphan grace period and a few recovery sweeps, then reads
the server's store: a **double allocation** is a device in the allocation of two claims; an **orphan**
is an allocated claim not reserved for a pod bound to a node, or a pod bound with a claim that is not
allocated and reserved for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config.settings import ClusterSettings, Settings
from app.http.api import create_app
from app.kube.runtime import ClusterRuntime
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

Obj = dict[str, Any]

NS = "chaos"
DRIVER = "gpu.example.com"
HTTP_TIMEOUT = 0.5
"""kube-scheduler's ``httpTimeout`` here (5 s by default): binds slower than this are abandoned."""
EXTENDED_RESOURCE = "deviceclass.resource.kubernetes.io/gpu"
"""The extended resource DeviceClass ``gpu`` stands for (without an ``extendedResourceName``)."""

SETTINGS = ClusterSettings(
    watch_idle_seconds=5.0,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.5,
    bind_timeout_seconds=10.0,
    request_timeout_seconds=3.0,
    orphan_grace_period_seconds=2.0,
    orphan_check_interval_seconds=0.25,
    reservation_ttl_seconds=8.0,
    # The pods carry no schedulerName, so the API server's default: without it here no orphan is ever
    # released, and an allocation only a retried bind could reuse stays when the pod is never retried.
    scheduler_names=("default-scheduler",),
)


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a chaos run schedules: ``nodes`` with 2 GPUs each, for about half the pods; ``shared`` claims;
    per pod its claim: 3 in 5 pods have their own (``own``), 1 in 5 asks for an extended resource (a claim
    the bind creates; ``claim`` None), 1 in 5 shares one of the shared claims."""

    nodes: int
    shared: list[str]
    pods: list[tuple[str, str | None, bool]]
    """(name, claim, own)."""

    @classmethod
    def draw(cls, pods: int, rng: random.Random) -> Workload:
        shared = [f"shared-{s}" for s in range(max(1, pods // 10))]
        chosen: list[tuple[str, str | None, bool]] = []
        for i in range(pods):
            name = f"p{i:03d}"
            kind = rng.random()
            if kind < 0.6:
                chosen.append((name, f"{name}-gpu", True))
            elif kind < 0.8:
                chosen.append((name, None, False))
            else:
                chosen.append((name, shared[rng.randrange(len(shared))], False))
        return cls(max(2, pods // 4), shared, chosen)


def seed(api: FakeKubeAPI, pods: int, rng: random.Random) -> list[str]:
    """The fake API server's objects of a ``Workload``; returns the pod names."""
    workload = Workload.draw(pods, rng)
    api.add("Namespace", {"metadata": {"name": NS}})
    api.add("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    for i in range(workload.nodes):
        api.add("Node", node(f"n{i:02d}"))
        api.add(
            "ResourceSlice",
            resource_slice(f"n{i:02d}-gpus", DRIVER, f"n{i:02d}", [device("gpu-0"), device("gpu-1")]),
        )
    for name in workload.shared:
        api.add("ResourceClaim", claim(NS, name, [request("gpu", "gpu")]))
    for name, claim_name, own in workload.pods:
        if own:
            api.add("ResourceClaim", claim(NS, claim_name, [request("gpu", "gpu")]))
        p = pod(NS, name, [claim_name] if claim_name else [])
        if claim_name is None:
            p["spec"]["containers"][0]["resources"] = {"limits": {EXTENDED_RESOURCE: "1"}}
        api.add("Pod", p)
    return [name for name, _, _ in workload.pods]


@dataclasses.dataclass
class Scheduler:
    """kube-scheduler's side of the extender protocol, for any number of pods at once, with a short
    ``httpTimeout``: a call that does not answer in time is abandoned (the pod is tried again later,
    while the extender may still be binding it)."""

    rng: random.Random
    timeout: float = HTTP_TIMEOUT
    http: httpx.AsyncClient | None = None
    """The extender (replaced when it restarts)."""
    answers: Counter[str] = dataclasses.field(default_factory=Counter)

    async def post(self, verb: str, body: dict[str, Any]) -> Any:
        """One extender call; None when it did not answer in time, or at all (restarting)."""
        assert self.http is not None
        try:
            answer = await asyncio.wait_for(
                self.http.post(f"/scheduler/{verb}", content=orjson.dumps(body)), self.timeout
            )
        except TimeoutError:
            self.answers[f"{verb} timed out"] += 1
            return None
        except httpx.TransportError:
            self.answers[f"{verb}: extender unreachable"] += 1
            return None
        return answer.json()

    async def cycle(self, pod: Obj, nodes: list[str]) -> None:
        """One scheduling cycle of ``pod`` (as read from the API) over ``nodes``: filter → prioritize →
        bind."""
        filtered = await self.post("filter", {"Pod": pod, "NodeNames": nodes})
        if not filtered or filtered.get("Error") or not filtered.get("NodeNames"):
            self.answers["filter: no node"] += 1
            return
        passed = filtered["NodeNames"]
        scores = await self.post("prioritize", {"Pod": pod, "NodeNames": passed}) or []
        best = max(scores, key=lambda s: (s["Score"], self.rng.random()))["Host"] if scores else passed[0]
        meta = pod["metadata"]
        bound = await self.post(
            "bind",
            {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best},
        )
        self.answers["bind ok" if bound and not bound.get("Error") else "bind failed"] += 1


@dataclasses.dataclass
class Run:
    api: FakeKubeAPI
    kubeconfig: Path
    rng: random.Random
    scheduler: Scheduler
    runtime: ClusterRuntime | None = None
    faults: Counter[str] = dataclasses.field(default_factory=Counter)
    gates: list[asyncio.Event] = dataclasses.field(default_factory=list)

    async def start_extender(self) -> None:
        if self.runtime is not None:
            await self.stop_extender()
        self.runtime = ClusterRuntime(dataclasses.replace(SETTINGS, kubeconfig=self.kubeconfig))
        await self.runtime.start()
        await asyncio.wait_for(self.runtime.wait_ready(), 30)
        app = create_app(self.runtime.service, Settings(Path("unused")), ready=self.runtime.ready)
        transport = httpx.ASGITransport(app=app)
        self.scheduler.http = httpx.AsyncClient(transport=transport, base_url="http://extender")

    async def stop_extender(self) -> None:
        assert self.runtime is not None and self.scheduler.http is not None
        await self.scheduler.http.aclose()
        await self.runtime.stop()

    async def schedule(self, name: str) -> None:
        """One scheduling cycle of pod ``name``, unless it is bound by now."""
        current = self.api.get("Pod", NS, name)
        if current is None or current["spec"].get("nodeName"):
            return
        nodes = sorted(n["metadata"]["name"] for n in self.api.store[("", "nodes")].values())
        await self.scheduler.cycle(current, nodes)

    def slow(self, method: str, pattern: str, seconds: float) -> None:
        """Hold the next matching request for ``seconds`` (longer than the httpTimeout)."""
        gate = self.api.gate(method, pattern)
        self.gates.append(gate)
        asyncio.get_running_loop().call_later(seconds, gate.set)

    def replay_stale(self, count: int) -> None:
        """Replay older versions of claims (stale events) and current ones (duplicates) to the watches."""
        history = self.api.log.get(("resource.k8s.io", "resourceclaims"), [])
        for _ in range(min(count, len(history))):
            _, kind, obj = self.rng.choice(history)
            if kind != "DELETED":
                self.api.replay("ResourceClaim", "MODIFIED", obj)
                self.faults["stale event"] += 1
        for stored in list(self.api.store.get(("resource.k8s.io", "resourceclaims"), {}).values())[:count]:
            self.api.replay("ResourceClaim", "MODIFIED", stored)
            self.faults["duplicate event"] += 1

    async def inject(self, round_: int) -> None:
        api, rng = self.api, self.rng
        if rng.random() < 0.7:
            api.fail(
                "PUT",
                r"resourceclaims/[^/]+/status$",
                409,
                times=rng.randint(1, 6),
                reason="Conflict",
                message="modified",
            )
            self.faults["409 on claim status"] += 1
        if rng.random() < 0.5:
            api.fail("POST", r"/binding$", 500, times=rng.randint(1, 3), message="etcd hiccup")
            self.faults["500 on binding"] += 1
        if rng.random() < 0.3:
            api.disconnect("PUT", r"resourceclaims/[^/]+/status$", times=2)  # sent, never answered
            self.faults["claim write unanswered"] += 1
        for _ in range(rng.randint(0, 3)):
            self.slow("POST", r"resourceclaims$", HTTP_TIMEOUT * rng.uniform(1.5, 4))
            self.faults["slow claim creation"] += 1
        for _ in range(rng.randint(0, 3)):
            self.slow("POST", r"/binding$", HTTP_TIMEOUT * rng.uniform(1.5, 4))
            self.faults["slow binding"] += 1
        self.replay_stale(rng.randint(0, 8))
        if rng.random() < 0.3:
            api.drop_watches()
            self.faults["watches dropped"] += 1
        if rng.random() < 0.2:
            api.compact("ResourceClaim")
            self.faults["compaction (410)"] += 1
        if round_ % 4 == 2:
            api.down = True
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            api.down = False
            api.drop_watches()
            self.faults["API server restart"] += 1
        if round_ % 5 == 4:
            await self.start_extender()
            self.faults["extender restart"] += 1


def audit(claim_list: Iterable[Obj], pod_list: Iterable[Obj], namespace: str) -> dict[str, Any]:
    """Double allocations and orphans among the claims and the pods of ``namespace`` read from the server
    (module docstring)."""
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claim_list}
    pods = {p["metadata"]["name"]: p for p in pod_list if p["metadata"]["namespace"] == namespace}
    holders: dict[tuple[str, str, str], list[str]] = {}
    orphans: list[str] = []
    for (ns, name), c in claims.items():
        status = c.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            continue
        for r in allocation["devices"]["results"]:
            holders.setdefault((r["driver"], r["pool"], r["device"]), []).append(f"{ns}/{name}")
        users = [pods.get(r.get("name")) for r in status.get("reservedFor") or ()]
        if not any(u is not None and u["spec"].get("nodeName") for u in users):
            orphans.append(f"claim {ns}/{name}: allocated, no bound pod reserves it")
    for name, p in pods.items():
        if not p["spec"].get("nodeName"):
            continue
        wanted = [c.get("resourceClaimName") for c in p["spec"].get("resourceClaims") or ()]
        extended = ((p.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        for claim_name in [*wanted, *([extended] if extended else [])]:
            c = claims.get((namespace, claim_name)) or {}
            status = c.get("status") or {}
            reserved = any(r.get("uid") == p["metadata"]["uid"] for r in status.get("reservedFor") or ())
            if not status.get("allocation") or not reserved:
                orphans.append(f"pod {name}: bound, claim {claim_name} not allocated and reserved for it")
        if not wanted and not extended:
            orphans.append(f"pod {name}: bound without its extended-resource claim")
    doubles = {f"{d[0]}/{d[1]}/{d[2]}": h for d, h in holders.items() if len(h) > 1}
    bound = sum(1 for p in pods.values() if p["spec"].get("nodeName"))
    return {"pods_bound": bound, "double_allocations": doubles, "orphans": orphans}


async def chaos(pods: int, rounds: int, seed_value: int, deadline: float) -> dict[str, Any]:
    rng = random.Random(seed_value)
    api = await FakeKubeAPI().start()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as directory:
        run = Run(api, api.kubeconfig(Path(directory)), rng, Scheduler(rng))
        names = seed(api, pods, rng)
        try:
            await run.start_extender()
            done = 0
            for round_ in range(rounds):
                if time.monotonic() - started > deadline:
                    break
                await run.inject(round_)
                pending = [
                    n for n in names if not (api.get("Pod", NS, n) or {}).get("spec", {}).get("nodeName")
                ]
                rng.shuffle(pending)
                await asyncio.gather(*(run.schedule(n) for n in pending))
                done = round_ + 1
            for gate in run.gates:
                gate.set()
            api.faults.clear()
            # Binds still writing finish (bind_timeout_seconds at most), then recovery runs past the grace.
            await asyncio.sleep(SETTINGS.bind_timeout_seconds / 4)
            await asyncio.sleep(
                SETTINGS.orphan_grace_period_seconds + 4 * SETTINGS.orphan_check_interval_seconds
            )
            assert run.runtime is not None
            await run.runtime.releaser.sweep()
            await asyncio.sleep(
                SETTINGS.orphan_grace_period_seconds + 4 * SETTINGS.orphan_check_interval_seconds
            )
            report = audit(
                api.store.get(("resource.k8s.io", "resourceclaims"), {}).values(),
                api.store.get(("", "pods"), {}).values(),
                NS,
            )
        finally:
            if run.runtime is not None:
                with contextlib.suppress(Exception):
                    await run.stop_extender()
            await api.stop()
    return summary(
        pods, done, seed_value, time.monotonic() - started, report, run.faults, run.scheduler.answers
    )


def summary(
    pods: int,
    rounds: int,
    seed_value: int,
    seconds: float,
    audited: dict[str, Any],
    faults: Counter[str],
    answers: Counter[str],
) -> dict[str, Any]:
    """The report of a run: its size, what ``audit`` found and how much, the faults, the answers."""
    return {
        "pods": pods,
        "rounds": rounds,
        "seed": seed_value,
        "seconds": round(seconds, 1),
        **audited,
        "double_allocation_count": len(audited["double_allocations"]),
        "orphan_count": len(audited["orphans"]),
        "faults": dict(sorted(faults.items())),
        "answers": dict(sorted(answers.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--deadline", type=float, default=180.0, help="stop starting rounds after this many seconds"
    )
    parser.add_argument(
        "--e2e", action="store_true", help="against the e2e control plane (needs Go, as make e2e) instead"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # faults make the extender log a lot; the report says it all
    if args.e2e:
        from loadtests import chaos_e2e  # it builds on this module

        report = chaos_e2e.run(args.pods, args.rounds, args.seed, args.deadline)
    else:
        report = asyncio.run(chaos(args.pods, args.rounds, args.seed, args.deadline))
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    failed = report["double_allocation_count"] or report["orphan_count"] or report.get("internal_error_count")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
