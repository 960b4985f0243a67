"""A private CA and a serving certificate for ``<svc>.<ns>.svc``, idempotent and renewable.

Why this shape:

* The API server verifies the webhook against ``caBundle`` and dials ``<svc>.<ns>.svc``; Go ignores the
  CN, so every name lives in the SAN (a CN-only certificate fails with ``x509: certificate relies on
  legacy Common Name field``).
* ECDSA P-256: fast handshakes, what kube-webhook-certgen and Kubewarden use. CA 10 years, leaf 1 year
  (Gatekeeper's cert-controller and Kubewarden use the same split).
* Idempotent: a valid pair whose SANs cover the request is kept untouched, so running ``generate`` at
  every start (the dev server does) never churns the CA already injected into the webhook configuration.
* Renewal re-issues the *leaf* under the *same* CA (``ca.key`` is kept for that), so ``caBundle`` stays
  valid; only a CA that itself nears expiry is replaced, and then ``certs inject --keep-previous``
  bridges old and new (the Kyverno/Kubewarden lesson: expired CAs and never-pruned bundles).
* Files are written atomically (temp file + ``os.replace``) so a server hashing the files for hot
  reload never sees half a PEM; keys are created with mode 0600 from the start, never chmod-ed later.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = timedelta(days=3650)
LEAF_VALIDITY = timedelta(days=365)
BACKDATE = timedelta(minutes=5)  # tolerate clock skew between this host and the API server
ORGANIZATION = "gpu-admission"

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class GenerateResult:
    """What ``generate`` left on disk and what it had to do to get there."""

    out_dir: Path
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    created: bool  # False: a valid pair was kept as is
    ca_created: bool = False  # True: a new CA, so ``caBundle`` must be (re-)injected
    reasons: tuple[str, ...] = ()  # why a certificate was (re-)issued, for the CLI to print


@dataclass(frozen=True, slots=True)
class CertInfo:
    """A printable summary of one certificate."""

    path: Path | None
    subject: str
    issuer: str
    serial: str
    is_ca: bool
    dns_names: tuple[str, ...] = field(default_factory=tuple)
    ip_addresses: tuple[str, ...] = field(default_factory=tuple)
    not_before: datetime | None = None
    not_after: datetime | None = None
    sha256: str = ""

    @property
    def sans(self) -> tuple[str, ...]:
        return (*self.dns_names, *self.ip_addresses)


def service_sans(service: str, namespace: str, dns: Iterable[str] = ()) -> list[str]:
    """The four names a Service answers to (the API server uses ``S.N.svc``) plus extras, de-duplicated."""
    names = [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]
    out: list[str] = []
    for name in (*names, *dns):
        name = name.strip().lower().rstrip(".")
        if name and name not in out:
            out.append(name)
    return out


def generate(
    out_dir: Path,
    service: str,
    namespace: str,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    renew_before: timedelta = timedelta(days=30),
    *,
    now: datetime | None = None,
) -> GenerateResult:
    """Ensure ``out_dir`` holds a CA and a serving pair for the Service; keep what is still good.

    ``now`` exists for tests (expiry without sleeping); production callers leave it out.
    """
    if not service or not namespace:
        raise ValueError("service and namespace are required")
    if renew_before < timedelta(0):
        raise ValueError("renew_before must not be negative")
    if renew_before >= LEAF_VALIDITY:
        raise ValueError(f"renew_before ({renew_before}) must be shorter than the leaf validity ({LEAF_VALIDITY})")
    now = now or datetime.now(UTC)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)}
    want_dns = service_sans(service, namespace, dns)
    want_ips = [ipaddress.ip_address(ip.strip()) for ip in ips if ip.strip()]
    reasons: list[str] = []

    ca = _load_ca(paths[CA_CERT], paths[CA_KEY], now, renew_before, reasons)
    ca_created = ca is None
    if ca is None:
        ca = _new_ca(service, namespace, now)
        _write(paths[CA_KEY], _key_pem(ca[1]), 0o600)
        _write(paths[CA_CERT], _cert_pem(ca[0]), 0o644)

    ca_cert, ca_key = ca
    leaf_ok = not ca_created and _leaf_ok(
        paths[TLS_CERT], paths[TLS_KEY], ca_cert, want_dns, want_ips, now, renew_before, reasons
    )
    if leaf_ok:
        return GenerateResult(out_dir, *paths.values(), created=False)
    if ca_created:
        reasons.append("new CA: serving certificate issued under it")
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _new_leaf(ca_cert, ca_key, leaf_key, service, namespace, want_dns, want_ips, now)
    _write(paths[TLS_KEY], _key_pem(leaf_key), 0o600)  # key first: a reader never pairs a new cert with an old key
    _write(paths[TLS_CERT], _cert_pem(leaf), 0o644)
    return GenerateResult(out_dir, *paths.values(), created=True, ca_created=ca_created, reasons=tuple(reasons))


# --- loading and checking what is on disk --------------------------------------------------------


def _load_ca(
    cert_path: Path, key_path: Path, now: datetime, renew_before: timedelta, reasons: list[str]
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    if not cert_path.exists() or not key_path.exists():
        reasons.append("no CA on disk" if not cert_path.exists() else f"{key_path.name} missing: cannot sign")
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except ValueError as exc:
        reasons.append(f"unreadable CA: {exc}")
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not _same_key(cert, key):
        reasons.append("CA key does not match CA certificate")
        return None
    if not _is_ca(cert):
        reasons.append(f"{cert_path.name} is not a CA certificate")
        return None
    # The CA must outlive at least one full leaf renewal window, or renewals would soon stop verifying.
    if cert.not_valid_after_utc - now <= renew_before:
        reasons.append(f"CA expires {cert.not_valid_after_utc:%Y-%m-%d}, within the renewal window")
        return None
    return cert, key


def _leaf_ok(
    cert_path: Path,
    key_path: Path,
    ca: x509.Certificate,
    want_dns: Sequence[str],
    want_ips: Sequence[IPAddress],
    now: datetime,
    renew_before: timedelta,
    reasons: list[str],
) -> bool:
    if not cert_path.exists() or not key_path.exists():
        reasons.append("no serving certificate on disk")
        return False
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except ValueError as exc:
        reasons.append(f"unreadable serving pair: {exc}")
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError) as exc:  # InvalidSignature is not a ValueError
        reasons.append(f"serving certificate not issued by this CA ({type(exc).__name__})")
        return False
    if not _same_key(cert, key):
        reasons.append("serving key does not match serving certificate")
        return False
    if cert.not_valid_after_utc - now <= renew_before:
        reasons.append(f"serving certificate expires {cert.not_valid_after_utc:%Y-%m-%d}, renewing")
        return False
    if cert.not_valid_before_utc > now:
        reasons.append("serving certificate not yet valid")
        return False
    have_dns, have_ips = _sans(cert)
    missing = [d for d in want_dns if d not in {h.lower() for h in have_dns}]
    missing += [str(ip) for ip in want_ips if ip not in have_ips]
    if missing:
        reasons.append("SANs missing: " + ", ".join(missing))
        return False
    for path in (key_path, key_path.parent / CA_KEY):  # a kept pair must still meet the 0600 promise
        if path.exists() and path.stat().st_mode & 0o077:
            path.chmod(0o600)
    return True


def _same_key(cert: x509.Certificate, key: object) -> bool:
    pub = getattr(key, "public_key", None)
    if pub is None:
        return False
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*fmt) == pub().public_bytes(*fmt)


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _sans(cert: x509.Certificate) -> tuple[list[str], list[IPAddress]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress)


# --- building certificates ------------------------------------------------------------------------


def _key_usage(**on: bool) -> x509.KeyUsage:
    names = (
        "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
        "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only",
    )  # fmt: skip
    return x509.KeyUsage(**{n: on.get(n, False) for n in names})


def _builder(subject: x509.Name, issuer: x509.Name, pub, not_after: datetime, now: datetime):
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(pub)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False)
    )


def _new_ca(service: str, namespace: str, now: datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    # The timestamp keeps successive CAs distinguishable in a bundle that carries old and new.
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace} CA {now:%Y%m%dT%H%M%SZ}"),
        ]
    )
    cert = (
        _builder(name, name, key.public_key(), now + CA_VALIDITY, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _new_leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    service: str,
    namespace: str,
    dns: Sequence[str],
    ips: Sequence[IPAddress],
    now: datetime,
) -> x509.Certificate:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc"),
        ]
    )
    not_after = min(now + LEAF_VALIDITY, ca.not_valid_after_utc)  # a leaf never outlives its CA
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ip) for ip in ips]
    return (
        _builder(subject, ca.subject, key.public_key(), not_after, now)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Atomic write with the final mode set before the content exists (no window where a key is 0644)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- describing -----------------------------------------------------------------------------------


def describe(paths: Iterable[Path]) -> list[CertInfo]:
    """Summaries of every certificate in the given PEM files (a bundle yields one entry per cert)."""
    infos: list[CertInfo] = []
    for path in paths:
        path = Path(path)
        for cert in x509.load_pem_x509_certificates(path.read_bytes()):
            infos.append(cert_info(cert, path))
    return infos


def cert_info(cert: x509.Certificate, path: Path | None = None) -> CertInfo:
    dns, ips = _sans(cert)
    return CertInfo(
        path=path,
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        serial=f"{cert.serial_number:x}",
        is_ca=_is_ca(cert),
        dns_names=tuple(dns),
        ip_addresses=tuple(str(ip) for ip in ips),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        sha256=cert.fingerprint(hashes.SHA256()).hex(),
    )


def format_description(infos: Iterable[CertInfo], now: datetime | None = None) -> str:
    """Human-readable lines: subject, issuer, SANs and expiry with days left."""
    now = now or datetime.now(UTC)
    lines: list[str] = []
    for info in infos:
        where = f"{info.path}: " if info.path else ""
        lines.append(f"{where}{'CA' if info.is_ca else 'certificate'} {info.subject}")
        if info.issuer != info.subject:
            lines.append(f"  issuer:    {info.issuer}")
        if info.sans:
            lines.append(f"  SANs:      {', '.join(info.sans)}")
        if info.not_after is not None:
            days = (info.not_after - now).days
            state = "EXPIRED" if info.not_after <= now else f"{days} days left"
            lines.append(f"  not after: {info.not_after:%Y-%m-%dT%H:%M:%SZ} ({state})")
        lines.append(f"  serial:    {info.serial}")
    return "\n".join(lines)
