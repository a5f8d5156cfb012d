"""Settings of the extender, one frozen dataclass per concern, filled by the CLI (``app.cli``).

* ``ServerSettings``: where the HTTP endpoint listens and what it accepts.
* ``SchedulingSettings``: feature gates and the device selection policy handed to the allocator.
* ``Settings``: the state directory plus the two above.

Every field documents its unit and why the default was chosen. ``__post_init__`` rejects values that
cannot work (``ValueError`` naming the field), so a bad flag fails at startup, not on the first request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from allocator.features import FeatureGates

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEVICE_SELECTION_POLICIES",
    "LOG_LEVELS",
    "SchedulingSettings",
    "ServerSettings",
    "Settings",
]

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""8 MiB: see ``ServerSettings.max_body_bytes``."""

DEVICE_SELECTION_POLICIES = ("first-fit",)
"""Known device selection policies; ``first-fit`` is upstream's order (allocator-semantics.md)."""

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""Names accepted by both ``logging`` and uvicorn's ``--log-level``."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP endpoint kube-scheduler calls (``urlPrefix`` in its extender configuration)."""

    host: str = "127.0.0.1"
    """Interface to bind. Loopback by default: the endpoint has no authentication of its own, and the usual
    deployment runs next to a hostNetwork kube-scheduler; listen on ``0.0.0.0`` only behind mTLS/a proxy."""

    port: int = 8888
    """TCP port (1..65535). 8888 is free on control-plane nodes (kube-scheduler uses 10259)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest accepted request body, in bytes; larger bodies get 413 before any parsing.

    With ``nodeCacheCapable: false`` kube-scheduler sends the full Node objects (labels, capacity, conditions,
    images, ...) of every candidate node in each filter/prioritize call, a few KiB to tens of KiB per node,
    so a 100+ node cluster sends several MiB. 8 MiB admits that while capping memory a bogus client can make
    the extender buffer and parse (uvicorn itself has no body limit)."""

    log_level: str = "info"
    """Python ``logging`` / uvicorn level name. ``info`` logs startup and one line per request."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port: must be in 1..65535, got {self.port}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes: must be positive, got {self.max_body_bytes}")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level: must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")


@dataclass(frozen=True, slots=True)
class SchedulingSettings:
    """What the allocator is allowed to do."""

    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """DRA feature gates by upstream name. Default: Kubernetes 1.37 defaults (``allocator.features``), so
    the extender decides like the in-tree plugin of the matching scheduler release."""

    device_selection: str = "first-fit"
    """Which devices are picked among those that fit. ``first-fit`` (the only policy so far) reproduces the
    upstream structured allocator's device order, so a pod gets the devices kube-scheduler would pick."""

    def __post_init__(self) -> None:
        if self.device_selection not in DEVICE_SELECTION_POLICIES:
            raise ValueError(
                f"device_selection: must be one of {', '.join(DEVICE_SELECTION_POLICIES)}, "
                f"got {self.device_selection!r}"
            )


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``serve`` and ``simulate`` need."""

    state_dir: Path
    """Directory (or single file) of manifests the cluster state is loaded from (``app.statedir``). No
    default: an extender without a state has nothing to allocate."""

    server: ServerSettings = field(default_factory=ServerSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
