"""Command line: ``dra-extender COMMAND`` (also ``python -m app``); this module parses and dispatches.

``serve`` (``app.cli.serve``): the extender on a state directory, or in cluster mode on a live cluster.

``simulate --state DIR`` (``app.cli.simulate``): schedule every pending pod of the state offline, one at
a time, and print one JSON document to stdout; ``-o yaml`` the same in YAML, ``-o table`` tables instead.

``--version`` prints the version, the Python version, the Kubernetes API supported and the git commit
(``app.config.buildinfo``).

``explain --state DIR ns/pod | claim.yaml``: why a pod (or a what-if claim) fits or not on each node
(``app.cli.explain``): a summary by default, ``--node`` / ``--all`` in full.

``simulate`` and ``explain`` read a live cluster instead of ``--state`` with ``--kubeconfig`` /
``--context`` (``app.kube.snapshot``: a read-only list of every kind they need).

``validate [--state DIR] [--config FILE]``: check them without serving (``app.cli.validate``).

``completion bash|zsh|tcsh|fish|powershell``: the shell completion script (shtab, from the parser of
``app.cli.flags``).

``serve``, ``simulate`` and ``explain`` take ``--device-selection aligned|first-fit`` (default aligned),
``--scoring-policy binpack|spread`` and ``--score-weights`` (``app.config.settings.SchedulingSettings``).

Exit codes: 0 when the command ran (pods may stay pending), 2 on unusable input (missing directory,
invalid manifests or DRA objects, bad flags, an unknown ``--nodes`` name, a port in use, a cluster that
cannot be read, a what-if file with an unknown field; with ``--strict`` also the state's problems) with
the message on stderr. The state's problems (``app.cli.runtime.Runtime.warnings``: unknown fields and
kinds, CEL that does not compile, missing pod claims, ...) are warnings on stderr otherwise; ``validate``
exits 1 listing them. Ctrl-C: 130 (``app.cli.run``).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Sequence

import shtab

from app.cli.explain import run_explain
from app.cli.flags import parser, settings_from_args
from app.cli.runtime import EXIT_OK, EXIT_USAGE, Runtime, StartupError, load_runtime
from app.cli.serve import run_serve
from app.cli.simulate import run_simulate
from app.cli.validate import run_validate
from app.config.derivedconfig import ConfigError, load_config
from app.config.extenderconfig import COMMAND_SECTIONS
from app.config.logs import configure as configure_logging

__all__ = ["main", "parse_args"]


log = logging.getLogger(__name__)


def _offline(args: argparse.Namespace) -> Runtime:
    """The runtime of ``simulate`` and ``explain``: the state directory, or a snapshot of the live cluster
    with ``--kubeconfig`` / ``--context``. No kube-scheduler waits for their answers, so every node is
    decided (filter's time budget is for the HTTP path). Raises StartupError."""
    settings = settings_from_args(args)
    live = args.kubeconfig is not None or args.context is not None
    if live == (args.state is not None):
        raise StartupError(
            "--state and --kubeconfig/--context exclude each other"
            if live
            else f"{args.command} needs --state DIR, or a live cluster: --kubeconfig PATH, --context NAME"
        )
    objects = None
    if live:
        from app.kube.snapshot import SnapshotError, take_snapshot

        try:
            objects = take_snapshot(args.kubeconfig, args.context, strict_fields=args.strict)
        except SnapshotError as e:
            raise StartupError(str(e)) from e
    runtime = load_runtime(settings, args.strict, objects)
    runtime.service.filter_time_budget = math.inf
    return runtime


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options, with a ``--config`` file's settings as the defaults of the command's flags (a flag
    given on the command line wins). Raises SystemExit (argparse) or StartupError (unusable config, or a
    file it names that cannot be used, naming the field)."""
    args, problems = _with_config(parser().parse_args(argv), argv)
    if problems:
        raise StartupError(problems[0])
    return args


def _with_config(
    args: argparse.Namespace, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, list[str]]:
    """``args`` (the command line's options) parsed again with the ``--config`` file's settings as the
    defaults, and the files the config names that cannot be used (``ExtenderConfig.file_problems``).
    Raises StartupError (the config file itself cannot be used), SystemExit."""
    if args.command not in COMMAND_SECTIONS or args.config is None:
        return args, []
    try:
        config = load_config(args.config)
    except ConfigError as e:
        raise StartupError(str(e)) from e
    # Options naming files default to None: one set here was given on the command line, overriding the file.
    given = {dest for dest, value in vars(args).items() if value is not None}
    problems = config.file_problems(COMMAND_SECTIONS[args.command], overridden=given)
    return parser({args.command: config.defaults_for(args.command)}).parse_args(argv), problems


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ran, 2 unusable input or bad flags)."""
    try:
        args = parser().parse_args(argv)
        try:
            # Errors are reported in the log format asked for: on the command line while the config file
            # cannot be used, else the config's too (below).
            args, problems = _with_config(args, argv)
        except StartupError as e:
            return _startup_error(args, e)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), message already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if problems:
        return _startup_error(args, StartupError(problems[0]))
    try:
        if args.command == "completion":
            print(shtab.complete(parser(), shell=args.shell))
            return EXIT_OK
        if args.command == "validate":
            return run_validate(args)
        if args.command == "explain":
            return run_explain(args, _offline(args).service)
        return run_serve(args, argv) if args.command == "serve" else run_simulate(args, _offline(args))
    except StartupError as e:
        return _startup_error(args, e)


def _startup_error(args: argparse.Namespace, error: StartupError) -> int:
    """Report ``error`` on stderr, as one JSON record when serve logs JSON (every line of its stream is
    JSON); the exit code."""
    if args.command == "serve" and args.log_format == "json":
        # Shown at any --log-level: with critical the one line saying why serve stopped was dropped.
        configure_logging("error" if args.log_level == "critical" else args.log_level, "json")
        log.error("%s", error)
    else:
        print(f"dra-extender: {error}", file=sys.stderr)
    return EXIT_USAGE
