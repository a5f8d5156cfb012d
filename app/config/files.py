"""The files settings name: ``server.sslCertFile``, ``server.sslKeyFile``, ``server.sslCACerts``,
``server.webhookCertFile``, ``server.webhookKeyFile`` and ``cluster.kubeconfig`` (the ``path`` fields of
``app.config.extenderconfig``) and their flags.

``file_problems(files)`` is the one check of whether they can be used, shared by ``serve`` (before it
loads anything, naming the flag, or the config field a flag did not override) and ``validate --config``
(naming the field): each a readable regular file of at most ``MAX_SETTING_FILE_BYTES``, and the TLS files
loaded as uvicorn will load them (PEM certificates in the certificate and CA files, a key that belongs to
the certificate). OpenSSL (and uvicorn, which opens the files again) waits forever on a FIFO without a
writer and reads /dev/zero without end, so only ``stat`` looks at anything but a regular file.
"""

from __future__ import annotations

import ssl
import stat
from collections.abc import Mapping
from pathlib import Path

__all__ = ["MAX_SETTING_FILE_BYTES", "file_problem", "file_problems"]

MAX_SETTING_FILE_BYTES = 4 << 20
"""4 MiB: a CA bundle of every public root is ~250 KiB, a kubeconfig a few KiB. A device or a sparse file
would otherwise be read into memory."""


def file_problems(files: Mapping[str, Path | None]) -> list[tuple[str, str]]:
    """``(setting, problem)`` for the files that cannot be used, in the order of ``files`` (settings field
    name → path, None when unset: ``ssl_certfile``, ``ssl_keyfile``, ``ssl_ca_certs``, ``webhook_certfile``,
    ``webhook_keyfile``, ``kubeconfig``).
    The TLS files that can be read are looked into whatever the others are: the certificate and CA files
    must hold PEM certificates, and the key must belong to the certificate (when both are given and the
    certificate loads)."""
    problems = {name: p for name, path in files.items() if path is not None and (p := file_problem(path))}
    for name in ("ssl_certfile", "ssl_ca_certs", "webhook_certfile"):
        path = files.get(name)
        try:  # as a trust store: fails unless the file holds PEM certificates
            if path is not None and name not in problems:
                ssl.create_default_context(cafile=path)
        except ssl.SSLError as e:
            problems[name] = f"no PEM certificate in it ({e.reason or e})"
    for cert_name, key_name in _PAIRS:
        cert, key = files.get(cert_name), files.get(key_name)
        if cert is None or key is None or {cert_name, key_name} & problems.keys():
            continue
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except ssl.SSLError as e:
            problems[key_name] = f"not a PEM private key of the certificate {cert} ({e.reason or e})"
    return [(name, problems[name]) for name in files if name in problems]


_PAIRS = (("ssl_certfile", "ssl_keyfile"), ("webhook_certfile", "webhook_keyfile"))
"""Certificate and key settings that must belong together."""


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
