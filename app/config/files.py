"""The files settings name: ``server.sslCertFile``, ``server.sslKeyFile``, ``server.sslCACerts`` and
``cluster.kubeconfig`` (the ``path`` fields of ``app.config.extenderconfig``) and their flags.

``file_problem(path)`` is the one check of whether such a file can be used, shared by ``serve`` (before
it loads anything, naming the flag or the config field) and ``validate --config`` (naming the field): a
readable regular file of at most ``MAX_SETTING_FILE_BYTES``. OpenSSL (and uvicorn, which opens the file
again) waits forever on a FIFO without a writer and reads /dev/zero without end, so only ``stat`` looks
at anything else.
"""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["MAX_SETTING_FILE_BYTES", "file_problem"]

MAX_SETTING_FILE_BYTES = 4 << 20
"""4 MiB: a CA bundle of every public root is ~250 KiB, a kubeconfig a few KiB. A device or a sparse file
would otherwise be read into memory."""


def file_problem(path: Path) -> str:
    """Why ``path`` is not a readable regular file of at most ``MAX_SETTING_FILE_BYTES``
    (``cannot read it: No such file or directory``, ``not a regular file``, ``larger than 4 MiB (...)``),
    or ""."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > MAX_SETTING_FILE_BYTES:
            return (
                f"larger than {MAX_SETTING_FILE_BYTES >> 20} MiB ({info.st_size} bytes): not a PEM file or a "
                "kubeconfig"
            )
        with path.open("rb") as file:
            file.read(1)
    except OSError as e:
        return f"cannot read it: {e.strerror or e}"
    return ""
