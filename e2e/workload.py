"""Scenario building blocks: nodes with a driver's ResourceSlice, DeviceClasses, templates, claims and
pods in a namespace of the scenario's own, and the checks every scenario makes on what the API server
holds afterwards (outcomes, allocations, no device in two claims)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from e2e.controlplane import ControlPlane
from e2e.kube import ApiError, Kube, poll

EXTENDER_SCHEDULER = "dra-scheduler"  # manifests/kube-scheduler-config.yaml's profile
IN_TREE_SCHEDULER = "default-scheduler"
FINALIZER = "resource.kubernetes.io/delete-protection"
NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "250"}
CREATED: list[Scenario] = []  # every scenario of the session, in order, for the summary table


@dataclass
class Scenario:
    """One scenario's namespace, driver and DeviceClass; what it created is remembered for the summary."""

    plane: ControlPlane
    name: str
    kube: Kube
    namespace: str
    driver: str
    device_class: str
    pods: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    device_classes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    summary: tuple[int, int, int, float] | None = None  # pods, bound, unschedulable, seconds
    notes: list[str] = field(default_factory=list)  # measurements printed under the summary table
    log_offset: int = 0  # where the extender's log stood when the scenario began

    @classmethod
    def create(cls, plane: ControlPlane, name: str) -> Scenario:
        kube = plane.client()
        sc = cls(plane, name, kube, f"e2e-{name}", f"{name}.gpu.example.com", f"{name}-gpu")
        CREATED.append(sc)
        extender = plane.components.get("dra-extender")  # none yet: its log starts with the scenario
        sc.log_offset = extender.log.stat().st_size if extender is not None else 0
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": sc.namespace}})
        # The ServiceAccount admission plugin refuses pods until the namespace's default account exists.
        poll(
            lambda: _exists(kube, "ServiceAccount", "default", sc.namespace),
            timeout=60,
            what="default ServiceAccount",
        )
        sc.add_device_class(sc.device_class)
        return sc

    # ---- objects -------------------------------------------------------------------------------------

    def add_device_class(
        self, name: str, *, extended_resource: str | None = None, driver: str | None = None
    ) -> None:
        spec: dict[str, Any] = {
            "selectors": [{"cel": {"expression": f'device.driver == "{driver or self.driver}"'}}]
        }
        if extended_resource:
            spec["extendedResourceName"] = extended_resource
        self.device_classes.append(name)
        self.kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": spec,
            }
        )

    def add_priority_class(self, name: str, value: int, *, preemption_policy: str | None = None) -> str:
        """A PriorityClass (cluster-scoped, so named after the scenario), with ``preemptionPolicy`` when
        given (admission copies it to the pods); returns its name."""
        full = f"{self.name}-{name}"
        obj: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": full},
            "value": value,
        }
        if preemption_policy:
            obj["preemptionPolicy"] = preemption_policy
        self.kube.create(obj)
        return full

    def add_nodes(
        self,
        count: int,
        devices: int,
        *,
        device_extra: dict[str, Any] | None = None,
        capacity: dict[str, str] | None = None,
        declared_features: list[str] | None = None,
        slices: Callable[[str], list[dict[str, Any]]] | None = None,
    ) -> list[str]:
        """``count`` nodes, each with one ResourceSlice of ``devices`` devices of the scenario's driver, or
        the ResourceSlices ``slices(node)`` gives; ``capacity`` replaces entries of the default capacity
        (and allocatable); ``declared_features``: the node's ``status.declaredFeatures`` (kube-apiserver
        admits some slice fields only on nodes declaring them)."""
        names = [f"{self.name}-node-{len(self.nodes) + i}" for i in range(count)]
        for node in names:
            self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": node,
                        "labels": {"kubernetes.io/hostname": node, "e2e/scenario": self.name},
                    },
                }
            )
            self._make_ready(node, {**NODE_CAPACITY, **(capacity or {})}, declared_features or [])
            for resource_slice in slices(node) if slices else [self.slice_for(node, devices, device_extra)]:
                self.kube.create(resource_slice)
        self.nodes += names
        return names

    def _make_ready(self, node: str, capacity: dict[str, str], declared: list[str]) -> None:
        """What a kubelet and the node lifecycle controller would do: report capacity and Ready, and lift
        the not-ready taint the TaintNodesByCondition admission plugin puts on every new Node."""
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e: no kubelet"}
        status: dict[str, Any] = {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}
        if declared:
            status["declaredFeatures"] = declared
        self.kube.merge_patch("Node", node, {"status": status}, sub="status")
        self.kube.merge_patch("Node", node, {"spec": {"taints": None}})

    def slice_for(
        self, node: str, devices: int, device_extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpus"},
            "spec": {
                "driver": self.driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"index": {"int": i}, "model": {"string": "e2e-accelerator"}},
                        "capacity": {"memory": {"value": "80Gi"}},
                        **(device_extra or {}),
                    }
                    for i in range(devices)
                ],
            },
        }

    def add_template(self, name: str, count: int = 1, **exactly: Any) -> None:
        self.kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpu",
                                    "exactly": {
                                        "deviceClassName": self.device_class,
                                        "count": count,
                                        **exactly,
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        )

    def add_claim(self, name: str, count: int = 1, **exactly: Any) -> dict[str, Any]:
        return self.kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": self.device_class, "count": count, **exactly},
                            }
                        ]
                    }
                },
            }
        )

    def add_pod(
        self,
        name: str,
        *,
        template: str | None = None,
        claim: str | None = None,
        limits: dict[str, str] | None = None,
        scheduler: str = EXTENDER_SCHEDULER,
        priority_class: str | None = None,
        node: str | None = None,
        prefers: str | None = None,
        pod_group: str | None = None,
        labels: dict[str, str] | None = None,
        kube: Kube | None = None,
    ) -> None:
        """A pod (``terminationGracePeriodSeconds: 0``: without a kubelet a deleted pod is gone at once)
        using a claim or a template's claim, asking for ``limits`` (requests equal), with a PriorityClass
        pinned to ``node`` by its hostname label, preferring node ``prefers`` (preferred node affinity,
        weight 100), in PodGroup ``pod_group`` and with ``labels`` when given.
        ``kube``: the client to create it with instead of the scenario's (threads creating pods at once:
        ``e2e.kube.ThreadClients``)."""
        resources: dict[str, Any] = {}
        container: dict[str, Any] = {
            "name": "main",
            "image": "registry.k8s.io/pause:3.10",
            "resources": resources,
        }
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
        }
        if template or claim:
            source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
            spec["resourceClaims"] = [{"name": "gpu", **source}]
            resources["claims"] = [{"name": "gpu"}]
        if limits:
            resources.update(limits=limits, requests=limits)
        if priority_class:
            spec["priorityClassName"] = priority_class
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        if prefers:
            hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": [prefers]}
            preferred = [{"weight": 100, "preference": {"matchExpressions": [hostname]}}]
            affinity = {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
            spec["affinity"] = {"nodeAffinity": affinity}
        if pod_group:
            spec["schedulingGroup"] = {"podGroupName": pod_group}
        (kube or self.kube).create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}},
                "spec": spec,
            }
        )
        self.pods.append(name)

    # ---- reading back ---------------------------------------------------------------------------------

    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.get("Pod", name, self.namespace)

    def pod_gone(self, name: str) -> bool:
        """Whether the pod no longer exists (evicted and deleted, say)."""
        try:
            self.pod(name)
        except ApiError as err:
            if err.status == 404:
                return True
            raise
        return False

    def claims(self) -> list[dict[str, Any]]:
        return self.kube.list("ResourceClaim", self.namespace)

    def outcomes(self) -> dict[str, str]:
        """Each pod of the scenario: ``bound`` (nodeName set), ``unschedulable`` (kube-scheduler said so in
        the PodScheduled condition, for another reason than its claim not created yet) or ``pending``."""
        return {
            p["metadata"]["name"]: outcome(p)
            for p in self.kube.list("Pod", self.namespace)
            if p["metadata"]["name"] in self.pods
        }

    def wait_settled(self, *, timeout: float, expect_bound: int | None = None) -> dict[str, str]:
        """Wait until every pod is bound or unschedulable (and, with ``expect_bound``, that many bound)."""

        def settled() -> dict[str, str] | None:
            states = self.outcomes()
            if len(states) < len(self.pods) or "pending" in states.values():
                return None
            if expect_bound is not None and Counter(states.values())["bound"] < expect_bound:
                return None
            return states

        return poll(
            settled, timeout=timeout, interval=0.5, what=f"{self.name}: every pod bound or unschedulable"
        )

    def extender_log(self) -> list[str]:
        """The extender's log lines written since the scenario began."""
        with self.plane.components["dra-extender"].log.open(errors="replace") as log:
            log.seek(self.log_offset)
            return log.readlines()

    def finish(self) -> None:
        """Remember the outcome counts for the session's summary (once, at the end of the scenario)."""
        if self.summary is None:
            tally = Counter(self.outcomes().values())
            self.summary = (
                len(self.pods),
                tally["bound"],
                tally["unschedulable"],
                time.monotonic() - self.started,
            )

    def pod_claim(self, pod: dict[str, Any], entry: str = "gpu") -> dict[str, Any]:
        """The ResourceClaim behind the pod's ``spec.resourceClaims`` entry (generated ones through
        ``status.resourceClaimStatuses``)."""
        source = next(c for c in pod["spec"]["resourceClaims"] if c["name"] == entry)
        name = source.get("resourceClaimName") or next(
            s["resourceClaimName"]
            for s in pod["status"].get("resourceClaimStatuses", [])
            if s["name"] == entry
        )
        return self.kube.get("ResourceClaim", name, self.namespace)


def in_tree_scheduler(plane: ControlPlane) -> str:
    """The in-tree kube-scheduler's URL, started (with profiling, as bench-k8s --profile does) if not yet."""
    if "kube-scheduler-in-tree" not in plane.components:
        plane.start_scheduler(with_extender=False, profiling=True)
    return plane.scheduler_urls["kube-scheduler-in-tree"]


def _exists(kube: Kube, kind: str, name: str, namespace: str | None = None) -> bool:
    try:
        kube.get(kind, name, namespace)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


CLAIM_NOT_CREATED = "ResourceClaim not created yet"
"""The extender's answer to a pod tried before the resourceclaim controller made its claim from the
template (kube-scheduler's in-tree plugin keeps such a pod out of the queue instead): the pod is tried
again once the claim exists, so it has not settled."""


def outcome(pod: dict[str, Any]) -> str:
    if pod["spec"].get("nodeName"):
        return "bound"
    for condition in pod.get("status", {}).get("conditions", []):
        if (
            condition["type"] == "PodScheduled"
            and condition["status"] == "False"
            and condition.get("reason") == "Unschedulable"
            and CLAIM_NOT_CREATED not in condition.get("message", "")
        ):
            return "unschedulable"
    return "pending"


def allocated_devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    allocation = claim.get("status", {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])]


def allocation_node(claim: dict[str, Any]) -> str | None:
    """The node a claim's ``allocation.nodeSelector`` names, which must be the form both allocators write
    for node-local devices (``_pinned_to``: one term, ``metadata.name In [node]``)."""
    selector = (claim.get("status", {}).get("allocation") or {}).get("nodeSelector")
    if not selector:
        return None
    node: str = selector["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
    assert selector == _pinned_to(node), selector
    return node


def devices_in_two_claims(kube: Kube) -> dict[tuple[str, str, str], list[str]]:
    """Every device that more than one claim in the cluster holds (non-admin, unshared results)."""
    return {
        device: [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in holders]
        for device, holders in claims_sharing_devices(kube.list("ResourceClaim")).items()
    }


def claims_sharing_devices(
    claims: Iterable[dict[str, Any]],
) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Every device that more than one of ``claims`` holds (non-admin, unshared results), with those
    claims in the order given."""
    holders: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for claim in claims:
        allocation = claim.get("status", {}).get("allocation") or {}
        for result in allocation.get("devices", {}).get("results", []):
            if result.get("adminAccess") or result.get("shareID"):
                continue
            holders.setdefault((result["driver"], result["pool"], result["device"]), []).append(claim)
    return {device: held for device, held in holders.items() if len(held) > 1}


def assert_bound_pods_hold_their_claims(sc: Scenario) -> None:
    """Every bound pod's claims are allocated for its node, reserved for it and protected by the finalizer."""
    problems = []
    for name, state in sc.outcomes().items():
        if state != "bound":
            continue
        pod = sc.pod(name)
        for entry in pod["spec"].get("resourceClaims", []):
            problems += bound_claim_problems(pod, sc.pod_claim(pod, entry["name"]))
    assert not problems, problems


def bound_claim_problems(pod: dict[str, Any], claim: dict[str, Any]) -> list[str]:
    """What is wrong with ``claim`` of the bound ``pod``: it must hold devices, allocated for the pod's node
    (the one node selector both allocators write for node-local devices), be reserved for the pod and carry
    the finalizer that keeps an allocated claim from being deleted. Never raises on an allocation of
    another form: that is a problem to report, with the rest."""
    pod_name, claim_name, node = pod["metadata"]["name"], claim["metadata"]["name"], pod["spec"]["nodeName"]
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    problems = []
    if not allocation:
        problems.append(f"{pod_name}: claim {claim_name} is not allocated")
    else:
        if not allocated_devices(claim):
            problems.append(f"{pod_name}: claim {claim_name} holds no devices")
        if (selector := allocation.get("nodeSelector")) != _pinned_to(node):
            problems.append(
                f"{pod_name}: claim {claim_name} has nodeSelector {selector}, not one pinned to {node}"
            )
    if pod["metadata"]["uid"] not in {(r or {}).get("uid") for r in status.get("reservedFor") or ()}:
        problems.append(f"{pod_name}: not in the reservedFor of claim {claim_name}")
    if FINALIZER not in (claim["metadata"].get("finalizers") or ()):
        problems.append(f"{pod_name}: claim {claim_name} has no {FINALIZER} finalizer")
    return problems


def _pinned_to(node: str) -> dict[str, Any]:
    """The ``allocation.nodeSelector`` that ``allocation_node`` reads as ``node``."""
    field_ = {"key": "metadata.name", "operator": "In", "values": [node]}
    return {"nodeSelectorTerms": [{"matchFields": [field_]}]}


def summary_table(scenarios: list[Scenario]) -> str:
    header = ("scenario", "pods", "bound", "unschedulable", "seconds")
    cells = [header]
    for sc in scenarios:
        if sc.summary is None:
            continue
        pods, bound, unschedulable, seconds = sc.summary
        cells.append((sc.name, str(pods), str(bound), str(unschedulable), f"{seconds:.1f}"))
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    notes = [f"{sc.name}: {note}" for sc in scenarios for note in sc.notes]
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:]), *notes])
