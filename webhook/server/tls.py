"""TLS for the admission port: gunicorn's ``ssl_context`` hook with a cached, content-hashed context.

gunicorn calls the hook for every accepted connection. Its default factory re-reads and re-parses the
certificate and key each time (rotation for free, a PEM parse per connection). This hook builds the
context once and rebuilds it only when the *contents* of the cert, key or client-CA file change:
hashing, not mtimes, because a Kubernetes Secret volume updates by swapping a ``..data`` symlink
(reference B1; kopf does the same). Checks happen at most every ``interval`` seconds on the
connection path and, so that idle workers and the expiry metric stay current, from a background
ticker too.

A half-rotated pair (new cert, old key) fails to load: the old context keeps serving and the next
check tries again, so a rotation never fails a handshake. TLS 1.2 is the floor, offering only ECDHE
with AEAD ciphers and no renegotiation; with ``--client-ca`` the default factory sets
``CERT_REQUIRED`` from gunicorn's ``cert_reqs``, and the worker then accepts only the
``--client-names`` (:func:`client_allowed`).
"""

from __future__ import annotations

import hashlib
import ssl
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from webhook.server import metrics
from webhook.server.logs import server_log

TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
"""TLS 1.2 suites offered: forward secrecy (ECDHE) with an AEAD cipher only, no CBC, no static RSA
(the Mozilla "intermediate" set; the apiserver's Go client offers these first). TLS 1.3 suites are all
AEAD and are not affected by this setting."""


def pair_problem(
    cert_pem: bytes, key_pem: bytes, cert_name: str = "the certificate", key_name: str = "the key"
) -> str | None:
    """Why this serving certificate and key cannot serve TLS, in words (None when they can).

    ``ssl`` says ``PEM lib`` or ``KEY_VALUES_MISMATCH``; this names the file and the fix: not PEM,
    an encrypted key, or a key that is not the certificate's. Checked before gunicorn starts (a
    server that says "ready" and drops every handshake is worse than one that does not start) and
    on every rotation (a bad new pair leaves the last good one serving)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError:
        return f"{cert_name} is not a PEM certificate (expected a -----BEGIN CERTIFICATE----- block)"
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        return f"{key_name} is encrypted; give the serving key without a passphrase"
    except (ValueError, UnsupportedAlgorithm):
        return f"{key_name} is not a PEM private key (expected a -----BEGIN ... PRIVATE KEY----- block)"
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(serialization.Encoding.DER, public) != key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        return (
            f"{key_name} does not match {cert_name} (the first certificate's public key is another key's); "
            "give the key the certificate was issued for"
        )
    return None


def check_files(cert: str, key: str, client_ca: str | None = None) -> str | None:
    """``pair_problem`` for files, and a client CA that must load: the reason ``serve`` refuses to start."""
    try:
        problem = pair_problem(_read(cert), _read(key), f"--tls-cert {cert}", f"--tls-key {key}")
    except OSError as exc:
        return f"cannot read the serving certificate or key: {exc}"
    if problem:
        return problem
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        return f"--tls-cert {cert} / --tls-key {key} do not load: {exc}"
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError) as exc:
            return f"--client-ca {client_ca} is not a PEM CA bundle: {exc}"
    return None


def _read(path: str | None) -> bytes:
    if not path:
        return b""
    with open(path, "rb") as f:
        return f.read()


class CertReloader:
    """Callable as gunicorn's ``ssl_context(config, default_ssl_context_factory)``; one per process."""

    def __init__(self, interval: float = 2.0):
        self.interval = interval
        self._lock = threading.Lock()
        self._ctx: ssl.SSLContext | None = None
        self._digest: bytes | None = None
        self._checked = 0.0
        self._conf: Any = None
        self._factory: Callable[[], ssl.SSLContext] | None = None
        self.not_after: datetime | None = None
        self.serial: str | None = None
        self.loaded_at: float | None = None
        self.error: str | None = None

    def __call__(self, conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        ctx = self._ctx
        if ctx is not None and time.monotonic() - self._checked < self.interval:
            return ctx  # the common case: no lock, no I/O
        with self._lock:
            self._conf, self._factory = conf, default_ssl_context_factory
            self._refresh()
            if self._ctx is None:
                raise ssl.SSLError(f"no usable TLS certificate: {self.error}")
            return self._ctx

    def refresh(self) -> None:
        """Background check (ticker): pick up rotated files even when no connection arrives."""
        with self._lock:
            if self._factory is not None:
                self._refresh()

    def _refresh(self) -> None:
        self._checked = time.monotonic()
        conf = self._conf
        try:
            cert = _read(conf.certfile)
            digest = hashlib.sha256(cert + b"\0" + _read(conf.keyfile) + b"\0" + _read(conf.ca_certs)).digest()
        except OSError as exc:  # mid-swap or unmounted: keep serving what we have
            self._fail(f"cannot read certificate files: {exc}")
            return
        if digest == self._digest:
            return
        problem = pair_problem(cert, _read(conf.keyfile), str(conf.certfile), str(conf.keyfile))
        if problem:  # a half-rotated or wrong pair: say why, in words
            self._fail(f"cannot load certificate/key: {problem}")
            return
        try:
            ctx = self._factory()  # type: ignore[misc]
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(TLS12_CIPHERS)
            # no TLS 1.2 renegotiation, from either side: a client could otherwise make the event
            # loop run a new handshake on a connection at will (OpenSSL 3 refuses client-initiated
            # renegotiation by default; older builds and other settings do not)
            ctx.options |= ssl.OP_NO_RENEGOTIATION
        except (ssl.SSLError, OSError, ValueError) as exc:
            self._fail(f"cannot load certificate/key: {exc}")
            return
        first = self._ctx is None
        self._ctx, self._digest = ctx, digest
        self.loaded_at = time.time()
        self.error = None
        self._describe(cert)
        metrics.CERT_RELOADS.labels("success").inc()
        if not first:
            server_log.info(
                "TLS certificate reloaded",
                extra={"fields": {"serial": self.serial, "not_after": _iso(self.not_after)}},
            )

    def _fail(self, message: str) -> None:
        if message != self.error:
            metrics.CERT_RELOADS.labels("failure").inc()
            server_log.warning(
                message + ("; the previous certificate keeps serving" if self._ctx is not None else ""),
                extra={"fields": {"certfile": getattr(self._conf, "certfile", None)}},
            )
        self.error = message

    def _describe(self, pem: bytes) -> None:
        try:
            from cryptography import x509

            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as exc:
            server_log.warning(f"cannot parse the serving certificate for its expiry: {exc}")
            self.not_after = self.serial = None
            return
        self.not_after = cert.not_valid_after_utc
        self.serial = format(cert.serial_number, "x")
        metrics.CERT_EXPIRY.set(self.not_after.timestamp())

    def status(self) -> dict[str, Any]:
        """For ``/readyz``: a serving certificate must be loaded and not expired."""
        now = datetime.now(UTC)
        valid = self._ctx is not None and (self.not_after is None or self.not_after > now)
        out: dict[str, Any] = {
            "status": "ok" if valid else "invalid",
            "serial": self.serial,
            "not_after": _iso(self.not_after),
        }
        if self.not_after is not None:
            out["expires_in_seconds"] = int((self.not_after - now).total_seconds())
        if self.error:
            out["error"] = self.error
        return out


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def peer_names(peer: dict[str, Any] | None) -> tuple[str, ...]:
    """The names a verified client certificate claims: its subject CN(s) and DNS SANs."""
    if not peer:
        return ()
    names = [value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"]
    names += [value for kind, value in peer.get("subjectAltName", ()) if kind == "DNS"]
    return tuple(names)


def client_allowed(peer: dict[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """``--client-ca`` proves the CA signed the certificate; that alone also admits a kubelet's or a
    user's certificate from a cluster CA. Only the names listed (``--client-names``, default
    ``kube-apiserver``) may call the webhook. Exact, case-sensitive match, as the apiserver's own
    ``--requestheader-allowed-names``."""
    return any(name in allowed for name in peer_names(peer))
