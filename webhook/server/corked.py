"""One TLS write per response instead of two.

gunicorn's ``Response`` sends the status line and headers with one ``sendall`` and the body with
another. Over TLS each ``sendall`` is a record of its own: a second encryption, a second syscall and a
second segment on the wire, for an admission answer of a few hundred bytes. The worker lends the
response a :class:`Corked` socket that keeps what is written and sends it in one ``sendall`` when the
response is complete (as a server coalescing headers and body with ``writev`` would).

Whatever else gunicorn asks of the socket (``sendfile``, ``shutdown``, ``close``, ``fileno``) first
sends what is kept, so bytes never change order; a large body (``LIMIT``) goes out as it comes.
"""

from __future__ import annotations

from typing import Any

LIMIT = 64 * 1024
"""Bytes kept before they are sent anyway: a big patch needs no extra copy."""


class Corked:
    """A socket whose ``sendall`` keeps bytes until :meth:`flush` (or :data:`LIMIT`)."""

    __slots__ = ("_kept", "_size", "sock")

    def __init__(self, sock: Any):
        self.sock = sock
        self._kept: list[bytes] = []
        self._size = 0

    def sendall(self, data: bytes) -> None:
        self._kept.append(bytes(data))
        self._size += len(data)
        if self._size >= LIMIT:
            self.flush()

    def flush(self) -> None:
        if self._kept:
            data = self._kept[0] if len(self._kept) == 1 else b"".join(self._kept)
            self._kept.clear()
            self._size = 0
            self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self.sock, name)
