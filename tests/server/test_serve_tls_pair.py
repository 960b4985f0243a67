"""``serve`` with a serving pair it cannot use: a key that is not the certificate's, files that are not
PEM, an encrypted key. At start: exit 2 with the reason before gunicorn starts (never a "ready" server
that drops every handshake). On rotation: the last good pair keeps serving, and the log says why the
new one was refused."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.conftest import POLICIES
from tests.server.support import ApiserverClient, AtomicDir, ServerProcess, eventually, free_port
from webhook.certs.generate import generate


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("pairs")
    return {name: generate(tmp / name, "gpu-admission", "gpu-admission", dns=("localhost",)) for name in ("a", "b")}


def _serve(cert: Path, key: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--policy", str(POLICIES), "--bind", f"127.0.0.1:{free_port()}",
         "--metrics-bind", "off", "--namespace-labels", "none", "--tls-cert", str(cert), "--tls-key", str(key)],
        capture_output=True, text=True, timeout=60, cwd=cwd,
    )  # fmt: skip


def _encrypted(key: Path, to: Path) -> Path:
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    to.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return to


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("mismatch", "does not match --tls-cert"),
        ("cert-not-pem", "is not a PEM certificate"),
        ("key-not-pem", "is not a PEM private key"),
        ("key-encrypted", "is encrypted; give the serving key without a passphrase"),
    ],
)
def test_an_unusable_pair_stops_the_start_with_exit_2(tmp_path: Path, pairs, case: str, message: str):
    a, b = pairs["a"], pairs["b"]
    der = tmp_path / "tls.der"
    der.write_bytes(b"\x30\x82\x01\x0a" + bytes(200))
    cert, key = {
        "mismatch": (a.cert, b.key),
        "cert-not-pem": (der, a.key),
        "key-not-pem": (a.cert, a.cert),
        "key-encrypted": (a.cert, _encrypted(a.key, tmp_path / "enc.key")),
    }[case]
    run = _serve(cert, key, tmp_path)
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("gpu-admission serve: ") and message in line and line.endswith("; nothing started")
    assert "Traceback" not in run.stderr and "ready" not in run.stdout + run.stderr


@pytest.mark.server
def test_a_mismatched_rotation_keeps_the_last_good_pair_and_says_so(tmp_path: Path, pairs):
    a, b = pairs["a"], pairs["b"]
    secret = AtomicDir(tmp_path / "secret")
    secret.write({"tls.crt": a.cert.read_bytes(), "tls.key": a.key.read_bytes()})
    server = ServerProcess(
        tmp_path,
        ["--policy", str(POLICIES), "--tls-cert", str(secret.path / "tls.crt"), "--tls-key",
         str(secret.path / "tls.key"), "--cert-interval", "0.2", "--workers", "1", "--namespace-labels", "none"],
        ca_files=[a.ca_cert],
    ).start()  # fmt: skip
    try:
        secret.write({"tls.crt": b.cert.read_bytes(), "tls.key": a.key.read_bytes()})  # b's cert, a's key

        def refused() -> bool:
            return any(
                "does not match" in r.get("msg", "") and "the previous certificate keeps serving" in r["msg"]
                for r in server.log_records()
            )

        eventually(refused, what="the refused rotation in the log")
        client = server.client()  # a new connection: verified against a's CA, so a's pair still serves
        status, ready = client.get_json("/readyz")
        client.close()
        assert status == 200 and ready == {"ready": True}
        assert server.wait_metric("gpu_admission_cert_reloads_total", 1, result="failure") >= 1
        secret.write({"tls.crt": b.cert.read_bytes(), "tls.key": b.key.read_bytes()})  # the fixed rotation
        eventually(lambda: _serves_with(server.port, b.ca_cert), what="b's pair once its key arrived")
    finally:
        assert server.stop() == 0


def _serves_with(port: int, ca: Path) -> bool:
    """A new connection verifies against ``ca`` (the pair it signed is the one serving)."""
    try:
        client = ApiserverClient(port, [ca], timeout=2.0)
        try:
            return client.get_json("/healthz")[0] == 200
        finally:
            client.close()
    except (OSError, ssl.SSLError):
        return False
