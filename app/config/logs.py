"""One log format for the extender and uvicorn: ``serve --log-format text|json``.

Both formats go to stderr through the root logger; uvicorn is started with ``log_config=None`` so its
loggers (``uvicorn.error``, ``uvicorn.access``) propagate there instead of installing their own handlers.

* ``text``: ``<time> <LEVEL> <logger>: <message>`` followed by the structured keys as ``key=value``
  (klog's text format puts them there too).
* ``json``: one object per line with klog-style keys: ``ts`` (Unix seconds), ``level`` (lower case),
  ``logger``, ``msg``, then the structured keys a record carries (``pod``, ``node``, ``claim``,
  ``devices``, ``reason``) and ``exc_info`` for a traceback (python-json-logger).

The level is ``ServerSettings.effective_log_level``: ``--log-level``, or debug with klog's ``-v N`` above 0.
``serve`` logs its startup banner, warnings and errors as records too when the format is ``json``, so every
line of the stream is JSON.

Structured keys are passed as ``extra={"pod": "ns/name", "node": ...}``. Probe and scrape requests
(``/livez``, ``/readyz``, ``/healthz``, ``/metrics``) are access-logged at debug, not info: a kubelet
probing every few seconds would otherwise drown the bind decisions.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from pythonjsonlogger.json import JsonFormatter

__all__ = ["LOG_FORMATS", "PROBE_PATHS", "adjust", "configure"]

LOG_FORMATS = ("text", "json")

PROBE_PATHS = frozenset({"/livez", "/readyz", "/healthz", "/metrics"})
VERB_PREFIX = "/scheduler/"

STRUCTURED_KEYS = ("pod", "node", "claim", "devices", "reason")
"""Keys a record may carry through ``extra``, in output order."""

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = [f"{k}={_text_value(getattr(record, k))}" for k in STRUCTURED_KEYS if hasattr(record, k)]
        if not pairs:
            return line
        head, newline, traceback = line.partition("\n")  # keys stay on the message's line
        return f"{head} {' '.join(pairs)}{newline}{traceback}"


def _text_value(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
    return f'"{text}"' if " " in text else text


class _KlogJsonFormatter(JsonFormatter):
    def __init__(self) -> None:
        super().__init__(
            ["created", "levelname", "name", "message"],
            rename_fields={"created": "ts", "levelname": "level", "name": "logger", "message": "msg"},
        )

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        log_data["level"] = str(log_data.get("level", "")).lower()
        log_data.pop("color_message", None)  # uvicorn's terminal-coloured copy of msg
        return log_data


class _RoutineAtDebug(logging.Filter):
    """On ``uvicorn.access``: the access line of a probe, or of a scheduler verb answered 2xx, becomes a debug
    record, kept only at debug level. kube-scheduler calls filter and prioritize for every pod it places,
    and the extender logs each bind with what it did; an access line per call would be noise (and a
    write on the path kube-scheduler waits on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) < 5 or not isinstance(args[2], str):
            return True
        path = args[2].partition("?")[0]
        answered_verb = path.startswith(VERB_PREFIX) and isinstance(args[4], int) and 200 <= args[4] < 300
        if path not in PROBE_PATHS and not answered_verb:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


def _formatter(log_format: str) -> logging.Formatter:
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format: must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    return _KlogJsonFormatter() if log_format == "json" else _TextFormatter(_TEXT)


def configure(level: str, log_format: str, stream: Any = None) -> None:
    """Send every log record (the extender's and uvicorn's, and Python warnings a library issues, as
    ``py.warnings``) to ``stream`` (stderr) in ``log_format`` at ``level`` (a ``logging`` level name, any
    case). Replaces handlers set before: call once at startup."""
    logging.captureWarnings(True)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    for name in _UVICORN_LOGGERS:
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
    _set_level(level)
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _RoutineAtDebug) for f in access.filters):
        access.addFilter(_RoutineAtDebug())


def adjust(level: str, log_format: str) -> None:
    """Change the level and the format of the stream ``configure`` set up, while serving (a config file
    reload): the same handler and stream, so nothing is lost or written twice."""
    formatter = _formatter(log_format)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
    _set_level(level)


_UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def _set_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())
    # uvicorn sets its loggers' levels when it starts: they follow the root's again (a propagated record
    # is checked against its own logger's level only).
    for name in _UVICORN_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
