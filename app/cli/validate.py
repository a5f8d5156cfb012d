"""``dra-extender validate``: check a state directory and / or a config file without serving.

The state is loaded with the same rules as ``serve`` and ``simulate``; what those print as warnings are
the state's problems here (``app.cli.runtime.Runtime.warnings``: entries that are not regular files,
unknown kinds and fields, CEL selectors that do not compile or exceed the API server's cost limits
(``allocator.cel.limits``), pod claims whose ResourceClaim or ResourceClaimTemplate is missing, a state
without any object the extender uses), listed in full. The
config file is parsed and compiled, the files its fields name are checked as ``serve`` checks them
(``app.config.files``, naming the field), and with a state its cluster-wide derived attributes are
computed on the state's devices, reporting runtime errors once per attribute with the device count.

Exit status: 0 clean, 1 problems (listed on stdout), 2 unusable input (on stderr: a file that does not
parse, an invalid object or config field). ``--strict`` changes nothing here: every problem is listed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from allocator.selectors import SelectorCache
from app.cli.runtime import StartupError, build_runtime, new_engine, state_summary
from app.config.derivedconfig import ConfigError, load_config

__all__ = ["add_validate_parser", "run_validate"]

EXIT_VALID, EXIT_PROBLEMS, EXIT_INVALID = 0, 1, 2


def add_validate_parser(commands: Any, common: Callable[..., None]) -> None:
    """Register ``validate`` on the CLI's subcommands (``common``: --state, --config, --feature-gates)."""
    sub = commands.add_parser(
        "validate",
        help="check a state directory and/or a config file",
        description="Load a state directory and/or a config file as serve would, and list every problem: "
        "unknown fields and kinds, CEL expressions that do not compile or exceed the API server's cost "
        "limits, pod claims whose ResourceClaim or "
        "template is missing, manifest entries that are not regular files, files named in the config "
        "that cannot be used, derived attributes that fail on the state's devices.",
    )
    common(sub, state_required=False)
    sub.epilog = "Exit status: 0 clean, 1 problems (listed), 2 unusable input (on stderr)."


def run_validate(args: argparse.Namespace) -> int:
    """Run ``validate``; the verdicts and problems go to stdout, unusable input to stderr. Returns the
    exit code."""
    if args.state is None and args.config is None:
        print("dra-extender: validate needs --state DIR, --config FILE or both", file=sys.stderr)
        return EXIT_INVALID
    runtime = None
    try:
        config = None if args.config is None else load_config(args.config)
        if args.state is not None:
            # Never strict: every problem is listed rather than the first one raised.
            runtime = build_runtime(
                args.state, args.feature_gates, cel_engine=args.cel_engine, config=args.config
            )
        elif config is not None:
            config.derivation(SelectorCache(new_engine(args.cel_engine)))  # compiles every expression
    except (StartupError, ConfigError) as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return EXIT_INVALID
    exit_code = EXIT_VALID
    if runtime is not None:
        counts = state_summary(runtime.state)
        summary = (
            f"{counts['nodes']} nodes, {counts['resource_slices']} ResourceSlices, {counts['devices']} "
            f"devices, {counts['resource_claims']} ResourceClaims, {counts['pending_pods']} pending pods"
        )
        exit_code = _report(args.state, summary, runtime.warnings)
    if config is not None:
        summary = f"{len(config.attributes)} derived attributes"
        if runtime is not None:
            summary += ", computed on the state's devices"
        # runtime.problems: the derived attributes that fail on some of the state's devices.
        problems = [*config.file_problems(), *(runtime.problems if runtime is not None else ())]
        exit_code = max(exit_code, _report(args.config, summary, problems))
    return exit_code


def _report(source: Path, summary: str, problems: Sequence[str]) -> int:
    """``<source>: valid (<summary>)``, or the count and each problem indented (the source's own name left
    out where a problem starts with it). Returns the exit code."""
    if not problems:
        print(f"{source}: valid ({summary})")
        return EXIT_VALID
    print(f"{source}: {len(problems)} problem{'s' if len(problems) > 1 else ''} ({summary}):")
    for problem in problems:
        # A CEL compile error spans lines (the expression, a caret under the error): kept under its problem.
        print("  " + problem.removeprefix(f"{source}: ").replace("\n", "\n    "))
    return EXIT_PROBLEMS
