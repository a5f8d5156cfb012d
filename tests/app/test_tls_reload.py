"""A TLS certificate rotated on disk while ``serve`` runs (``app.http.server.CertificateFiles``): new
connections get the new certificate, an open connection keeps working, the server stays up; a pair that
does not load keeps the previous one."""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import trustme

from app.http.server import CertificateFiles
from tests.ports import EXAMPLE_CLUSTER, free_ports

REPO = Path(__file__).resolve().parents[2]


def _install(issued: trustme.LeafCert, cert: Path, key: Path) -> None:
    """Replace both files the way a Secret volume does: each written aside, then renamed over."""
    for pem, path in ((issued.cert_chain_pems[0], cert), (issued.private_key_pem, key)):
        aside = path.with_suffix(".new")
        pem.write_to_path(str(aside))
        os.replace(aside, path)


def _der(issued: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(issued.cert_chain_pems[0].bytes().decode())


def _connect(port: int, client: ssl.SSLContext) -> http.client.HTTPSConnection:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=client, timeout=10)
    connection.connect()
    return connection


def _served_cert(connection: http.client.HTTPSConnection) -> bytes:
    assert isinstance(connection.sock, ssl.SSLSocket)
    der = connection.sock.getpeercert(binary_form=True)
    assert der is not None
    return der


def _livez(connection: http.client.HTTPSConnection) -> int:
    connection.request("GET", "/livez")
    answer = connection.getresponse()
    answer.read()
    return answer.status


def test_a_rotated_certificate_is_served_to_new_connections_without_a_restart(tmp_path: Path):
    authority = trustme.CA()
    first, second = authority.issue_cert("127.0.0.1"), authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(first, cert, key)
    client = ssl.create_default_context()
    authority.configure_trust(client)
    [port] = free_ports(1)
    argv = [sys.executable, "-m", "app", "serve", "--state", str(EXAMPLE_CLUSTER), "--port", str(port)]
    argv += ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    server = subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            try:
                kept = _connect(port, client)
                break
            except OSError:
                time.sleep(0.2)
        assert _served_cert(kept) == _der(first)
        assert _livez(kept) == 200
        _install(second, cert, key)
        deadline = time.monotonic() + 30
        while True:
            assert _livez(kept) == 200  # the open connection keeps working (and stays within keep-alive)
            fresh = _connect(port, client)
            served = _served_cert(fresh)
            assert _livez(fresh) == 200
            fresh.close()
            if served == _der(second):
                break
            assert time.monotonic() < deadline, "the new certificate was never served"
            time.sleep(0.5)
        assert _served_cert(kept) == _der(first) and _livez(kept) == 200
        assert server.poll() is None
        kept.close()
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert f"TLS certificate {cert} and key {key} reloaded" in err.decode()


def test_a_pair_that_does_not_load_keeps_the_previous_one(tmp_path: Path):
    authority = trustme.CA()
    first, second = authority.issue_cert("127.0.0.1"), authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(first, cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    versions = iter(range(1, 100))

    def stat(path: str) -> SimpleNamespace:  # a new mtime at every look: no sleeping between writes
        return SimpleNamespace(st_mtime_ns=next(versions), st_size=0, st_ino=0)

    files = CertificateFiles(context, str(cert), str(key), stat=stat)
    second.cert_chain_pems[0].write_to_path(str(cert))  # the new certificate, the old key: no pair
    assert files.poll() is False
    second.private_key_pem.write_to_path(str(key))  # the key arrives: loaded
    assert files.poll() is True
    key.write_text("not a key\n")
    with pytest.raises(ssl.SSLError):
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    assert files.poll() is False


def test_a_certificate_path_turned_into_a_fifo_is_never_opened(tmp_path: Path, caplog):
    """OpenSSL opening a FIFO waits for a writer: on the event loop that stopped every connection and probe
    for good. The FIFO is refused (it is only looked at with stat) and the previous pair stays. Here a
    writer stands by with a certificate, so opening it would load that one instead of blocking."""
    import threading

    authority = trustme.CA()
    first, second = authority.issue_cert("127.0.0.1"), authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(first, cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    files = CertificateFiles(context, str(cert), str(key))
    cert.unlink()
    os.mkfifo(cert)
    second.private_key_pem.write_to_path(str(key))

    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():  # each open of the FIFO gets the certificate
            try:
                with cert.open("wb") as fifo:  # waits until a reader opens the FIFO
                    fifo.write(second.cert_chain_pems[0].bytes())
            except OSError:  # the reader below left at once
                pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        assert files.poll() is False
    finally:
        stop.set()
        while thread.is_alive():  # release the writer, waiting to open the FIFO or about to
            os.close(os.open(cert, os.O_RDONLY | os.O_NONBLOCK))
            thread.join(0.01)
    assert f"{cert}: not a regular file" in caplog.text
