"""Certificates and keys for the e2e control plane: one CA, the API server's serving certificate, client
certificates for the identities that authenticate with one, and the service-account signing key pair.
Everything is written once into the control plane's directory and lives as long as it."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

VALID_FOR = datetime.timedelta(days=2)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


class Authority:
    """A throw-away CA that signs the API server's serving certificate and the client certificates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name("dra-extender-e2e-ca"))
            .issuer_name(_name("dra-extender-e2e-ca"))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / "ca.crt"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organization: str | None = None,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> CertPair:
        """A certificate for a client identity (CN = user, O = group) or, with names, a serving one."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        server = bool(server_names or server_ips)
        usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            alt = [x509.DNSName(n) for n in server_names]
            alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = CertPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


def service_account_keys(directory: Path) -> CertPair:
    """The RSA pair kube-apiserver signs and verifies ServiceAccount tokens with (cert: the public key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    _write_key(key, pair.key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair
