"""The CLI's output: ``dra-extender explain`` and ``dra-extender simulate`` as tables, JSON or YAML.

``explain --state DIR TARGET``: TARGET is ``namespace/pod`` (or ``pod`` in ``default``) of the state, or
a file holding a ResourceClaim or ResourceClaimTemplate (what-if: nothing is created). By default it prints
a summary (``app.explain.summary``: nodes per verdict, nodes grouped by reason, the ``--best`` nodes in
full); with ``--node NAME`` or ``--all`` the full explanation of that node or of every node: the
per-node verdicts, then per node the allocation that would be chosen with its score broken down, the
device funnel of every request and a few named rejected devices (``-o json`` / ``-o yaml``: the REST answer
of ``app.explain.pod``, same content).

``simulate -o table`` renders simulate's document: per pod the node and devices (or why not), then
per node and DeviceClass the utilisation and fragmentation (whole free NUMA / PCIe groups, the largest
free aligned set) after every pod was placed, and per class the totals.

Tables use ``rich`` when it is installed, else plain aligned text (same columns).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from allocator.alignment import node_topology
from allocator.explain import STAGE_TITLES, STAGES, class_usage
from app.explain.models import BadObject, NodeVerdict, NotFound, PodExplanation, WhatIfExplanation
from app.explain.pod import explain_object, explain_pod, parse_object
from app.explain.summary import NODES_PER_GROUP, ExplanationSummary, summarize_pod, summarize_what_if
from app.explain.views import known_nodes
from app.scheduling.service import SchedulingService

__all__ = [
    "OUTPUT_FORMATS",
    "add_explain_parser",
    "add_output_flag",
    "positive_int",
    "render_explanation",
    "render_simulation",
    "render_simulation_summary",
    "render_summary",
    "run_explain",
    "write_document",
]

EXIT_OK = 0
EXIT_USAGE = 2

_EXAMPLE_ROWS = 12
"""Rejected devices listed per node (all requests together)."""

_EXAMPLES_PER_REQUEST = 4
"""Rejected devices listed per request, from the last stage that removed devices backwards."""

_CLAIM_PREFIX = re.compile(r"^claim [^,\s]+, ")
"""How a filter reason names the pod's claim (``claim ns/name, request gpu: ...``)."""

_STAGE_HEADERS = {
    "in_pools": "in pools",
    "class_selectors": "class sel.",
    "request_selectors": "request sel.",
    "tolerations": "taints ok",
    "not_in_use": "not in use",
    "counters_capacity": "counters/cap.",
    "constraints": "constraints",
}


# --- tables -----------------------------------------------------------------------------------------------


class _Table:
    """A titled table rendered with rich when available, else as aligned plain text."""

    def __init__(self, title: str, columns: Sequence[str]) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []

    def add(self, *cells: object) -> None:
        self.rows.append(["" if c is None else str(c) for c in cells])


class _Output:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        try:
            from rich.console import Console
        except ImportError:  # rich is optional: plain text keeps the CLI usable without it
            self._console = None
        else:
            self._console = Console(
                file=out, width=None if out.isatty() else 160, highlight=False, soft_wrap=False
            )

    def line(self, text: str = "") -> None:
        if self._console is not None:
            self._console.print(text, markup=False)
        else:
            self.out.write(text + "\n")

    def table(self, table: _Table) -> None:
        if self._console is not None:
            from rich.table import Table

            rendered = Table(title=table.title, title_justify="left", show_lines=False)
            for column in table.columns:
                rendered.add_column(column, overflow="fold")
            for row in table.rows:
                rendered.add_row(*row)
            self._console.print(rendered)
            return
        widths = [len(c) for c in table.columns]
        for row in table.rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
        self.out.write(table.title + "\n")
        for row in [table.columns, ["-" * w for w in widths], *table.rows]:
            self.out.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip() + "\n"
            )
        self.out.write("\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


# --- output formats ---------------------------------------------------------------------------------------

OUTPUT_FORMATS = ("table", "json", "yaml")


def add_output_flag(sub: argparse.ArgumentParser, default: str) -> None:
    """``-o/--output table|json|yaml``, the same on every command that prints a result (as kubectl);
    ``default`` is the command's own (simulate keeps JSON for the scripts that read it)."""
    sub.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default=default,
        help=f"table: readable tables; json or yaml: one document, the same content (default {default})",
    )


def write_document(document: Any, output: str, out: TextIO) -> None:
    """``document`` (plain JSON data) as JSON (orjson, indent 2) or YAML (block style, keys in order)."""
    if output == "yaml":
        out.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    else:
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


# --- explain ----------------------------------------------------------------------------------------------


def add_explain_parser(
    commands: Any,
    common: Callable[[argparse.ArgumentParser], None],
    policy_flags: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``explain`` on the CLI's subcommands (``common``: --state, --feature-gates)."""
    sub = commands.add_parser(
        "explain",
        help="why a pod (or a what-if claim) fits or not on each node",
        description="Explain the placement of a pending pod of the state, or of a ResourceClaim / "
        "ResourceClaimTemplate file (what-if, nothing is created).",
    )
    common(sub)
    policy_flags(sub)
    sub.add_argument("target", metavar="NAMESPACE/POD | FILE", help="a pod of the state, or a claim file")
    detail = sub.add_mutually_exclusive_group()
    detail.add_argument("--node", help="explain only this node, in full")
    detail.add_argument(
        "--all", action="store_true", help="explain every node in full (long on a large cluster)"
    )
    sub.add_argument(
        "--best",
        type=positive_int,
        default=3,
        metavar="N",
        help="without --node/--all: how many of the best nodes the summary explains in full (default 3)",
    )
    add_output_flag(sub, "table")
    sub.epilog = (
        "Exit status: 0 when it ran, 2 on unusable input or an unknown pod / node (message on stderr)."
    )


def run_explain(args: argparse.Namespace, service: SchedulingService, out: TextIO | None = None) -> int:
    """Run ``explain`` on a configured service; print to ``out`` (stdout). Returns the exit code."""
    out = out or sys.stdout
    target: str = args.target
    full = args.node is not None or args.all
    try:
        path = Path(target)
        explanation: PodExplanation | WhatIfExplanation | ExplanationSummary
        if path.is_file():
            obj = parse_object(path.read_bytes())
            if full:
                explanation = explain_object(service, obj, args.node)
            else:
                explanation = summarize_what_if(service, obj, args.best)
        else:
            namespace, _, name = target.rpartition("/")
            namespace = namespace or "default"
            if full:
                explanation = explain_pod(service, namespace, name, args.node)
            else:
                explanation = summarize_pod(service, namespace, name, args.best)
    except (NotFound, BadObject, OSError) as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.output != "table":
        write_document(explanation.model_dump(mode="json"), args.output, out)
    elif isinstance(explanation, ExplanationSummary):
        render_summary(explanation, out)
    else:
        render_explanation(explanation, out)
    out.flush()
    return EXIT_OK


def _render_header(o: _Output, explanation: PodExplanation | ExplanationSummary) -> None:
    bound = f", bound to {explanation.nodeName}" if explanation.nodeName else ""
    o.line(f"Pod {explanation.namespace}/{explanation.name}{bound}")
    for c in explanation.claims:
        state = "allocated" if c.allocated else "to allocate"
        label = "extended resources" if c.extendedResources else f"pod claim {c.podClaimName}"
        group = f", the claim of PodGroup {c.podGroup}" if c.podGroup else ""
        o.line(f"  {label}: ResourceClaim {c.claim} ({state}{group})")
    if not explanation.claims:
        o.line("  no ResourceClaims: every node passes")


def render_summary(summary: ExplanationSummary, out: TextIO) -> None:
    """The summary (``app.explain.summary``): counts, groups by reason, the best nodes in full."""
    o = _Output(out)
    if summary.kind == "Pod":
        _render_header(o, summary)
    else:
        o.line(f"What-if {summary.kind} {summary.namespace}/{summary.name} (nothing is created)")
    o.line(f"device selection {summary.deviceSelection}, scoring {summary.scoringPolicy}")
    if summary.error:
        o.line(f"ERROR (fails the pod on every node): {summary.error}")
    counts = ", ".join(f"{count} {verdict}" for verdict, count in summary.verdicts.items())
    o.line(f"{summary.nodes} nodes" + (f": {counts}" if counts else ""))
    o.line()
    groups = _Table("Nodes by verdict and reason", ["nodes", "verdict", "reason", "for example"])
    for g in summary.groups:
        more = f" (+{g.count - len(g.nodes)})" if g.count > len(g.nodes) else ""
        groups.add(g.count, g.verdict, g.reason, ", ".join(g.nodes) + more)
    o.table(groups)
    if summary.best:
        fitting = summary.best[0].verdict == "fits"
        o.line(
            f"Best {len(summary.best)} node(s) by score, in full:"
            if fitting
            else "No node fits; one node of each of the largest groups, in full:"
        )
        o.line()
    for verdict in summary.best:
        _render_node(o, verdict)
    o.line("(--node NAME: one node in full; --all: every node in full)")


def render_explanation(explanation: PodExplanation | WhatIfExplanation, out: TextIO) -> None:
    """Readable tables for an explanation (see the module docstring)."""
    o = _Output(out)
    if isinstance(explanation, PodExplanation):
        _render_header(o, explanation)
        last = explanation.lastBind
        if last is not None:
            o.line(
                f"  last bind: {last.node} at {last.at} "
                + (f"failed: {last.error}" if last.error else "succeeded")
            )
    else:
        o.line(f"What-if {explanation.kind} {explanation.namespace}/{explanation.name} (nothing is created)")
    o.line(f"device selection {explanation.deviceSelection}, scoring {explanation.scoringPolicy}")
    if explanation.error:
        o.line(f"ERROR (fails the pod on every node): {explanation.error}")
    o.line()
    summary = _Table("Nodes", ["node", "verdict", "score", "placement", "reason"])
    for v in explanation.nodes:
        summary.add(v.node, v.verdict, v.score.score if v.score else "", v.placement or "", v.reason)
    o.table(summary)
    for verdict in explanation.nodes:
        if verdict.verdict == "fits" or any(r.stages and r.stages[0].count for r in verdict.requests):
            _render_node(o, verdict)


def _render_node(o: _Output, v: NodeVerdict) -> None:
    score = f", score {v.score.score}/10" if v.score else ""
    placement = f" ({v.placement})" if v.placement else ""
    o.line(f"== {v.node}: {v.verdict}{score}{placement}")
    if v.reason:
        o.line(f"   {v.reason}")
    if v.allocations:
        table = _Table(
            f"{v.node}: allocation that would be chosen", ["claim", "request", "device", "NUMA", "PCIe root"]
        )
        for allocation in v.allocations:
            for d in allocation.devices:
                table.add(
                    allocation.claim,
                    d.request,
                    f"{d.driver}/{d.pool}/{d.device}",
                    d.numaNode if d.numaNode is not None else "?",
                    ", ".join(d.pcieRoot) or "?",
                )
        o.table(table)
    if v.score:
        table = _Table(
            f"{v.node}: score {v.score.score} ({v.score.policy})", ["component", "value", "weight", "detail"]
        )
        for c in v.score.components:
            table.add(c.name, "n/a" if c.value is None else f"{c.value:.2f}", f"{c.weight:g}", c.detail)
        o.table(table)
    if v.requests:
        table = _Table(
            f"{v.node}: devices left after each stage",
            ["claim", "request", "class", "needed", *(_STAGE_HEADERS[s] for s in STAGES)],
        )
        for r in v.requests:
            counts = {s.stage: s.count for s in r.stages}
            cells = [f"{counts[s]}{' <' if r.shortAt == s else ''}" if s in counts else "" for s in STAGES]
            table.add(r.claim, r.request, r.deviceClass, r.needed, *cells)
        o.table(table)
        examples = _Table(
            f"{v.node}: rejected devices (examples)", ["request", "stage", "device", "rule", "why"]
        )
        for r in v.requests:
            # The last stages first: they are the ones that decided (every other driver's device fails
            # the class selectors, which says little).
            shown = 0
            for s in reversed(r.stages):
                for e in s.examples:
                    if shown < _EXAMPLES_PER_REQUEST and len(examples.rows) < _EXAMPLE_ROWS:
                        examples.add(r.request, STAGE_TITLES[s.stage], e.device, e.rule, e.message)
                        shown += 1
        if examples.rows:
            o.table(examples)
    o.line()


# --- simulate ---------------------------------------------------------------------------------------------


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
    o = _Output(out)
    pods = document.get("pods") or []
    placed = sum(1 for p in pods if p.get("node"))
    placements = _Table(
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
    usage = _Table(
        "Utilisation and fragmentation per node and device class",
        ["node", "class", "devices", "in use", "free", "tainted", "whole free groups", "largest free group"],
    )
    totals = _usage(service, usage)
    o.table(usage)
    _render_simulation_summary(o, pods, totals)


def render_simulation_summary(document: Mapping[str, Any], service: SchedulingService, out: TextIO) -> None:
    """The end of a simulation in brief: pods placed and pending, pending pods grouped by reason, and the
    devices per DeviceClass in use after the run."""
    _render_simulation_summary(_Output(out), document.get("pods") or [], _usage(service, None))


def _usage(service: SchedulingService, rows: _Table | None) -> dict[str, list[int]]:
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
    o: _Output, pods: Sequence[Mapping[str, Any]], totals: Mapping[str, list[int]]
) -> None:
    summary = _Table("Per device class", ["class", "devices", "in use", "free", "tainted", "utilisation"])
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
        table = _Table("Pending pods by reason", ["pods", "reason", "for example"])
        for reason, names in sorted(pending.items(), key=lambda item: (-len(item[1]), item[0])):
            more = f" (+{len(names) - NODES_PER_GROUP})" if len(names) > NODES_PER_GROUP else ""
            table.add(len(names), reason, ", ".join(names[:NODES_PER_GROUP]) + more)
        o.table(table)
