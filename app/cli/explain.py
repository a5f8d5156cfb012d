"""``dra-extender explain``: why a pod, or a what-if claim, fits or not, as tables, JSON or YAML.

``explain --state DIR TARGET``: TARGET is ``namespace/pod`` (or ``pod`` in ``default``) of the state, or
a file holding a ResourceClaim or ResourceClaimTemplate (what-if: nothing is created). By default it prints
a summary (``app.explain.summary``: nodes per verdict, nodes grouped by reason, the ``--best`` nodes in
full); with ``--node NAME`` or ``--all`` the full explanation of that node or of every node: the
per-node verdicts, then per node the allocation that would be chosen with its score broken down, the
device funnel of every request and a few named rejected devices (``-o json`` / ``-o yaml``: the REST answer of
``app.explain.pod``, same content).

Tables: ``app.cli.output``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from allocator.funnel import STAGE_TITLES, STAGES
from app.cli.output import Output, Table, add_output_flag, positive_int, write_document
from app.cli.runtime import EXIT_OK, EXIT_USAGE
from app.config.settings import DEFAULT_MAX_BODY_BYTES
from app.explain.models import BadObject, NodeVerdict, NotFound, PodExplanation, WhatIfExplanation
from app.explain.pod import explain_object, explain_pod, parse_object
from app.explain.summary import ExplanationSummary, summarize_pod, summarize_what_if
from app.scheduling.service import SchedulingService
from app.state.documents import not_regular, read_at_most

__all__ = [
    "add_explain_parser",
    "render_explanation",
    "render_summary",
    "run_explain",
]


_EXAMPLE_ROWS = 12
"""Rejected devices listed per node (all requests together)."""

_EXAMPLES_PER_REQUEST = 4
"""Rejected devices listed per request, from the last stage that removed devices backwards."""


_STAGE_HEADERS = {
    "in_pools": "in pools",
    "class_selectors": "class sel.",
    "request_selectors": "request sel.",
    "tolerations": "taints ok",
    "not_in_use": "not in use",
    "counters_capacity": "counters/cap.",
    "constraints": "constraints",
}


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
        "Exit status: 0 when it ran, 2 on unusable input or an unknown pod / node (message on stderr). A "
        "what-if FILE is always strict: a field its apiVersion does not have is an error."
    )


def run_explain(args: argparse.Namespace, service: SchedulingService, out: TextIO | None = None) -> int:
    """Run ``explain`` on a configured service; print to ``out`` (stdout). Returns the exit code."""
    out = out or sys.stdout
    target: str = args.target
    full = args.node is not None or args.all
    try:
        path = Path(target)
        explanation: PodExplanation | WhatIfExplanation | ExplanationSummary
        if path.exists() and not path.is_file() and not path.is_dir():
            # Never opened: a FIFO without a writer would block, a device may never end.
            raise BadObject(f"{path}: {not_regular(path)} (a what-if is a claim file)")
        if path.is_file():
            obj = parse_object(_read_what_if(path))
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


def _read_what_if(path: Path) -> bytes:
    """The what-if file, at most the body ``serve`` takes (``DEFAULT_MAX_BODY_BYTES``). Raises BadObject
    or OSError."""
    data, size = read_at_most(path, DEFAULT_MAX_BODY_BYTES)
    if size > DEFAULT_MAX_BODY_BYTES:
        raise BadObject(
            f"{path}: larger than {DEFAULT_MAX_BODY_BYTES >> 20} MiB ({size} bytes), the largest what-if "
            "serve takes"
        )
    return data


def _render_header(o: Output, explanation: PodExplanation | ExplanationSummary) -> None:
    bound = f", bound to {explanation.nodeName}" if explanation.nodeName else ""
    o.line(f"Pod {explanation.namespace}/{explanation.name}{bound}")
    for c in explanation.claims:
        label = "extended resources" if c.extendedResources else f"pod claim {c.podClaimName}"
        if c.problem:
            # A pod claim's problem names the pod claim, a missing PodGroup's concerns the whole pod: only
            # the extended-resource claim's needs the label.
            o.line(f"  {label}: {c.problem}" if c.extendedResources else f"  {c.problem}")
            continue
        state = "allocated" if c.allocated else "to allocate"
        group = f", the claim of PodGroup {c.podGroup}" if c.podGroup else ""
        o.line(f"  {label}: ResourceClaim {c.claim} ({state}{group})")
    if not explanation.claims:
        o.line("  no ResourceClaims: every node passes")


def render_summary(summary: ExplanationSummary, out: TextIO) -> None:
    """The summary (``app.explain.summary``): counts, groups by reason, the best nodes in full."""
    o = Output(out)
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
    groups = Table("Nodes by verdict and reason", ["nodes", "verdict", "reason", "for example"])
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
    o = Output(out)
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
    summary = Table("Nodes", ["node", "verdict", "score", "placement", "reason"])
    for v in explanation.nodes:
        summary.add(v.node, v.verdict, v.score.score if v.score else "", v.placement or "", v.reason)
    o.table(summary)
    for verdict in explanation.nodes:
        if verdict.verdict == "fits" or any(r.stages and r.stages[0].count for r in verdict.requests):
            _render_node(o, verdict)


def _render_node(o: Output, v: NodeVerdict) -> None:
    score = f", score {v.score.score}/10 ({v.score.unrounded:.3f} unrounded)" if v.score else ""
    placement = f" ({v.placement})" if v.placement else ""
    o.line(f"== {v.node}: {v.verdict}{score}{placement}")
    if v.reason:
        o.line(f"   {v.reason}")
    if v.allocations:
        table = Table(
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
        table = Table(
            f"{v.node}: score {v.score.score} ({v.score.unrounded:.3f} unrounded, {v.score.policy})",
            ["component", "value", "weight", "detail"],
        )
        for c in v.score.components:
            table.add(c.name, "n/a" if c.value is None else f"{c.value:.2f}", f"{c.weight:g}", c.detail)
        o.table(table)
    if v.requests:
        table = Table(
            f"{v.node}: devices left after each stage",
            ["claim", "request", "class", "needed", *(_STAGE_HEADERS[s] for s in STAGES)],
        )
        for r in v.requests:
            counts = {s.stage: s.count for s in r.stages}
            cells = [f"{counts[s]}{' <' if r.shortAt == s else ''}" if s in counts else "" for s in STAGES]
            table.add(r.claim, r.request, r.deviceClass, r.needed, *cells)
        o.table(table)
        examples = Table(
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
