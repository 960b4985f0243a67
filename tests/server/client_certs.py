"""A client CA and a client certificate (EKU clientAuth) for the ``--client-ca`` tests.

``webhook.certs.generate`` issues serving certificates (EKU serverAuth), which OpenSSL refuses as
client certificates, so the mTLS tests mint their own here with the same cryptography calls.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_client_pki(
    out: Path, cn: str = "kube-apiserver", *, others: dict[str, tuple[str, tuple[str, ...]]] | None = None
) -> tuple[Path, Path, Path]:
    """(client CA cert, client cert, client key) written under ``out``; ``others`` maps a file stem to
    (CN, DNS SANs) of more certificates from the same CA (``<stem>.crt``/``<stem>.key``)."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test client CA"))
        .issuer_name(_name("test client CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    (out / "client-ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for stem, (name, dns) in {"client": (cn, ()), **(others or {})}.items():
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if dns:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
        (out / f"{stem}.crt").write_bytes(
            builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        )
        (out / f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return out / "client-ca.crt", out / "client.crt", out / "client.key"
