"""What is running: the package version, the Python interpreter, the git commit it was built from and the
Kubernetes API it speaks. ``dra-extender --version`` prints them (``version_text``) and the metrics expose
them as ``dra_extender_build_info{version, python, git}`` (``app.http.metrics``).

The commit comes from ``$DRA_EXTENDER_GIT_COMMIT`` (the image sets it from the ``GIT_COMMIT`` build
argument: ``docker build --build-arg GIT_COMMIT=$(git rev-parse HEAD)``), else from ``git rev-parse HEAD``
when the package runs from a checkout, else ``unknown``.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

from app.state.convert import DRA_GROUP, SUPPORTED_VERSIONS

__all__ = ["GIT_COMMIT_ENV", "KUBERNETES_VERSION", "git_commit", "python_version", "version", "version_text"]

GIT_COMMIT_ENV = "DRA_EXTENDER_GIT_COMMIT"

KUBERNETES_VERSION = "1.37"
"""The Kubernetes release whose DRA API, feature gates and allocator the extender follows."""

UNKNOWN = "unknown"

_CHECKOUT = Path(__file__).resolve().parents[2]
"""The directory holding the ``app`` package: a git checkout when run from one (``pip install -e``)."""

GIT_TIMEOUT_SECONDS = 2.0
"""``git rev-parse`` answers in milliseconds; a hung git (a network file system) must not hold startup."""


def version() -> str:
    try:
        return package_version("dra-extender")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return UNKNOWN


def python_version() -> str:
    return platform.python_version()


@functools.cache
def git_commit() -> str:
    """The commit this build comes from (see the module docstring); asked once per process."""
    from_build = os.environ.get(GIT_COMMIT_ENV, "").strip()
    if from_build:
        return from_build
    if not (_CHECKOUT / ".git").exists():
        return UNKNOWN
    try:
        done = subprocess.run(
            ["git", "-C", str(_CHECKOUT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):  # no git installed, or it hangs
        return UNKNOWN
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else UNKNOWN


def version_text() -> str:
    """What ``--version`` prints: one fact per line."""
    newest, *older = SUPPORTED_VERSIONS
    return "\n".join(
        [
            f"dra-extender {version()}",
            f"Python {python_version()}",
            f"Kubernetes API: {DRA_GROUP}/{newest} (Kubernetes {KUBERNETES_VERSION}); also reads "
            + ", ".join(f"{DRA_GROUP}/{v}" for v in older),
            f"git commit: {git_commit()}",
        ]
    )
