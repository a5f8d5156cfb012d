"""The extender's config file (``--config FILE``): cluster-wide derived attributes, reloaded on change, and
with ``apiVersion: dra-extender.io/v1alpha1`` / ``kind: ExtenderConfiguration`` the settings sections
``server``, ``scheduling`` and ``cluster`` (``app.config.extenderconfig``; what a reload applies of them:
``app.cli.reload``).

Format (YAML or JSON; every key optional except the two of an entry; a file without ``apiVersion`` may hold
only ``derivedAttributes``)::

    apiVersion: dra-extender.io/v1alpha1
    kind: ExtenderConfiguration
    derivedAttributes:
    - name: example.com/numa                               # qualified attribute name: domain/id
      expression: device.attributes["gpu.nvidia.com"].numa # CEL, selector environment, <= 10 Ki
      driver: gpu.nvidia.com                               # only devices of this driver
      deviceClassName: gpu.nvidia.com                      # only devices this DeviceClass matches

Each entry becomes a device attribute visible to selectors, constraints and scoring (``allocator.derived``
has the rules: evaluation on the device as published, scopes, what a runtime error does).

Errors: ``ConfigError`` with one line naming the file and the field, e.g. ``derived.yaml:
derivedAttributes[1].name: required field is missing`` or ``derived attribute example.com/numa
(derived.yaml: derivedAttributes[0]): expression '...': CEL compile error: ...``. At startup an invalid
file stops the extender; ``ConfigWatcher`` reloads the file when it changes (mtime, size or inode) and keeps
the previous config when the new one is invalid, logging why.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocator.derived import ClusterAttribute, ClusterDerivation
from allocator.errors import CELCompileError
from allocator.inventory import Inventory
from allocator.model import qualified_name_problem
from allocator.selectors import SelectorCache
from app.config.extenderconfig import (
    API_VERSION,
    COMMAND_SECTIONS,
    KIND,
    PATH_FIELDS,
    SECTIONS,
    parse_sections,
)
from app.config.files import file_problems
from app.state.documents import load_yaml_document

__all__ = [
    "DEFAULT_POLL_SECONDS",
    "MAX_CONFIG_BYTES",
    "ConfigError",
    "ConfigWatcher",
    "ExtenderConfig",
    "install",
    "load_config",
    "parse_config",
]

log = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 1 << 20
"""1 MiB, the most a ConfigMap holds (where a deployment keeps this file): a larger file is refused before
it is parsed (50 MB of YAML took a minute and 2 GB)."""

DEFAULT_POLL_SECONDS = 2.0
"""How often ``serve`` looks at the config file's mtime: a changed file applies within 2 s, and a stat
call every 2 s costs nothing measurable."""

_TOP_LEVEL = frozenset({"derivedAttributes"})
_VERSIONED_TOP_LEVEL = frozenset({"apiVersion", "kind", "derivedAttributes", *SECTIONS})
_ENTRY_FIELDS = frozenset({"name", "expression", "driver", "deviceClassName"})


class ConfigError(Exception):
    """The config file cannot be used; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """A parsed config file. ``derivation`` compiles the derived attributes with an engine's cache."""

    path: Path
    attributes: tuple[ClusterAttribute, ...] = ()
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per section (``server``, ``scheduling``, ``cluster``), option dest -> value
    (app.config.extenderconfig)."""
    digest: str = ""
    """SHA-256 of the file's bytes, hex ("" for a config not read from a file)."""

    def defaults_for(self, command: str) -> dict[str, Any]:
        """The option defaults this file gives ``command`` (flags on the command line override them)."""
        sections = COMMAND_SECTIONS.get(command, ())
        return {dest: v for section in sections for dest, v in self.settings.get(section, {}).items()}

    def file_problems(
        self, sections: Sequence[str] = SECTIONS, overridden: Collection[str] = ()
    ) -> list[str]:
        """``<config file>: <field>: <path>: <problem>`` per field of ``sections`` naming a file that cannot
        be used (``server.sslCertFile``, ``cluster.kubeconfig``, ...: ``app.config.files``), in field order;
        ``overridden``: option dests a flag set instead (their fields are not used, nor checked)."""
        specs = {
            spec.dest: spec
            for spec in PATH_FIELDS
            if spec.path.partition(".")[0] in sections and spec.dest not in overridden
        }
        files = {
            dest: self.settings.get(spec.path.partition(".")[0], {}).get(dest) for dest, spec in specs.items()
        }
        return [
            f"{self.path}: {specs[dest].path}: {files[dest]}: {problem}"
            for dest, problem in file_problems(files)
        ]

    def derivation(self, selectors: SelectorCache) -> ClusterDerivation | None:
        """The compiled derived attributes (None when there are none). Raises ConfigError for an
        expression that does not compile."""
        if not self.attributes:
            return None
        try:
            return ClusterDerivation(self.attributes, selectors)
        except CELCompileError as e:
            raise ConfigError(str(e)) from e


def _string(entry: Mapping[str, Any], key: str, where: str, *, required: bool) -> str:
    value = entry.get(key)
    if value is None or value == "":
        if required:
            raise ConfigError(f"{where}.{key}: required field is missing")
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: must be a string, got {type(value).__name__}")
    return value


def parse_config(data: Any, path: Path, digest: str = "") -> ExtenderConfig:
    """Check a loaded document (None = empty file) whose file has ``digest``. Raises ConfigError naming
    ``path`` and the field."""
    if data is None:
        return ExtenderConfig(path, digest=digest)
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path}: must be a mapping with a derivedAttributes list, got {type(data).__name__}"
        )
    versioned = "apiVersion" in data or "kind" in data
    allowed = _VERSIONED_TOP_LEVEL if versioned else _TOP_LEVEL
    unknown = sorted(set(map(str, data)) - allowed)
    if unknown:
        hint = "" if versioned else f"; settings need apiVersion: {API_VERSION} and kind: {KIND}"
        raise ConfigError(f"{path}: {unknown[0]}: unknown field (known: {', '.join(sorted(allowed))}){hint}")
    settings: dict[str, dict[str, Any]] = {}
    if versioned:
        for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
            if data.get(key) != expected:
                raise ConfigError(f"{path}: {key}: must be {expected}, got {data.get(key)!r}")
        try:
            settings = parse_sections(data)
        except ValueError as e:
            raise ConfigError(f"{path}: {e}") from e
    entries = data.get("derivedAttributes")
    entries = [] if entries is None else entries
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: derivedAttributes: must be a list, got {type(entries).__name__}")
    attributes: list[ClusterAttribute] = []
    for i, entry in enumerate(entries):
        where = f"{path}: derivedAttributes[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: must be a mapping, got {type(entry).__name__}")
        extra = sorted(set(map(str, entry)) - _ENTRY_FIELDS)
        if extra:
            raise ConfigError(
                f"{where}.{extra[0]}: unknown field (known: {', '.join(sorted(_ENTRY_FIELDS))})"
            )
        name = _string(entry, "name", where, required=True)
        problem = (
            qualified_name_problem(name)
            if "/" in name
            else f"{name!r} must be qualified with a domain (e.g. example.com/{name})"
        )
        if problem:
            raise ConfigError(f"{where}.name: {problem}")
        attributes.append(
            ClusterAttribute(
                name=name,
                expression=_string(entry, "expression", where, required=True),
                driver=_string(entry, "driver", where, required=False),
                device_class=_string(entry, "deviceClassName", where, required=False),
                source=f"{path.name}: derivedAttributes[{i}]",
            )
        )
    return ExtenderConfig(path, tuple(attributes), settings, digest)


def load_config(path: Path) -> ExtenderConfig:
    """Read and check the config file. Raises ConfigError (unreadable, larger than ``MAX_CONFIG_BYTES``,
    not YAML, a bad field)."""
    try:
        # Opened without waiting: a FIFO nobody writes to would block open() forever (and it reads as
        # empty); then blocking again, so a pipe's writer (`--config <(...)`) is waited for.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as file:
            os.set_blocking(fd, True)
            raw = file.read(MAX_CONFIG_BYTES + 1)  # no further: the path may name a device or a pipe
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_CONFIG_BYTES >> 20} MiB (the most a ConfigMap holds)"
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config file: {e}") from e
    try:
        # Numbers are checked per setting, naming the field (`must be a finite number, got inf`).
        data = load_yaml_document(text, str(path), json_numbers=False)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return parse_config(data, Path(path), hashlib.sha256(raw).hexdigest())


def _signature(path: Path, stat: Callable[[Path], Any]) -> tuple[int, int, int] | None:
    try:
        st = stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ConfigWatcher:
    """Reloads the config file when it changes and hands the new config to ``apply``.

    ``poll()`` checks once (tests call it directly); ``start()`` runs it every ``interval`` seconds in a
    daemon thread until ``stop()``. A file rewritten with the same bytes (``digest``) is not applied again.
    A file that is missing, unreadable or invalid, or that ``apply`` rejects with ConfigError, is logged
    at error level and the previous config stays in force; the next change is tried again. ``apply`` logs
    what it changed. ``stat`` and ``wait`` are injectable so tests need no real sleeps.

    The state of the last reload, for the metrics (``app.http.metrics``, as Prometheus and Alertmanager
    expose theirs): ``digest`` of the config in force, ``last_reload_successful``,
    ``last_success_seconds`` (Unix time of the last config applied, startup included).
    """

    def __init__(
        self,
        path: Path,
        apply: Callable[[ExtenderConfig], None],
        *,
        digest: str = "",
        interval: float = DEFAULT_POLL_SECONDS,
        stat: Callable[[Path], Any] = os.stat,
    ) -> None:
        self.path = Path(path)
        self.interval = interval
        self._apply = apply
        self.stat = stat
        """How the file is looked at (``os.stat``); tests replace it."""
        self._seen = _signature(self.path, stat)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.digest = digest
        """SHA-256 of the config in force (``ExtenderConfig.digest``)."""
        self.reloads = 0
        """Configs applied after startup."""
        self.last_error = ""
        """Why the latest change was not applied ("" after a successful reload)."""
        self.last_reload_successful = True
        self.last_success_seconds = time.time()

    def poll(self) -> bool:
        """Apply the file if it changed since the last look; True when a new config was applied."""
        signature = _signature(self.path, self.stat)
        if signature == self._seen:
            return False
        self._seen = signature
        if signature is None:
            self._fail(f"{self.path}: config file is gone")
            return False
        try:
            config = load_config(self.path)
            if config.digest == self.digest:
                log.debug("config %s: rewritten with the same content", self.path)
                self.last_reload_successful, self.last_error = True, ""
                return False
            self._apply(config)
        except ConfigError as e:
            self._fail(str(e))
            return False
        self.digest = config.digest
        self.reloads += 1
        self.last_error = ""
        self.last_reload_successful, self.last_success_seconds = True, time.time()
        return True

    def _fail(self, message: str) -> None:
        self.last_error = message
        self.last_reload_successful = False
        log.error("config reload failed, keeping the previous config: %s", message)

    def start(self) -> None:
        """Poll every ``interval`` seconds in a daemon thread."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="config-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # keep watching whatever one reload did
                log.exception("config reload failed")


def install(config: ExtenderConfig, inventory: Inventory, selectors: SelectorCache) -> list[str]:
    """Compile ``config`` and make it the inventory's cluster-wide derived attributes (every device is
    derived again). Returns the runtime errors recorded, one line per attribute with its device count. Raises
    ConfigError for an expression that does not compile; the inventory is then unchanged. The caller
    holds the lock that serialises inventory writers."""
    inventory.set_cluster_attributes(config.derivation(selectors))
    return inventory.derivation_summary()
