"""Graceful SIGTERM: a review in flight completes, kept-alive connections are closed (the apiserver would
otherwise keep sending to a terminating pod, kubernetes#127335), the process exits 0.

gunicorn 27's gthread worker does the connection part: after SIGTERM it stops accepting, keeps
kept-alive connections for at most a 2 s linger (a request arriving on one then is answered with
``Connection: close``) and closes them; in-flight requests get ``graceful_timeout``."""

from __future__ import annotations

import signal
import socket
import ssl
import time

import orjson
import pytest

from tests.server import objects
from tests.server.support import SERVICE_DNS, ServerProcess, check_response, client_context, review, serve_args

pytestmark = pytest.mark.server


def _closed_by_peer(sock: ssl.SSLSocket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_sigterm_finishes_in_flight_reviews_and_closes_idle_connections(tmp_path, server_certs):
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--workers",
            "1",
            "--threads",
            "4",
            "--graceful-timeout",
            "10",
            "--namespace-labels",
            "none",
        ),
        ca_files=[server_certs.ca_cert],
    ).start()
    try:
        idle, talker = server.client(), server.client()
        assert idle.get_json("/healthz")[0] == 200  # now parked as kept-alive connections
        assert talker.get_json("/healthz")[0] == 200

        sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
        body = orjson.dumps(sent)
        ctx = client_context([server_certs.ca_cert])
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        inflight = ctx.wrap_socket(raw, server_hostname=SERVICE_DNS)
        head = (
            f"POST /mutate?timeout=10s HTTP/1.1\r\nHost: {SERVICE_DNS}:443\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, */*\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        inflight.sendall(head + body[: len(body) // 2])
        time.sleep(0.3)  # the worker thread is now reading this request's body

        stopped_at = time.monotonic()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        late = review(objects.raw_gpu_pod())
        status, resp, data = talker.request("POST", "/validate?timeout=10s", orjson.dumps(late))
        assert status == 200 and isinstance(check_response(orjson.loads(data), late, "validate")["allowed"], bool)
        assert resp.getheader("Connection") == "close", "a request on a kept-alive connection closes it"
        inflight.sendall(body[len(body) // 2 :])
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
            chunk = inflight.recv(65536)
            if not chunk:
                break
            reply += chunk
        status_line, _, rest = reply.partition(b"\r\n")
        _, _, payload = rest.partition(b"\r\n\r\n")
        assert status_line == b"HTTP/1.1 200 OK", "the review in flight at SIGTERM completes"
        response = check_response(orjson.loads(payload), sent, "mutate")
        assert response["allowed"] is True and "patch" in response

        assert _closed_by_peer(idle.conn.sock, timeout=5), "idle kept-alive connections are closed"
        assert _closed_by_peer(inflight, timeout=5), "and so is the in-flight request's connection"
        inflight.close()
        rc = server.proc.wait(15)
        assert rc == 0
        assert time.monotonic() - stopped_at < 8
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2)
    finally:
        server.stop()
    messages = [r.get("msg", "") for r in server.log_records()]
    assert "Handling signal: term" in messages and "Shutting down: Master" in messages


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0
