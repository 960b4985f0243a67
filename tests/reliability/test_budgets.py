"""What one client may hold in a worker's read phase: bytes it sent, never bytes it announced.

A worker reads each request in its event loop before a thread gets it (``webhook/server/worker.py``),
so everything a client has sent and the worker holds must be bounded, and one client must not be
able to take the whole bound. Each test here attacks a real server (gunicorn, TLS, loopback) the
way a pod on the cluster network could, then sends a fresh review and asserts its answer.

How the tests know the server has seen an attack before the fresh review goes: the server end of
each attacking connection has nothing left unread in the kernel (``rx_queue`` in /proc/net/tcp is
0, or the connection is gone). The worker's loop reads and judges a connection's bytes in one
callback, and the fresh review's connection is handled by the same loop after it, so this is an
order of events, not a wait of some length.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.server import objects
from tests.server.client_certs import make_client_pki
from tests.server.support import (
    SERVICE_DNS,
    ApiserverClient,
    ServerProcess,
    check_response,
    client_context,
    review,
    running,
    serve_args,
)
from webhook.server.review import MAX_BODY_BYTES

pytestmark = [pytest.mark.reliability, pytest.mark.server]

ANNOUNCE = (
    b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % MAX_BODY_BYTES
)
"""The head of a 3 MiB review (the largest the server reads), after which an attacker stalls."""


def _server(tmp_path: Any, certs: Any, *extra: str) -> ServerProcess:
    """One worker, so that every connection of a test lands on the worker the test reasons about."""
    return ServerProcess(
        tmp_path,
        serve_args(
            certs, "--workers", "1", "--threads", "2", "--request-timeout", "30", "--namespace-labels", "none", *extra
        ),
        ca_files=[certs.ca_cert],
    )


def _server_end(server_port: int, client_port: int) -> list[str] | None:
    """The /proc/net/tcp row of the server end of the connection from ``client_port`` (None: gone)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
                if int(local, 16) == server_port and int(remote, 16) == client_port:
                    return fields
    return None


def _state(server_port: int, client_port: int) -> str | None:
    row = _server_end(server_port, client_port)
    return row[3] if row else None


def _unread(server_port: int, client_port: int) -> int | None:
    """Bytes the kernel holds for the server end of the connection from ``client_port`` that the
    server has not read yet; None when that connection is gone."""
    row = _server_end(server_port, client_port)
    if row is None or row[3] != "01":  # only an ESTABLISHED server end still has a reader
        return None
    return int(row[4].split(":")[1], 16)


def _wait_read(server: ServerProcess, socks: list[socket.socket], timeout: float = 60.0) -> None:
    """Until the server has read everything each of ``socks`` sent (or closed it)."""
    ports = [s.getsockname()[1] for s in socks]
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in ports if _unread(server.port, p)]
        if not left:
            return
        assert time.monotonic() < deadline, f"{len(left)} connections still unread by the server"
        time.sleep(0.02)


def _wait_gone(server: ServerProcess, client_port: int, timeout: float = 60.0) -> None:
    """Until the server has closed its end of the connection from ``client_port`` (the client closed it)."""
    deadline = time.monotonic() + timeout
    while _state(server.port, client_port) in ("01", "08"):  # ESTABLISHED, CLOSE_WAIT
        assert time.monotonic() < deadline, "the server kept a connection the client closed"
        time.sleep(0.02)


def _tls(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname=SERVICE_DNS)


def _answer(sock: socket.socket, timeout: float = 0.0) -> bytes | None:
    """What the server has sent on ``sock`` within ``timeout`` seconds: its bytes, b"" for a close or
    a reset, None for nothing yet (TLS records that carry no data, such as session tickets, are not
    an answer)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.0))
            return sock.recv(65536)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            if time.monotonic() >= deadline:
                return None
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return b""


def _status(answer: bytes | None) -> int | None:
    if not answer or not answer.startswith(b"HTTP/1.1 "):
        return None
    return int(answer[9:12])


@contextlib.contextmanager
def _closing(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def _fresh_review(client: ApiserverClient) -> None:
    """The apiserver's next review: answered, with the patch the engine computes for it."""
    sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
    status, _, data = client.request("POST", "/mutate?timeout=10s", orjson.dumps(sent))
    assert status == 200, f"the fresh review was answered {status}: {data[:300]!r}"
    response = check_response(orjson.loads(data), sent, "mutate")
    assert response["allowed"] is True and "patch" in response


def test_announced_bodies_hold_no_budget(tmp_path, server_certs):
    """40 connections announce a 3 MiB body and send nothing of it: they hold what they sent (a head
    each), not 40 x 3 MiB, so the fresh review is answered. (Charged by declared length, the worker's
    48 MiB were full after 16, and the fresh review got a 503.)"""
    with running(_server(tmp_path, server_certs)) as server:
        ctx = client_context([server_certs.ca_cert])
        with _closing([_tls(server.port, ctx) for _ in range(40)]) as attackers:
            for s in attackers:
                s.sendall(ANNOUNCE)
            _wait_read(server, attackers)
            client = server.client(timeout=30)
            try:
                _fresh_review(client)
            finally:
                client.close()
            assert not [s for s in attackers if _status(_answer(s)) is not None], "no announcement was refused"


def test_bodies_sent_are_capped_per_client(tmp_path, server_certs):
    """20 connections announce 3 MiB and send all but the last KiB of it (58 MiB in all, more than the
    worker's budget). What one client may hold is capped: the connections past it are answered 503
    (and give back what they held), and the fresh review (a few KiB) is answered as usual."""
    part = b"[" + b"1," * ((MAX_BODY_BYTES - 1024) // 2)
    with running(_server(tmp_path, server_certs)) as server:
        ctx = client_context([server_certs.ca_cert])
        with _closing([_tls(server.port, ctx) for _ in range(20)]) as attackers:
            for s in attackers:
                with contextlib.suppress(OSError, ssl.SSLError):  # refused while still sending: reset
                    s.sendall(ANNOUNCE + part)
            _wait_read(server, attackers)
            client = server.client(timeout=30)
            try:
                _fresh_review(client)
            finally:
                client.close()
            cut = [_answer(s) for s in attackers]  # answered at once (the cut ones), or still held
    cut = [a for a in cut if a is not None]
    assert cut, "one client held 20 x 3 MiB"
    assert all(_status(a) in (503, None) for a in cut), [a[:80] for a in cut]  # 503, or a reset after it


def test_a_head_longer_than_an_apiserver_sends_is_refused_at_once(tmp_path, server_certs):
    """A head of 60 header lines of 1,000 bytes, never finished (within gunicorn's default limits of
    100 x 8190 bytes, each such connection was buffered up to ~800 KiB until the request timeout): it
    is answered 431 as soon as it passes the head limit, and the fresh review is answered."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-Pad-%02d: %s\r\n" % (i, b"a" * 990) for i in range(60)
    )
    with running(_server(tmp_path, server_certs)) as server:
        ctx = client_context([server_certs.ca_cert])
        with _closing([_tls(server.port, ctx) for _ in range(10)]) as attackers:
            for s in attackers:
                s.sendall(head)
            answers = [_answer(s, 20.0) for s in attackers]
            client = server.client(timeout=30)
            try:
                _fresh_review(client)
            finally:
                client.close()
    for answer in answers:
        assert _status(answer) == 431, (answer or b"")[:200]
        doc = orjson.loads(answer.partition(b"\r\n\r\n")[2])  # type: ignore[union-attr]
        assert doc["code"] == 431 and "header" in doc["message"]


def test_connections_per_client_are_capped(tmp_path, server_certs):
    """A client opens more connections than a worker lets one client hold unfinished, and sends
    nothing: the ones past the cap are closed at once; the others stay until the request timeout.
    Once the client closes a few, its fresh review is accepted and answered."""
    from webhook.server.worker import PEER_CONNECTIONS

    extra = 8
    with running(_server(tmp_path, server_certs)) as server:
        socks = [
            socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(PEER_CONNECTIONS + extra)
        ]
        with _closing(socks):
            deadline = time.monotonic() + 60
            closed: set[int] = set()
            while len(closed) < extra:
                assert time.monotonic() < deadline, f"{len(closed)} of {len(socks)} connections closed by the server"
                for i, s in enumerate(socks):
                    if i not in closed and _answer(s) == b"":
                        closed.add(i)
                time.sleep(0.02)
            assert len(closed) == extra, f"{len(closed)} closed, expected the {extra} past the cap"
            freed = [s for i, s in enumerate(socks) if i not in closed][:extra]
            for s in freed:  # the client gives a few places back; the server sees them go
                port = s.getsockname()[1]
                s.close()
                _wait_gone(server, port)
            client = server.client(timeout=30)
            try:
                _fresh_review(client)
            finally:
                client.close()


def test_refused_client_names_hold_no_budget(tmp_path, server_certs):
    """With ``--client-ca``, a certificate of the same CA that is not an accepted name (a kubelet's)
    gets its 403 without the body it announces being counted: 20 such connections announcing 3 MiB
    do not stop the apiserver's review. (Counted, the worker's budget was full after 16: 503.)"""
    pki = tmp_path / "pki"
    ca, cert, key = make_client_pki(pki, others={"kubelet": ("system:node:gpu-node-1", ())})
    server = _server(tmp_path, server_certs, "--client-ca", str(ca))
    server.client = lambda **kw: ApiserverClient(  # type: ignore[method-assign]  # readiness needs a client cert
        server.port, [server_certs.ca_cert], client_cert=(cert, key), **kw
    )
    with running(server):
        kubelet = client_context([server_certs.ca_cert], (pki / "kubelet.crt", pki / "kubelet.key"))
        with _closing([_tls(server.port, kubelet) for _ in range(20)]) as attackers:
            for s in attackers:
                s.sendall(ANNOUNCE)
            _wait_read(server, attackers)
            client = server.client(timeout=30)
            try:
                _fresh_review(client)
            finally:
                client.close()
            answers = [_status(_answer(s, 5.0)) for s in attackers]
    assert set(answers) <= {403, None}, answers
