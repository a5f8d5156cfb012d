"""``dra-extender simulate``: every pending pod through filter → prioritize → bind, in creation order.

No kube-scheduler runs: the pods are placed as it would call the extender (``simulate``), kube-scheduler's
NodeResourcesFit included for extended resources no DeviceClass backs, and bound in memory. The answer
is one JSON (or YAML) document, or with ``-o table`` per pod the node and devices (or why not), then per
node and DeviceClass the utilisation and fragmentation (whole free NUMA / PCIe groups, the largest free
aligned set) after every pod was placed, and per class the totals (``app.cli.output``).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from allocator.alignment import node_topology
from allocator.classusage import class_usage
from allocator.errors import AllocatorError
from app.cli.output import Output, Table, write_document
from app.cli.progress import progress_bar
from app.cli.runtime import EXIT_OK, Runtime, StartupError
from app.explain.summary import NODES_PER_GROUP
from app.explain.views import known_nodes
from app.scheduling.binder import BindError
from app.scheduling.extended import missing_extended_resources
from app.scheduling.service import FilterOutcome, SchedulingService
from app.state.podclaims import claim_names

__all__ = ["choose_node", "render_simulation", "render_simulation_summary", "run_simulate", "simulate"]


log = logging.getLogger(__name__)


def _claims(service: SchedulingService, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{"name", "allocation"}]`` for the pod's existing claims; allocation in API shape or None.

    ``allocationTimestamp`` is left out: it is wall-clock time, and equal inputs must give equal output.
    """
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    result = []
    for name in claim_names(pod):
        claim = service.state.get("ResourceClaim", f"{namespace}/{name}")
        if claim is None:
            continue
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            allocation = {k: v for k, v in allocation.items() if k != "allocationTimestamp"}
        result.append({"name": name, "allocation": allocation or None})
    return result


def choose_node(service: SchedulingService, pod: Mapping[str, Any], passed: list[str]) -> str:
    """The node kube-scheduler would pick from the extender's view: prioritize only with more than one node
    (as kube-scheduler), highest score, ties to the first node in candidate order."""
    if len(passed) == 1:
        return passed[0]
    scores = service.prioritize(pod, passed)
    return passed[max(range(len(passed)), key=scores.__getitem__)]  # max keeps the first of equals


def _missing_extended_resources(
    service: SchedulingService, pod: Mapping[str, Any], candidates: list[str]
) -> dict[str, str]:
    """node → NodeResourcesFit-style reason for the candidates missing a requested extended resource."""
    state = service.state
    classes = state.objects["DeviceClass"].values()
    try:
        # What a node without any allocatable misses, every node lacking it may miss; nothing: no node.
        if not missing_extended_resources(pod, None, classes, state.gates):
            return {}
        missing = {
            n: missing_extended_resources(pod, state.get("Node", n), classes, state.gates) for n in candidates
        }
    except AllocatorError:
        return {}  # a malformed quantity: filter reports it as the pod's error
    return {
        n: "Insufficient " + ", ".join(names) + " (not in node allocatable and no DeviceClass backs it)"
        for n, names in missing.items()
        if names
    }


def _schedule(
    service: SchedulingService, pod: Mapping[str, Any], candidates: list[str], order: Mapping[str, int]
) -> dict[str, Any]:
    """One pod through filter → prioritize → bind; ``order``: candidate → position (reasons in order)."""
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", str(meta.get("name"))
    # kube-scheduler's NodeResourcesFit runs before the extender: nodes lacking an extended resource
    # that no DeviceClass backs never reach filter (and with no node left, filter is not called).
    misfit = _missing_extended_resources(service, pod, candidates)
    fitting = [node for node in candidates if node not in misfit] if misfit else candidates
    outcome = service.filter(pod, fitting) if fitting else FilterOutcome()
    failed = {**misfit, **outcome.failed, **outcome.unresolvable}  # unresolvable wins (kube-scheduler)
    reasons = dict(sorted(failed.items(), key=lambda item: order[item[0]]))
    node, error = None, outcome.error or None
    if error is None and outcome.passed:
        chosen = choose_node(service, pod, outcome.passed)
        try:
            service.bind(namespace, name, str(meta.get("uid") or ""), chosen)
            node = chosen
        except (BindError, AllocatorError) as e:
            error = str(e)
    current = service.state.get("Pod", f"{namespace}/{name}") or pod
    return {
        "namespace": namespace,
        "name": name,
        "node": node,
        "claims": _claims(service, current),
        "reasons": reasons,
        "error": error,
    }


def simulate(
    service: SchedulingService,
    candidates: Sequence[str] | None = None,
    advance: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Schedule every pending pod, as kube-scheduler would call the extender, and bind it (in memory).

    Pods in ``ClusterState.pending_pods()`` order (creationTimestamp, then namespace/name); each goes
    through ``filter`` on ``candidates`` (default: all node names, sorted) → ``prioritize`` (only with more
    than one passing node) → ``bind`` on the best node (ties: first in candidate order). Returns::

        {"pods": [{"namespace", "name", "node": str | None,
                   "claims": [{"name": <ResourceClaim>, "allocation": <status.allocation> | None}],
                   "reasons": {<node>: <why not>},    # FailedNodes + FailedAndUnresolvableNodes
                   "error": str | None}]}             # filter Error (fatal) or the bind error

    ``advance`` is called after each pod (a progress bar).
    """
    names = list(candidates) if candidates is not None else sorted(service.state.objects["Node"])
    order = {name: i for i, name in enumerate(dict.fromkeys(names))}
    placements = []
    for pod in service.state.pending_pods():
        placements.append(_schedule(service, pod, names, order))
        advance()
    return {"pods": placements}


def run_simulate(args: argparse.Namespace, runtime: Runtime) -> int:
    """``simulate`` on ``runtime`` (the state directory or a snapshot): the document on stdout."""
    for note in runtime.notes:
        log.debug("%s", note)
    unknown = [name for name in args.nodes or () if name not in runtime.state.objects["Node"]]
    if unknown:
        raise StartupError(f"--nodes: no such node in the state: {', '.join(unknown)}")
    pending = len(runtime.state.pending_pods())
    with progress_bar(pending, f"scheduling {pending} pending pod(s)") as advance:
        document = simulate(runtime.service, args.nodes, advance)
    if args.output == "table":
        render_simulation(document, runtime.service, sys.stdout)
    else:
        write_document(document, args.output, sys.stdout)
        if sys.stderr.isatty():  # an operator watching: the summary beside the document
            render_simulation_summary(document, runtime.service, sys.stderr)
    sys.stdout.flush()
    return EXIT_OK


_CLAIM_PREFIX = re.compile(r"^claim [^,\s]+, ")
"""How a filter reason names the pod's claim (``claim ns/name, request gpu: ...``)."""


def _devices_text(claims: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for claim in claims:
        allocation = claim.get("allocation")
        if not allocation:
            continue
        by_request: dict[str, list[str]] = defaultdict(list)
        for r in allocation["devices"]["results"]:
            by_request[r["request"]].append(r["device"])
        parts.append("; ".join(f"{req}: {', '.join(devs)}" for req, devs in by_request.items()))
    return " | ".join(parts)


def _telling_reason(pod: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Why a pod stayed pending, in one reason, and the candidate nodes that gave it: the pod's error, or
    the reason most nodes gave (nodes without a single matching device say the least: another reason
    first)."""
    if pod.get("error"):
        return f"error: {pod['error']}", []
    reasons: Mapping[str, str] = pod.get("reasons") or {}
    if not reasons:
        return "no candidate node", []
    counts: dict[str, list[str]] = defaultdict(list)
    for node, reason in reasons.items():
        counts[reason].append(node)
    reason, nodes = max(counts.items(), key=lambda item: (" has 0 device(s) " not in item[0], len(item[1])))
    return reason, nodes


def _why_pending(pod: Mapping[str, Any]) -> str:
    reason, nodes = _telling_reason(pod)
    if not nodes:
        return reason
    more = f" (+{len(nodes) - NODES_PER_GROUP})" if len(nodes) > NODES_PER_GROUP else ""
    others = len(pod.get("reasons") or ()) - len(nodes)
    listed = ", ".join(nodes[:NODES_PER_GROUP]) + more
    return f"{listed}: {reason}" + (f" (+{others} node(s) with other reasons)" if others else "")


def render_simulation(document: Mapping[str, Any], service: SchedulingService, out: TextIO) -> None:
    """Per-pod placement, utilisation and fragmentation per node and DeviceClass (after the run), then
    the summary (``render_simulation_summary``)."""
    o = Output(out)
    pods = document.get("pods") or []
    placed = sum(1 for p in pods if p.get("node"))
    placements = Table(
        f"Placement: {placed} of {len(pods)} pod(s) placed (device selection {service.device_selection}, "
        f"scoring {service.scoring.policy})",
        ["pod", "node", "devices", "why not"],
    )
    for p in pods:
        placements.add(
            f"{p['namespace']}/{p['name']}",
            p.get("node") or "-",
            _devices_text(p.get("claims") or ()),
            "" if p.get("node") else _why_pending(p),
        )
    o.table(placements)
    usage = Table(
        "Utilisation and fragmentation per node and device class",
        ["node", "class", "devices", "in use", "free", "tainted", "whole free groups", "largest free group"],
    )
    totals = _usage(service, usage)
    o.table(usage)
    _render_simulation_summary(o, pods, totals)


def render_simulation_summary(document: Mapping[str, Any], service: SchedulingService, out: TextIO) -> None:
    """The end of a simulation in brief: pods placed and pending, pending pods grouped by reason, and the
    devices per DeviceClass in use after the run."""
    _render_simulation_summary(Output(out), document.get("pods") or [], _usage(service, None))


def _usage(service: SchedulingService, rows: Table | None) -> dict[str, list[int]]:
    """Per DeviceClass [devices, in use, tainted] over every node; each node's row into ``rows``."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    with service.lock:
        state = service.state
        topology = service.scoring.topology
        for node in known_nodes(service):
            groups = node_topology(state.inventory, node, topology)
            for u in class_usage(state.inventory, service.selectors, node, groups):
                if rows is not None:
                    rows.add(
                        node.name,
                        u.device_class,
                        u.total,
                        u.in_use,
                        u.free,
                        u.tainted,
                        f"{u.groups_free} of {u.groups_total}" if u.groups_total else "-",
                        u.largest_free_group if u.groups_total else "-",
                    )
                total = totals[u.device_class]
                total[0] += u.total
                total[1] += u.in_use
                total[2] += u.tainted
    return totals


def _render_simulation_summary(
    o: Output, pods: Sequence[Mapping[str, Any]], totals: Mapping[str, list[int]]
) -> None:
    summary = Table("Per device class", ["class", "devices", "in use", "free", "tainted", "utilisation"])
    for name, (total, in_use, tainted) in sorted(totals.items()):
        share = f"{100 * in_use / total:.0f}%" if total else "-"
        summary.add(name, total, in_use, total - in_use, tainted, share)
    o.table(summary)
    pending: dict[str, list[str]] = defaultdict(list)
    for p in pods:
        if not p.get("node"):
            # Every pod has claims of its own: without their names, pods failing alike group together.
            reason = _CLAIM_PREFIX.sub("", _telling_reason(p)[0])
            pending[reason].append(f"{p['namespace']}/{p['name']}")
    placed = len(pods) - sum(len(names) for names in pending.values())
    nodes_used = len({p["node"] for p in pods if p.get("node")})
    o.line(
        f"Summary: {len(pods)} pod(s): {placed} placed on {nodes_used} node(s), {len(pods) - placed} pending"
    )
    if pending:
        table = Table("Pending pods by reason", ["pods", "reason", "for example"])
        for reason, names in sorted(pending.items(), key=lambda item: (-len(item[1]), item[0])):
            more = f" (+{len(names) - NODES_PER_GROUP})" if len(names) > NODES_PER_GROUP else ""
            table.add(len(names), reason, ", ".join(names[:NODES_PER_GROUP]) + more)
        o.table(table)
