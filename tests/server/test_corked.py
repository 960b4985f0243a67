"""The response socket that sends headers and body as one write (``webhook.server.corked``).

A recording socket stands in for the TLS socket: the property that matters is how many ``sendall``
calls reach it and in what order the bytes arrive. The real server path (gunicorn, TLS, keep-alive,
errors written by gunicorn's own handler) is exercised by every test under ``tests/server``.
"""

from __future__ import annotations

import socket

from webhook.server.corked import LIMIT, Corked


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def sendall(self, data: bytes) -> None:
        self.calls.append(("sendall", bytes(data)))

    def shutdown(self, how: int) -> None:
        self.calls.append(("shutdown", b""))

    def fileno(self) -> int:
        self.calls.append(("fileno", b""))
        return 7


def test_headers_and_body_leave_in_one_write():
    real = Recording()
    corked = Corked(real)
    corked.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
    corked.sendall(memoryview(b"{}"))
    assert real.calls == []
    corked.flush()
    assert real.calls == [("sendall", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")]
    corked.flush()  # nothing kept: nothing sent
    assert len(real.calls) == 1


def test_any_other_use_of_the_socket_sends_what_is_kept_first():
    real = Recording()
    corked = Corked(real)
    corked.sendall(b"partial")
    corked.shutdown(socket.SHUT_WR)  # gunicorn's close_graceful on an aborted response
    assert real.calls == [("sendall", b"partial"), ("shutdown", b"")]
    assert corked.fileno() == 7 and real.calls[-1] == ("fileno", b"")


def test_a_large_body_is_not_held():
    real = Recording()
    corked = Corked(real)
    corked.sendall(b"h" * 100)
    corked.sendall(b"b" * LIMIT)
    assert [len(d) for _, d in real.calls] == [100 + LIMIT]
    corked.sendall(b"tail")
    corked.flush()
    assert [len(d) for _, d in real.calls] == [100 + LIMIT, 4]
