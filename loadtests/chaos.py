"""Chaos run: concurrent binds with retries against the fake API server under faults; counts double
allocations and orphans (issue 14). A script, not a test: it prints one JSON report and exits 0 when
both counts are 0, 1 otherwise.

    .venv/bin/python -m loadtests.chaos [--pods 50] [--rounds 12] [--seed 1] [--deadline 180]

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
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config.settings import ClusterSettings, Settings
from app.http.api import create_app
from app.kube.runtime import ClusterRuntime
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

NS = "chaos"
DRIVER = "gpu.example.com"
HTTP_TIMEOUT = 0.5
"""kube-scheduler's ``httpTimeout`` here (5 s by default): binds slower than this are abandoned."""

SETTINGS = ClusterSettings(
    watch_idle_seconds=5.0,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.5,
    bind_timeout_seconds=10.0,
    request_timeout_seconds=3.0,
    orphan_grace_period_seconds=2.0,
    orphan_check_interval_seconds=0.25,
    reservation_ttl_seconds=8.0,
)


def seed(api: FakeKubeAPI, pods: int, rng: random.Random) -> list[str]:
    """Nodes with 2 GPUs each, for about half the pods: 3 in 5 pods have their own claim, 1 in 5 asks for
    an extended resource (a claim the bind creates), 1 in 5 shares a claim with others."""
    api.add("Namespace", {"metadata": {"name": NS}})
    api.add("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    for i in range(max(2, pods // 4)):
        api.add("Node", node(f"n{i:02d}"))
        api.add(
            "ResourceSlice",
            resource_slice(f"n{i:02d}-gpus", DRIVER, f"n{i:02d}", [device("gpu-0"), device("gpu-1")]),
        )
    for s in range(max(1, pods // 10)):
        api.add("ResourceClaim", claim(NS, f"shared-{s}", [request("gpu", "gpu")]))
    names = []
    for i in range(pods):
        name = f"p{i:03d}"
        kind = rng.random()
        if kind < 0.6:
            api.add("ResourceClaim", claim(NS, f"{name}-gpu", [request("gpu", "gpu")]))
            api.add("Pod", pod(NS, name, [f"{name}-gpu"]))
        elif kind < 0.8:
            p = pod(NS, name)
            p["spec"]["containers"][0]["resources"] = {
                "limits": {"deviceclass.resource.kubernetes.io/gpu": "1"}
            }
            api.add("Pod", p)
        else:
            api.add("Pod", pod(NS, name, [f"shared-{rng.randrange(max(1, pods // 10))}"]))
        names.append(name)
    return names


@dataclasses.dataclass
class Run:
    api: FakeKubeAPI
    kubeconfig: Path
    rng: random.Random
    runtime: ClusterRuntime | None = None
    http: httpx.AsyncClient | None = None
    faults: Counter[str] = dataclasses.field(default_factory=Counter)
    answers: Counter[str] = dataclasses.field(default_factory=Counter)
    gates: list[asyncio.Event] = dataclasses.field(default_factory=list)

    async def start_extender(self) -> None:
        if self.runtime is not None:
            await self.stop_extender()
        self.runtime = ClusterRuntime(dataclasses.replace(SETTINGS, kubeconfig=self.kubeconfig))
        await self.runtime.start()
        await asyncio.wait_for(self.runtime.wait_ready(), 30)
        app = create_app(self.runtime.service, Settings(Path("unused")), ready=self.runtime.ready)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")

    async def stop_extender(self) -> None:
        assert self.runtime is not None and self.http is not None
        await self.http.aclose()
        await self.runtime.stop()

    async def post(self, verb: str, body: dict[str, Any]) -> Any:
        """One extender call with kube-scheduler's timeout; None when it did not answer in time."""
        assert self.http is not None
        try:
            answer = await asyncio.wait_for(
                self.http.post(f"/scheduler/{verb}", content=orjson.dumps(body)), HTTP_TIMEOUT
            )
        except TimeoutError:
            self.answers[f"{verb} timed out"] += 1
            return None
        return answer.json()

    async def schedule(self, name: str) -> None:
        """One scheduling cycle of pod ``name`` as kube-scheduler runs it."""
        current = self.api.get("Pod", NS, name)
        if current is None or current["spec"].get("nodeName"):
            return
        nodes = sorted(n["metadata"]["name"] for n in self.api.store[("", "nodes")].values())
        filtered = await self.post("filter", {"Pod": current, "NodeNames": nodes})
        if not filtered or filtered.get("Error") or not filtered.get("NodeNames"):
            self.answers["filter: no node"] += 1
            return
        passed = filtered["NodeNames"]
        scores = await self.post("prioritize", {"Pod": current, "NodeNames": passed}) or []
        best = max(scores, key=lambda s: (s["Score"], self.rng.random()))["Host"] if scores else passed[0]
        meta = current["metadata"]
        bound = await self.post(
            "bind", {"PodName": name, "PodNamespace": NS, "PodUID": meta["uid"], "Node": best}
        )
        self.answers["bind ok" if bound and not bound.get("Error") else "bind failed"] += 1

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


def audit(api: FakeKubeAPI) -> dict[str, Any]:
    """Double allocations and orphans on the server (module docstring)."""
    claims = api.store.get(("resource.k8s.io", "resourceclaims"), {})
    pods = {name: p for (ns, name), p in api.store.get(("", "pods"), {}).items() if ns == NS}
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
            c = claims.get((NS, claim_name)) or {}
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
        run = Run(api, api.kubeconfig(Path(directory)), rng)
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
            report = audit(api)
        finally:
            if run.runtime is not None:
                with contextlib.suppress(Exception):
                    await run.stop_extender()
            await api.stop()
    return {
        "pods": pods,
        "rounds": done,
        "seed": seed_value,
        "seconds": round(time.monotonic() - started, 1),
        **report,
        "double_allocation_count": len(report["double_allocations"]),
        "orphan_count": len(report["orphans"]),
        "faults": dict(sorted(run.faults.items())),
        "answers": dict(sorted(run.answers.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--deadline", type=float, default=180.0, help="stop starting rounds after this many seconds"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # faults make the extender log a lot; the report says it all
    report = asyncio.run(chaos(args.pods, args.rounds, args.seed, args.deadline))
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0 if not report["double_allocation_count"] and not report["orphan_count"] else 1


if __name__ == "__main__":
    sys.exit(main())
