"""A config file edited while ``serve`` runs: what is applied at once, what waits for a restart.

``config_watcher`` watches ``--config FILE`` (``app.config.derivedconfig.ConfigWatcher``); on a change,
``Reloader.apply`` parses the command line again with the new file's settings as defaults, so a flag given
on the command line still wins, and compares every setting (``app.config.extenderconfig.FIELDS``) with
the running one:

* applied at once (``LIVE``): ``scheduling.deviceSelection``, ``scoringPolicy``, ``scoreWeights``,
  ``filterTimeBudgetSeconds`` and ``filterTimeoutSeconds`` (decisions kept under the previous policy are
  dropped, so the next filter decides under the new one), ``server.logLevel``, ``verbosity`` and
  ``logFormat``, and ``derivedAttributes`` (every device derived again);
* every other setting is only logged, at warning, naming the field, its running and its new value, as
  needing a restart: listeners, TLS settings, feature gates, the CEL engine, the cluster connection and
  timings are built into running objects. The warning repeats on each later change until a restart;
* a field changed in the file that a command-line flag sets is logged as such, at warning.

One info line says what was applied; a change that alters no setting (a comment) is logged as that, never
as "reloaded". A file that does not parse, or whose values the settings refuse, changes nothing.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from app.cli.flags import parser, settings_from_args
from app.cli.runtime import StartupError
from app.config.derivedconfig import ConfigError, ConfigWatcher, ExtenderConfig, install
from app.config.extenderconfig import FIELDS, FieldSpec
from app.config.logs import adjust as adjust_logging
from app.scheduling.service import SchedulingService

__all__ = ["LIVE", "Reloader", "config_watcher"]

log = logging.getLogger(__name__)

LIVE = frozenset(
    {
        "device_selection",
        "scoring_policy",
        "score_weights",
        "filter_time_budget_seconds",
        "filter_timeout_seconds",
        "log_level",
        "verbosity",
        "log_format",
    }
)
"""Option destinations (``FieldSpec.dest``) a running ``serve`` applies when the config file changes."""


def _shown(value: Any) -> str:
    return "(unset)" if value is None else str(value)


def _changes(path: str, running: Any, wanted: Any) -> list[str]:
    """``<field> <running> -> <wanted>``; for settings made of named values (the feature gates) one per
    value that differs, naming it, rather than both whole sets."""
    if dataclasses.is_dataclass(running) and type(running) is type(wanted):
        return [
            f"{path}.{f.name} {getattr(running, f.name)} -> {getattr(wanted, f.name)}"
            for f in dataclasses.fields(running)
            if getattr(running, f.name) != getattr(wanted, f.name)
        ]
    return [f"{path} {_shown(running)} -> {_shown(wanted)}"]


class Reloader:
    """Applies a changed config file to a running ``serve`` (module docstring).

    ``argv``: ``serve``'s command line; ``args``: its options as parsed at start (with the file's
    defaults); ``config``: the file as read at start."""

    def __init__(
        self,
        argv: Sequence[str],
        args: argparse.Namespace,
        config: ExtenderConfig,
        service: SchedulingService,
    ) -> None:
        self.argv = list(argv)
        self.running = copy.copy(args)
        """The options in force: the start's, with the live ones changed by reloads since."""
        self.config = config
        self.service = service

    def apply(self, new: ExtenderConfig) -> None:
        """Apply what can be applied of ``new`` and log the rest. Raises ConfigError (nothing applied) when
        its settings are refused."""
        path = new.path
        try:
            reparsed = parser({"serve": new.defaults_for("serve")}).parse_args(self.argv)
        except SystemExit as e:  # the command line parsed at start; only a file's value can upset it
            raise ConfigError(f"{path}: the settings do not combine with the command line") from e
        applied_args = copy.copy(self.running)
        applied, restart, flagged, sections = [], [], [], set()
        for spec in FIELDS:  # every section is serve's
            running, wanted = getattr(self.running, spec.dest, None), getattr(reparsed, spec.dest, None)
            if running == wanted:
                before, now = self._file_value(self.config, spec), self._file_value(new, spec)
                if before != now and now is not None and now != wanted:  # the flag's value beat the file's
                    flagged.append(spec.path)
                continue
            changes = _changes(spec.path, running, wanted)
            if spec.dest in LIVE:
                setattr(applied_args, spec.dest, wanted)
                applied.extend(changes)
                sections.add(spec.path.partition(".")[0])
            else:
                restart.extend(changes)
        try:
            settings = settings_from_args(applied_args)
        except StartupError as e:
            raise ConfigError(f"{path}: {e}") from e
        if new.attributes != self.config.attributes:
            with self.service.lock:  # ConfigError when one does not compile: the inventory is unchanged
                problems = install(new, self.service.state.inventory, self.service.selectors)
            applied.append(f"derivedAttributes ({len(new.attributes)} attributes)")
            for problem in problems:
                log.error("config %s: %s", path, problem)
        if "scheduling" in sections:
            scheduling = settings.scheduling
            self.service.set_policy(
                scheduling.device_selection,
                scheduling.scoring,
                scheduling.filter_time_budget_seconds,
                scheduling.filter_timeout_seconds,
            )
        if "server" in sections:
            adjust_logging(settings.server.effective_log_level, settings.server.log_format)
        self.running, self.config = applied_args, new
        self._report(path, applied, restart, flagged)

    @staticmethod
    def _file_value(config: ExtenderConfig, spec: FieldSpec) -> Any:
        return config.settings.get(spec.path.partition(".")[0], {}).get(spec.dest)

    @staticmethod
    def _report(path: Any, applied: list[str], restart: list[str], flagged: list[str]) -> None:
        for change in restart:
            log.warning(
                "config %s: %s needs a restart; running with the previous value until then", path, change
            )
        for field in flagged:
            log.warning("config %s: %s changed in the file, but a command-line flag sets it", path, field)
        if applied:
            log.info("config %s reloaded: applied %s", path, ", ".join(applied))
        elif not restart and not flagged:
            log.info("config %s changed, but no setting did", path)


def config_watcher(
    argv: Sequence[str], args: argparse.Namespace, config: ExtenderConfig, service: SchedulingService
) -> ConfigWatcher:
    """The watcher of ``serve``'s config file ``config`` (its ``start()`` polls it), applying changes with a
    ``Reloader``."""
    reloader = Reloader(argv, args, config, service)
    return ConfigWatcher(config.path, reloader.apply, digest=config.digest)
