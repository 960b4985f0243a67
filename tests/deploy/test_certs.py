"""``certs generate``: a chain that real TLS accepts for every SAN, kept when valid, renewed in time."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from tests.deploy.certutil import expired_ca
from webhook.certs import bundle
from webhook.certs.generate import CA_VALIDITY, LEAF_VALIDITY, describe, format_description, generate
from webhook.cli import main
from webhook.cli.certs import parse_duration

SVC, NS = "gpu-admission", "gpu-admission"
SANS = [SVC, f"{SVC}.{NS}", f"{SVC}.{NS}.svc", f"{SVC}.{NS}.svc.cluster.local"]


@pytest.fixture
def certs(tmp_path: Path):
    return generate(tmp_path / "certs", SVC, NS, dns=["localhost"], ips=["127.0.0.1"])


@contextmanager
def tls_server(cert: Path, key: Path) -> Iterator[int]:
    """A loopback TLS server that completes handshakes (and nothing else) until the block ends."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()


def handshake(port: int, ca: Path, server_hostname: str) -> str:
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
    ):
        return tls.version() or ""


def test_chain_verifies_for_every_san_and_fails_for_a_wrong_name(certs):
    with tls_server(certs.cert, certs.key) as port:
        for name in [*SANS, "localhost", "127.0.0.1"]:
            assert handshake(port, certs.ca_cert, name) in ("TLSv1.2", "TLSv1.3")
        for wrong in ("gpu-admission.other.svc", "evil.example.com", "127.0.0.2"):
            with pytest.raises(ssl.SSLCertVerificationError):
                handshake(port, certs.ca_cert, wrong)


def test_a_different_ca_is_refused(tmp_path, certs):
    other = generate(tmp_path / "other", SVC, NS)
    with tls_server(certs.cert, certs.key) as port, pytest.raises(ssl.SSLCertVerificationError):
        handshake(port, other.ca_cert, f"{SVC}.{NS}.svc")


def test_certificate_shape(certs):
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    leaf = x509.load_pem_x509_certificate(certs.cert.read_bytes())
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert ca.public_key().curve.name == leaf.public_key().curve.name == "secp256r1"
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [*SANS, "localhost"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert abs((ca.not_valid_after_utc - ca.not_valid_before_utc) - CA_VALIDITY) < timedelta(minutes=10)
    assert abs((leaf.not_valid_after_utc - leaf.not_valid_before_utc) - LEAF_VALIDITY) < timedelta(minutes=10)


def test_key_files_are_private(certs):
    for path in (certs.key, certs.ca_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in (certs.cert, certs.ca_cert):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_idempotent_keeps_files_untouched(certs):
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (certs.ca_cert, certs.ca_key, certs.cert, certs.key)}
    again = generate(certs.out_dir, SVC, NS, dns=["localhost"], ips=["127.0.0.1"])
    assert again.created is False and again.ca_created is False
    # a request whose SANs are a subset is covered by the existing certificate too
    assert generate(certs.out_dir, SVC, NS).created is False
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before


def test_kept_pair_gets_its_key_mode_back(certs):
    os.chmod(certs.key, 0o644)
    assert generate(certs.out_dir, SVC, NS).created is False
    assert stat.S_IMODE(certs.key.stat().st_mode) == 0o600


def test_new_san_reissues_the_leaf_under_the_same_ca(certs):
    ca_before = certs.ca_cert.read_bytes()
    result = generate(certs.out_dir, SVC, NS, dns=["localhost", "webhook.example.com"], ips=["127.0.0.1"])
    assert result.created and not result.ca_created
    assert certs.ca_cert.read_bytes() == ca_before
    assert any("webhook.example.com" in r for r in result.reasons)
    with tls_server(result.cert, result.key) as port:
        handshake(port, result.ca_cert, "webhook.example.com")


def test_renewal_keeps_the_ca(certs):
    ca_before, key_before = certs.ca_cert.read_bytes(), certs.ca_key.read_bytes()
    old_leaf = x509.load_pem_x509_certificate(certs.cert.read_bytes())
    # outside the window (40 days before expiry) nothing happens
    assert generate(certs.out_dir, SVC, NS, now=old_leaf.not_valid_after_utc - timedelta(days=40)).created is False
    # 20 days before the leaf expires: inside the default 30-day window
    later = old_leaf.not_valid_after_utc - timedelta(days=20)
    result = generate(certs.out_dir, SVC, NS, dns=["localhost"], ips=["127.0.0.1"], now=later)
    assert result.created and not result.ca_created
    assert certs.ca_cert.read_bytes() == ca_before and certs.ca_key.read_bytes() == key_before
    new_leaf = x509.load_pem_x509_certificate(certs.cert.read_bytes())
    assert new_leaf.serial_number != old_leaf.serial_number
    assert new_leaf.not_valid_after_utc > old_leaf.not_valid_after_utc
    new_leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))
    assert stat.S_IMODE(certs.key.stat().st_mode) == 0o600
    # renew-before is honoured: 60 days asks for renewal where 30 days would not
    fresh = x509.load_pem_x509_certificate(certs.cert.read_bytes())
    at = fresh.not_valid_after_utc - timedelta(days=45)
    assert generate(certs.out_dir, SVC, NS, now=at).created is False
    assert generate(certs.out_dir, SVC, NS, now=at, renew_before=timedelta(days=60)).created is True


def test_a_ca_near_expiry_is_replaced(certs):
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    result = generate(certs.out_dir, SVC, NS, now=ca.not_valid_after_utc - timedelta(days=10))
    assert result.created and result.ca_created
    assert certs.ca_cert.read_bytes() != ca.public_bytes(Encoding.PEM)


def test_a_foreign_or_broken_pair_is_replaced(certs, tmp_path):
    other = generate(tmp_path / "other", SVC, NS)
    certs.cert.write_bytes(other.cert.read_bytes())  # leaf of another CA
    result = generate(certs.out_dir, SVC, NS)
    assert result.created and not result.ca_created
    certs.key.write_bytes(b"garbage")
    assert generate(certs.out_dir, SVC, NS).created


def test_invalid_arguments(tmp_path):
    with pytest.raises(ValueError):
        generate(tmp_path, "", NS)
    with pytest.raises(ValueError):
        generate(tmp_path, SVC, NS, renew_before=timedelta(days=400))
    with pytest.raises(ValueError):
        generate(tmp_path, SVC, NS, ips=["not-an-ip"])


def test_describe(certs):
    infos = describe([certs.ca_cert, certs.cert])
    assert [i.is_ca for i in infos] == [True, False]
    assert infos[1].sans == (*SANS, "localhost", "127.0.0.1")
    text = format_description(infos)
    assert "SANs:" in text and "not after:" in text and "days left" in text


# --- CLI ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "delta"),
    [("720h", timedelta(hours=720)), ("30d", timedelta(days=30)), ("2160h0m0s", timedelta(hours=2160)),
     ("1w", timedelta(weeks=1)), ("90m", timedelta(minutes=90))],
)  # fmt: skip
def test_parse_duration(text, delta):
    assert parse_duration(text) == delta


@pytest.mark.parametrize("text", ["", "30", "30x", "h", "-1d", "1d 2h"])
def test_parse_duration_rejects(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_cli_generate_prints_subjects_sans_and_expiry(tmp_path, capsys):
    out = tmp_path / "c"
    args = ["certs", "generate", "--service", SVC, "--namespace", NS, "--out", str(out), "--dns", "localhost",
            "--ip", "127.0.0.1", "--renew-before", "720h"]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"CN={SVC}.{NS}.svc" in text and f"{SVC}.{NS}.svc.cluster.local" in text and "not after:" in text
    assert main(args) == 0
    assert "kept the valid certificates" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_cli_generate_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["certs", "generate", "--service", SVC, "--namespace", NS, "--renew-before", "soon"])
    assert exc.value.code == 2
    assert main(["certs", "generate", "--service", SVC, "--namespace", NS, "--out", str(tmp_path), "--ip", "x"]) == 2


# --- caBundle arithmetic --------------------------------------------------------------------------


def test_bundle_merge(tmp_path, certs):
    new = bundle.parse(certs.ca_cert.read_bytes())
    old = bundle.parse(generate(tmp_path / "old", SVC, NS).ca_cert.read_bytes())
    gone = [expired_ca()]
    assert bundle.merge(new, [*old, *gone], keep_previous=False) == new
    assert bundle.merge(new, [*old, *gone], keep_previous=True) == [*old, *new]
    assert bundle.merge(new, [*old, *new], keep_previous=True) == [*old, *new]  # no duplicates
    assert bundle.parse(bundle.to_b64([*old, *new])) == [*old, *new]  # base64 form round-trips
    with pytest.raises(bundle.BundleError):
        bundle.merge(gone, old, keep_previous=True)
    with pytest.raises(bundle.BundleError):
        bundle.merge([], old)
