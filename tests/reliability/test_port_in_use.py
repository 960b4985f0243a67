"""The admission port is checked before gunicorn starts. With ``reuse_port`` each worker binds its
own socket, so without this check a taken port would only show as workers failing to boot in a
loop, and a second gpu-admission on the same port would silently share its connections."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import POLICIES
from tests.server.support import ServerProcess

pytestmark = [pytest.mark.reliability, pytest.mark.server]


def _args(certs) -> list[str]:
    return [
        "--policy",
        str(POLICIES),
        "--tls-cert",
        str(certs.cert),
        "--tls-key",
        str(certs.key),
        "--workers",
        "1",
        "--namespace-labels",
        "none",
    ]


def _server(workdir: Path, certs, port: int) -> ServerProcess:
    """A ServerProcess told to bind ``port`` instead of the free one it picked."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(workdir, _args(certs), ca_files=[certs.ca_cert])
    server.port = port
    server.args[1] = f"127.0.0.1:{port}"  # --bind HOST:PORT is the first pair ServerProcess passes
    return server


def test_a_port_held_by_another_process_fails_fast(tmp_path: Path, server_certs):
    with socket.create_server(("127.0.0.1", 0)) as holder:
        server = _server(tmp_path, server_certs, holder.getsockname()[1]).start(wait_ready=False)
        assert server.proc is not None
        assert server.proc.wait(30) == 1
        server.stop()
    assert "cannot listen on 127.0.0.1:" in server.output() and "Address already in use" in server.output()
    assert "Booting worker" not in server.output()


def test_a_second_server_on_the_same_port_is_refused(tmp_path: Path, server_certs):
    (tmp_path / "a").mkdir()
    first = ServerProcess(tmp_path / "a", _args(server_certs), ca_files=[server_certs.ca_cert]).start()
    try:
        second = _server(tmp_path / "b", server_certs, first.port).start(wait_ready=False)
        assert second.proc is not None
        assert second.proc.wait(30) == 1, "SO_REUSEPORT must not let a second server share the port"
        second.stop()
        assert "Address already in use" in second.output()
        client = first.client()
        assert client.get_json("/healthz")[0] == 200
        client.close()
    finally:
        assert first.stop() == 0


def test_a_taken_metrics_port_fails_fast_like_a_taken_admission_port(tmp_path: Path, server_certs):
    with socket.create_server(("127.0.0.1", 0)) as holder:
        server = ServerProcess(tmp_path, _args(server_certs), ca_files=[server_certs.ca_cert])
        server.metrics_port = holder.getsockname()[1]
        server.args[3] = f"127.0.0.1:{server.metrics_port}"  # --metrics-bind HOST:PORT is the second pair
        server.start(wait_ready=False)
        assert server.proc is not None
        assert server.proc.wait(30) == 1
        server.stop()
    out = server.output()
    assert f"cannot listen on 127.0.0.1:{server.metrics_port} (--metrics-bind): " in out, out
    assert "Address already in use" in out and "Booting worker" not in out


def test_the_development_server_listens_on_loopback_unless_told():
    """`gpu-admission serve` as the README runs it: reachable from this machine only."""
    from webhook.cli import build_parser

    assert build_parser().parse_args(["serve"]).bind == "127.0.0.1:8443"
    assert build_parser().parse_args(["serve", "--bind", "0.0.0.0:8443"]).bind == "0.0.0.0:8443"
