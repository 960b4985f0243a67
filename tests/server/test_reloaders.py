"""PolicyStore and CertReloader on their own: what triggers a reload, what never replaces a good state.

The certificate tests go through gunicorn's own ``sock.ssl_context(cfg)``, i.e. the exact call a
gthread worker makes per accepted connection, with gunicorn's default factory.
"""

from __future__ import annotations

import shutil
import ssl
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from gunicorn import sock
from gunicorn.config import Config
from prometheus_client import REGISTRY

from tests.conftest import POLICIES
from tests.server.client_certs import make_client_pki
from tests.server.support import AtomicDir
from webhook.certs.generate import generate
from webhook.policy import PolicyError
from webhook.server.reload import PolicyStore, read_policy_texts
from webhook.server.tls import CertReloader

DEFAULT = (POLICIES / "default.yaml").read_text()


def _reloads(result: str) -> float:
    return REGISTRY.get_sample_value("gpu_admission_policy_reloads_total", {"result": result}) or 0.0


# --- policy ------------------------------------------------------------------------------------------


def test_policy_good_broken_good(tmp_path: Path):
    cm = AtomicDir(tmp_path / "policy")
    cm.write({"default.yaml": DEFAULT.encode()})
    store = PolicyStore.load(cm.path)
    first = store.policy
    assert store.check() is False, "nothing changed"

    ok, failed = _reloads("success"), _reloads("failure")
    cm.write(
        {
            "default.yaml": DEFAULT.replace(
                "priorityClassName: gpu-inference", "priorityClassName: gpu-infer-v2"
            ).encode()
        }
    )
    assert store.check() is True
    second = store.policy
    assert second is not first and second.digest != first.digest
    assert second.classes["inference"].priority_class_name == "gpu-infer-v2"
    assert _reloads("success") == ok + 1

    cm.write({"default.yaml": DEFAULT.replace("maxGPUs: 2", "maxGPUs: [2").encode()})
    assert store.check() is False
    assert store.policy is second, "a broken policy never replaces the serving one"
    assert store.error and "default.yaml:" in store.error[0]
    assert _reloads("failure") == failed + 1
    store.check()
    assert _reloads("failure") == failed + 1, "the same broken content is reported once"

    cm.write({"default.yaml": DEFAULT.encode()})
    assert store.check() is True
    assert store.error is None and store.status()["status"] == "ok"


def test_reverting_to_the_serving_content_clears_the_error(tmp_path: Path):
    (tmp_path / "default.yaml").write_text(DEFAULT)
    store = PolicyStore.load(tmp_path)
    serving = store.policy
    (tmp_path / "default.yaml").write_text("spec: [")
    store.check()
    assert store.error
    (tmp_path / "default.yaml").write_text(DEFAULT)
    assert store.check() is False, "same content as serving: no reload needed"
    assert store.error is None and store.policy is serving


def test_a_vanished_directory_keeps_the_last_good_policy(tmp_path: Path):
    directory = tmp_path / "policy"
    directory.mkdir()
    (directory / "default.yaml").write_text(DEFAULT)
    store = PolicyStore.load(directory)
    serving = store.policy
    shutil.rmtree(directory)
    assert store.check() is False
    assert store.policy is serving
    assert "does not exist" in store.error[0]


def test_first_load_of_a_broken_policy_raises(tmp_path: Path):
    (tmp_path / "default.yaml").write_text(DEFAULT.replace("failure: allow", "failure: maybe"))
    with pytest.raises(PolicyError) as err:
        PolicyStore.load(tmp_path)
    assert "default.yaml:" in str(err.value)


def test_checking_an_unchanged_policy_is_cheap():
    read_policy_texts(POLICIES)
    started = time.process_time()  # CPU, not wall time: a loaded CI machine preempts the test
    for _ in range(200):
        read_policy_texts(POLICIES)
    per_check = (time.process_time() - started) / 200
    assert per_check < 0.005, f"{per_check * 1000:.2f} ms per check"


# --- certificates ------------------------------------------------------------------------------------


def _config(cert: Path, key: Path, reloader: CertReloader, client_ca: Path | None = None) -> Config:
    cfg = Config()
    cfg.set("certfile", str(cert))
    cfg.set("keyfile", str(key))
    cfg.set("ssl_context", reloader)
    if client_ca is not None:
        cfg.set("ca_certs", str(client_ca))
        cfg.set("cert_reqs", ssl.CERT_REQUIRED)
    return cfg


def _pair(tmp_path: Path, name: str, **kwargs):
    return generate(tmp_path / name, "gpu-admission", "gpu-admission", **kwargs)


def test_context_is_cached_and_tls12_is_the_floor(tmp_path: Path):
    pair = _pair(tmp_path, "a")
    reloader = CertReloader(interval=0)
    cfg = _config(pair.cert, pair.key, reloader)
    ctx = sock.ssl_context(cfg)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    assert sock.ssl_context(cfg) is ctx, "same files: the same context, no re-parse"
    assert reloader.status()["status"] == "ok"
    assert REGISTRY.get_sample_value("gpu_admission_cert_expiry_timestamp_seconds") == pytest.approx(
        reloader.not_after.timestamp()
    )


def test_the_context_refuses_tls12_renegotiation(tmp_path: Path):
    """A renegotiation is a new handshake on a connection, run by the worker's event loop whenever
    the client asks; OpenSSL 3 refuses a client's by default, older builds did not: the context says
    so itself. (tests/reliability/test_security.py tries one against the real server.)"""
    pair = _pair(tmp_path, "a")
    ctx = sock.ssl_context(_config(pair.cert, pair.key, CertReloader(interval=0)))
    assert ctx.options & ssl.OP_NO_RENEGOTIATION


def test_a_secret_symlink_swap_is_picked_up(tmp_path: Path):
    a, b = _pair(tmp_path, "a"), _pair(tmp_path, "b")
    secret = AtomicDir(tmp_path / "secret")
    secret.write({"tls.crt": a.cert.read_bytes(), "tls.key": a.key.read_bytes()})
    reloader = CertReloader(interval=0)
    cfg = _config(secret.path / "tls.crt", secret.path / "tls.key", reloader)
    first = sock.ssl_context(cfg)
    serial_a = reloader.serial
    secret.write({"tls.crt": b.cert.read_bytes(), "tls.key": b.key.read_bytes()})
    second = sock.ssl_context(cfg)
    assert second is not first
    assert reloader.serial != serial_a


def test_the_check_interval_throttles_file_reads(tmp_path: Path):
    a, b = _pair(tmp_path, "a"), _pair(tmp_path, "b")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(a.cert, cert)
    shutil.copy(a.key, key)
    reloader = CertReloader(interval=3600)
    cfg = _config(cert, key, reloader)
    first = sock.ssl_context(cfg)
    shutil.copy(b.cert, cert)
    shutil.copy(b.key, key)
    assert sock.ssl_context(cfg) is first, "within the interval the connection path does no I/O"
    reloader.refresh()  # the background ticker
    assert sock.ssl_context(cfg) is not first


def test_a_half_rotated_pair_keeps_the_old_context(tmp_path: Path):
    a, b = _pair(tmp_path, "a"), _pair(tmp_path, "b")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(a.cert, cert)
    shutil.copy(a.key, key)
    reloader = CertReloader(interval=0)
    cfg = _config(cert, key, reloader)
    first = sock.ssl_context(cfg)
    shutil.copy(b.cert, cert)  # new certificate, old key: a non-atomic writer halfway through
    assert sock.ssl_context(cfg) is first
    assert "cannot load" in reloader.error
    shutil.copy(b.key, key)
    assert sock.ssl_context(cfg) is not first
    assert reloader.error is None


def test_an_expired_certificate_makes_the_status_invalid(tmp_path: Path):
    old = _pair(tmp_path, "old", now=datetime.now(UTC) - timedelta(days=400))
    reloader = CertReloader(interval=0)
    sock.ssl_context(_config(old.cert, old.key, reloader))
    assert reloader.status()["status"] == "invalid"
    assert reloader.status()["expires_in_seconds"] < 0


def test_client_ca_requires_client_certificates(tmp_path: Path):
    pair = _pair(tmp_path, "a")
    client_ca, _, _ = make_client_pki(tmp_path / "client")
    ctx = sock.ssl_context(_config(pair.cert, pair.key, CertReloader(), client_ca))
    assert ctx.verify_mode == ssl.CERT_REQUIRED


def test_exception_expiry_gauges_follow_reloads(tmp_path: Path):
    """Each exception's expiry day is a gauge; one a reload removes goes to 0 (GPUAdmissionExceptionExpiring)."""
    from tests.engine.test_exceptions import POLICY_DIR

    for name in ("platform.yaml", "exceptions.yaml"):
        (tmp_path / name).write_text((POLICY_DIR / name).read_text())
    store = PolicyStore.load(tmp_path)

    def expiry(exception: str, owner: str = "platform-team") -> float | None:
        return REGISTRY.get_sample_value(
            "gpu_admission_exception_expiry_timestamp_seconds", {"exception": exception, "owner": owner}
        )

    assert expiry("dcgm-diag") == datetime(2027, 1, 31, tzinfo=UTC).timestamp()
    text = (tmp_path / "exceptions.yaml").read_text()
    cut = text.index("    - name: nightly-only")
    (tmp_path / "exceptions.yaml").write_text(text[:cut].replace("expires: 2027-01-31", "expires: 2027-03-01"))
    assert store.check()
    assert expiry("dcgm-diag") == datetime(2027, 3, 1, tzinfo=UTC).timestamp()
    assert expiry("nightly-only") == 0
