"""``dra-extender validate``: check a state directory and / or a config file without serving.

The state is loaded with the same rules as ``serve`` and ``simulate`` (file, object and field named on
the first problem); the config file is parsed and compiled, and with a state its cluster-wide derived
attributes are computed on the state's devices, reporting runtime errors once per attribute with the
device count. Exit status: 0 valid, 1 valid but a derived attribute fails on some devices (it is then
absent there), 2 unusable input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from allocator.selectors import SelectorCache
from app.cli.runtime import StartupError, build_runtime, new_engine, state_summary
from app.config.derivedconfig import ConfigError, load_config

__all__ = ["add_validate_parser", "run_validate"]

EXIT_VALID, EXIT_RUNTIME_ERRORS, EXIT_INVALID = 0, 1, 2


def add_validate_parser(commands: Any, common: Callable[..., None]) -> None:
    """Register ``validate`` on the CLI's subcommands (``common``: --state, --config, --feature-gates)."""
    sub = commands.add_parser(
        "validate",
        help="check a state directory and/or a config file",
        description="Load a state directory and/or a config file as serve would, and report problems.",
    )
    common(sub, state_required=False)
    sub.epilog = (
        "Exit status: 0 valid, 1 a derived attribute fails on some devices, 2 unusable input (on stderr)."
    )


def run_validate(args: argparse.Namespace) -> int:
    """Run ``validate``; the verdicts go to stdout, unusable input to stderr. Returns the exit code."""
    if args.state is None and args.config is None:
        print("dra-extender: validate needs --state DIR, --config FILE or both", file=sys.stderr)
        return EXIT_INVALID
    try:
        if args.state is None:
            config = load_config(args.config)
            config.derivation(SelectorCache(new_engine(args.cel_engine)))  # compiles every expression
            print(f"{args.config}: valid ({len(config.attributes)} derived attributes)")
            return EXIT_VALID
        runtime = build_runtime(
            args.state,
            args.feature_gates,
            strict_fields=args.strict,
            cel_engine=args.cel_engine,
            config=args.config,
        )
    except (StartupError, ConfigError) as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return EXIT_INVALID
    for warning in runtime.warnings:
        print(f"dra-extender: warning: {warning}", file=sys.stderr)
    counts = state_summary(runtime.state)
    print(
        f"{args.state}: valid ({counts['nodes']} nodes, {counts['resource_slices']} ResourceSlices, "
        f"{counts['devices']} devices, {counts['resource_claims']} ResourceClaims, "
        f"{counts['pending_pods']} pending pods)"
    )
    if args.config is None:
        return EXIT_VALID
    attributes = len(load_config(args.config).attributes)
    if not runtime.problems:
        none = "no runtime errors on the state's devices"
        print(f"{args.config}: valid ({attributes} derived attributes, {none})")
        return EXIT_VALID
    print(f"{args.config}: {attributes} derived attributes, runtime errors on the state's devices:")
    for problem in runtime.problems:
        print(f"  {problem.removeprefix(f'{args.config}: ')}")
    return EXIT_RUNTIME_ERRORS
