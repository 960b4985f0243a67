"""``caBundle`` arithmetic: parse, merge during a rotation, prune what has expired.

Why it exists: a CA rotation is safe only if the API server trusts the old *and* the new CA while the
serving certificate switches over (Kyverno and Kubewarden keep both). Kyverno#12049 shows the other
half of the lesson: an old CA that is never pruned grows the bundle forever. So a merge keeps the
previous CAs that are still valid, drops expired ones, and never repeats a certificate.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from datetime import UTC, datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization


class BundleError(ValueError):
    """The CA input is not usable as a ``caBundle`` (no certificate, or all of them expired)."""


def parse(data: bytes | str | None) -> list[x509.Certificate]:
    """Certificates from PEM text or from the base64 form the API returns in ``caBundle``."""
    if not data:
        return []
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if b"-----BEGIN" not in raw:
        try:
            raw = base64.b64decode(raw, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise BundleError(f"caBundle is neither PEM nor base64 PEM: {exc}") from exc
    if b"-----BEGIN CERTIFICATE" not in raw:
        return []
    try:
        return x509.load_pem_x509_certificates(raw)
    except ValueError as exc:
        raise BundleError(f"unreadable certificate in bundle: {exc}") from exc


def merge(
    new: Iterable[x509.Certificate],
    previous: Iterable[x509.Certificate] = (),
    *,
    keep_previous: bool = False,
    now: datetime | None = None,
) -> list[x509.Certificate]:
    """The bundle to inject: previous (still valid) certificates first, then the new ones appended.

    Without ``keep_previous`` the result is just the valid new certificates. Duplicates (same DER)
    appear once, at their first position, so re-running ``inject`` is a no-op.
    """
    now = now or datetime.now(UTC)
    new = list(new)
    if not new:
        raise BundleError("no certificate in the CA file")
    valid_new = [c for c in new if c.not_valid_after_utc > now]
    if not valid_new:
        raise BundleError("every certificate in the CA file has expired")
    ordered = [*(previous if keep_previous else ()), *valid_new]
    out: list[x509.Certificate] = []
    seen: set[bytes] = set()
    for cert in ordered:
        fp = cert.fingerprint(hashes.SHA256())
        if fp in seen or cert.not_valid_after_utc <= now:
            continue
        seen.add(fp)
        out.append(cert)
    return out


def to_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def to_b64(certs: Iterable[x509.Certificate]) -> str:
    """The value of ``clientConfig.caBundle``: base64 of the concatenated PEM."""
    return base64.b64encode(to_pem(certs)).decode("ascii")
