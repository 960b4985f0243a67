"""``gpu-admission serve`` as a command: configuration errors exit 2 before gunicorn starts, development
certificates when none are given, environment sizing, and ``--client-ca``."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.client_certs import make_client_pki
from tests.server.support import ROOT, ApiserverClient, ServerProcess, check_response, review, serve_args

DEFAULT = (POLICIES / "default.yaml").read_text()


def _serve(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--metrics-bind", "off", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_a_broken_policy_at_start_exits_2_with_file_line(tmp_path: Path):
    (tmp_path / "default.yaml").write_text(DEFAULT.replace("failure: allow", "failure: sometimes"))
    run = _serve("--policy", str(tmp_path), "--bind", "127.0.0.1:1")
    assert run.returncode == 2
    assert f"{tmp_path / 'default.yaml'}:" in run.stderr and "failure" in run.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "x.crt"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"], "no such file"),
        (["--bind", "8443"], "expected HOST:PORT"),
        (["--workers", "0"], "at least 1"),
        (["--bind", "127.0.0.1:9443", "--metrics-bind", "127.0.0.1:9443"], "takes the port of --bind"),
        (["--bind", "0.0.0.0:9443", "--metrics-bind", "127.0.0.1:9443"], "takes the port of --bind"),
    ],
)
def test_configuration_errors_exit_2(args: list[str], message: str):
    run = _serve(*args)
    assert run.returncode == 2
    assert message in run.stderr


def test_a_bad_namespaces_file_exits_2(tmp_path: Path, server_certs):
    bad = tmp_path / "ns.yaml"
    bad.write_text("research: [not, a, map]\n")
    certs = ("--tls-cert", str(server_certs.cert), "--tls-key", str(server_certs.key))
    run = _serve("--namespace-labels", str(bad), *certs)
    assert run.returncode == 2
    assert "must map to a label map" in run.stderr


@pytest.mark.server
def test_development_certificates_and_env_sizing(tmp_path: Path):
    certs = tmp_path / "certs"
    server = ServerProcess(
        tmp_path,
        ["--policy", str(POLICIES), "--certs-dir", str(certs), "--namespace-labels", "none"],
        ca_files=[certs / "ca.crt"],
        env={"GPU_ADMISSION_WORKERS": "3", "GPU_ADMISSION_THREADS": "2"},
    )
    server.start()
    try:
        client = server.client()
        sent = review(objects.inference_pod(), namespace="ml")
        status, doc = client.post_review("mutate", sent)
        assert status == 200 and "patch" in check_response(doc, sent, "mutate")
        client.close()
        localhost = ApiserverClient(server.port, [certs / "ca.crt"], server_name="localhost")
        assert localhost.get_json("/healthz")[0] == 200
        localhost.close()
    finally:
        assert server.stop() == 0
    out = server.output()
    assert f"created development certificates in {certs}/" in out
    assert {p.name for p in certs.iterdir()} >= {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    booted = [r for r in server.log_records() if r.get("msg", "").startswith("Booting worker")]
    assert len(booted) == 3, "GPU_ADMISSION_WORKERS sizes the pool"
    records = server.log_records()
    starting = [r for r in records if r.get("msg") == "gpu-admission starting"]
    assert starting[0]["workers"] == 3 and starting[0]["threads"] == 2
    listening = [r["msg"] for r in records if r.get("msg", "").startswith("Listening at:")]
    assert listening and listening[0].startswith(f"Listening at: https://127.0.0.1:{server.port} "), listening
    # "ready" is said by each worker once it serves, after it booted; not by the master before
    ready = [(records.index(r), r["pid"]) for r in records if r.get("msg") == "gpu-admission ready"]
    assert sorted(pid for _, pid in ready) == sorted(r["pid"] for r in booted)
    boot_at = {r["pid"]: records.index(r) for r in booted}
    assert all(at > boot_at[pid] for at, pid in ready)

    again = ServerProcess(
        tmp_path,
        ["--policy", str(POLICIES), "--certs-dir", str(certs), "--namespace-labels", "none"],
        ca_files=[certs / "ca.crt"],
    )
    again.start()
    assert again.stop() == 0
    assert f"reusing development certificates in {certs}/" in again.output()


@pytest.mark.server
def test_client_ca_requires_a_client_certificate(tmp_path: Path, server_certs):
    client_ca, client_cert, client_key = make_client_pki(tmp_path / "client")
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--client-ca",
            str(client_ca),
            "--workers",
            "1",
            "--namespace-labels",
            "none",
        ),
        ca_files=[server_certs.ca_cert],
    )
    # readiness needs a client certificate too: probe with one
    server.client = lambda **kw: ApiserverClient(  # type: ignore[method-assign]
        server.port, [server_certs.ca_cert], client_cert=(client_cert, client_key), **kw
    )
    server.start()
    try:
        anonymous = ApiserverClient(server.port, [server_certs.ca_cert])
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            anonymous.get_json("/healthz")
        anonymous.close()
        authenticated = server.client()
        sent = review(objects.raw_gpu_pod())
        status, doc = authenticated.post_review("validate", sent)
        assert status == 200 and isinstance(check_response(doc, sent, "validate")["allowed"], bool)  # judged
        authenticated.close()
    finally:
        assert server.stop() == 0
