"""The gunicorn worker: gthread, except that a request is read whole before a thread is given it.

gunicorn's gthread worker hands a new connection to a pool thread, which then does the TLS handshake
and reads the request line, headers and body with blocking ``recv`` calls and no deadline. A client
that sends ``POST /validate HTTP/1.1`` and then a header line every few seconds holds that thread for
as long as it likes; sixteen such clients hold every thread of a 2 x 8 server, and the apiserver's
next review waits (the validating webhook is ``failurePolicy: Fail``: every GPU workload is refused).

Here the event loop (the worker's main thread, which already multiplexes idle keep-alive
connections) does that part instead, without blocking:

* the TLS handshake, non-blocking, on the loop;
* the request line and headers, up to gunicorn's own header limits;
* the body, up to ``Content-Length`` (the apiserver always sends one; ``Transfer-Encoding`` is
  answered ``411`` — an admission review has no reason to stream).

Only a request that is complete in memory goes to a thread, which then parses it from the buffer and
never waits for the client. Every connection in that phase has a deadline (``request_timeout``, from
the first byte of a request, or the accept for a new connection); past it, it is answered ``408`` if
it got past the handshake, and closed. Slow clients cost one socket and a buffer each, not a thread,
so no number of them delays a review that arrives whole (bounded by ``worker_connections``).

Request bytes held in that phase are bounded per worker (``read_budget``, counted by declared
``Content-Length``): past it, a request is answered ``503`` at once instead of buffered, so many
connections each announcing a 3 MiB body cannot run a worker out of memory.

Errors gunicorn's own HTTP parser raises before the app runs (a bad ``Content-Length``, obs-fold,
``431``) are written by ``gunicorn.util.write_error`` as an HTML page; this module replaces it with a
JSON answer of the same shape as every other error of the server.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import ssl
import time
from collections import deque
from functools import partial
from typing import Any

import orjson
from gunicorn import http, sock, util
from gunicorn.workers.gthread import TConn, ThreadWorker

from webhook.server.corked import Corked
from webhook.server.review import MAX_BODY_BYTES, error_body
from webhook.server.tls import client_allowed, peer_names

REQUEST_TIMEOUT = 5.0
"""Seconds a client has to send one whole request (handshake included, for a new connection)."""
READ_BUDGET = 16 * MAX_BODY_BYTES
"""Request bytes (by declared Content-Length) one worker buffers for unfinished requests."""
DRAIN_LIMIT = 4 * MAX_BODY_BYTES
"""An oversized body up to this size is read and dropped before the 413, so the client reads it."""
_RECV = 256 * 1024
_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def json_error(status: int, reason: str, message: str) -> bytes:
    body = orjson.dumps(error_body(status, reason, message))
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _write_error(client: Any, status_int: int, reason: str, mesg: str) -> None:
    """``gunicorn.util.write_error`` with a JSON body (gunicorn's is an HTML page)."""
    util.write_nonblock(client, json_error(status_int, reason, mesg))


util.write_error = _write_error  # gunicorn's workers call it through the module: one assignment, at import


class _Reading:
    """One connection in the read phase: what has arrived and what is still expected."""

    __slots__ = (
        "budgeted",
        "buf",
        "conn",
        "deadline",
        "discard",
        "handshaking",
        "header_end",
        "need",
        "refused",
        "writing",
    )

    def __init__(self, conn: TConn, deadline: float, handshaking: bool, buf: bytes = b""):
        self.conn = conn
        self.deadline = deadline
        self.handshaking = handshaking
        self.buf = bytearray(buf)
        self.header_end = -1  # index after the blank line, once seen
        self.need = -1  # total bytes of the request, once the headers are in
        self.discard = 0  # body bytes still to read and drop (an oversized body, answered 413)
        self.budgeted = 0
        self.writing = False
        self.refused = False


class AdmissionWorker(ThreadWorker):
    """``gthread`` with the request read by the event loop (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings = getattr(self.app, "settings", None)
        self.request_timeout = float(getattr(settings, "request_timeout", REQUEST_TIMEOUT))
        self.read_budget = int(getattr(settings, "read_budget", READ_BUDGET))
        self.client_names: tuple[str, ...] | None = (
            tuple(getattr(settings, "client_names", ())) if getattr(settings, "client_ca", None) else None
        )
        self.reading: deque[_Reading] = deque()  # ordered by deadline: every entry gets now + timeout
        self.buffered = 0
        limits = self.cfg
        # the most a request head can be within gunicorn's own limits (line + fields)
        self.max_head = (
            (limits.limit_request_line or 8190)
            + 4
            + (limits.limit_request_fields or 32768) * ((limits.limit_request_field_size or 8190) + 2)
        )

    # --- entering the read phase ----------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, client, addr, listener.getsockname())  # non-blocking
        handshaking = False
        if self.cfg.is_ssl:
            try:
                conn.sock = sock.ssl_context(self.cfg).wrap_socket(
                    client,
                    server_side=True,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                    do_handshake_on_connect=False,
                )
            except (ssl.SSLError, OSError) as exc:
                self.log.warning("TLS context unavailable, closing connection: %s", exc)
                self._close(conn)
                return
            handshaking = True
        self._start(conn, handshaking, b"")

    def set_accept_enabled(self, enabled: bool) -> None:
        """At a graceful stop, first accept what the kernel already queued on this worker's socket.

        Each worker has its own ``SO_REUSEPORT`` listener, so a connection in its backlog (the TCP
        handshake done, the request possibly sent) can go to no other worker; gunicorn stops
        accepting and closes the listener, which resets it. A worker stopped while starting, or
        while its loop was busy, had such connections waiting: they are taken now and answered in
        the grace period like the other requests in flight."""
        if not enabled and self._accepting and not self.alive:
            for listener in self.sockets:
                while self.nr_conns < self.worker_connections:
                    before = self.nr_conns
                    self.accept(listener)
                    if self.nr_conns <= before:  # the backlog is empty (or the connection was refused)
                        break
        super().set_accept_enabled(enabled)

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        """A kept-alive connection starts its next request: read it here, not in a thread."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._start(conn, False, b"")

    def finish_request(self, conn: TConn, fs: Any) -> None:
        # bytes of the next request read along with this one (pipelining, a drained body) go
        # through the read phase too, instead of a thread reading the rest from the client
        if self.alive and not fs.cancelled() and fs.exception() is None and fs.result() is True:
            left = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
            if left:
                conn.sock.setblocking(False)
                self._start(conn, False, left)
                return
        super().finish_request(conn, fs)

    def handle_request(self, req: Any, conn: TConn) -> bool:
        """gthread's, with the status line, headers and body sent as one TLS write
        (``webhook.server.corked``). If the app fails, gunicorn's own error path runs on the real
        socket, as without this."""
        real = conn.sock
        conn.sock = corked = Corked(real)
        try:
            keep: bool = super().handle_request(req, conn)
            corked.flush()
            return keep
        finally:
            conn.sock = real

    def _start(self, conn: TConn, handshaking: bool, buf: bytes) -> None:
        state = _Reading(conn, time.monotonic() + self.request_timeout, handshaking, buf)
        self.reading.append(state)
        if buf and self._progress(state):
            return
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, state))
        if not handshaking:  # a kept-alive connection is readable now: read at once, not on the next turn
            self._on_readable(state, conn.sock)

    # --- the read phase -------------------------------------------------------------------------

    def _on_readable(self, state: _Reading, _fileobj: Any) -> None:
        conn = state.conn
        try:
            if state.handshaking:
                try:
                    conn.sock.do_handshake()
                except ssl.SSLWantReadError:
                    return self._want(state, False)
                except ssl.SSLWantWriteError:
                    return self._want(state, True)
                state.handshaking = False
                if self.client_names is not None and not client_allowed(conn.sock.getpeercert(), self.client_names):
                    self.log.warning(
                        "client certificate refused from ip=%s: names %s not in --client-names",
                        _ip(conn),
                        ", ".join(peer_names(conn.sock.getpeercert())) or "(none)",
                    )
                    state.refused = True  # answered once its request is in, so the client reads why
            while True:
                try:
                    data = conn.sock.recv(_RECV)
                except (ssl.SSLWantReadError, BlockingIOError):
                    return self._want(state, False)
                except ssl.SSLWantWriteError:
                    return self._want(state, True)
                if not data:  # the client went away (or closed an idle keep-alive connection)
                    return self._drop(state)
                if state.discard:
                    state.discard -= min(state.discard, len(data))
                    if not state.discard:
                        return self._answer(state, 413, _too_large())
                    continue
                state.buf += data
                if self._progress(state):
                    return
        except (ssl.SSLError, OSError) as exc:  # handshake refused, reset: nothing to answer
            self.log.debug("closing connection in the read phase: %s", exc)
            self._drop(state)

    def _want(self, state: _Reading, write: bool) -> None:
        if write != state.writing:
            events = selectors.EVENT_READ | selectors.EVENT_WRITE if write else selectors.EVENT_READ
            self.poller.modify(state.conn.sock, events, partial(self._on_readable, state))
            state.writing = write

    def _progress(self, state: _Reading) -> bool:
        """Look at what has arrived; hand the request on or answer it when it is decided. True when
        the connection has left the read phase."""
        buf = state.buf
        if state.header_end < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > self.max_head:
                    self._answer(state, 431, "request line and headers exceed the server's limits")
                    return True
                return False
            state.header_end = end + 4
            verdict = self._framing(state)
            if verdict is not None:
                return verdict
            if state.discard:  # dropping an oversized body: nothing to hand on
                return False
            buf = state.buf
        if len(buf) >= state.need:
            if state.refused:
                self._answer(state, 403, "client certificate not accepted by this webhook")
            else:
                self._hand_off(state)
            return True
        return False

    def _framing(self, state: _Reading) -> bool | None:
        """Decide from the headers how much body to wait for; None to go on reading."""
        length: bytes | None = None
        for line in bytes(state.buf[: state.header_end - 4]).split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                self._answer(state, 411, "send the body with a Content-Length (no Transfer-Encoding)")
                return True
            if name == b"content-length":
                if length is not None and length != value.strip():
                    length = b"x"  # conflicting lengths: gunicorn's parser answers 400
                else:
                    length = value.strip()
        if length is None or not length.isdigit():  # no body, or one gunicorn's parser rejects
            state.need = state.header_end
            return None
        size = int(length)
        if size > DRAIN_LIMIT:  # too much to read only to drop it: answer now
            self._answer(state, 413, _too_large())
            return True
        if size > MAX_BODY_BYTES:  # read and drop it (under the deadline), then answer 413: a client
            # that is still sending when the connection closes gets a reset and never reads the answer
            state.discard = size - (len(state.buf) - state.header_end)
            state.buf = bytearray()
            if state.discard <= 0:
                self._answer(state, 413, _too_large())
                return True
            return None
        if self.buffered + size > self.read_budget:
            self._answer(state, 503, "the server is reading too many request bodies at once; retry")
            return True
        state.budgeted = size
        self.buffered += size
        state.need = state.header_end + size
        return None

    def _leave(self, state: _Reading) -> None:
        self.buffered -= state.budgeted
        state.budgeted = 0
        with contextlib.suppress(ValueError):
            self.reading.remove(state)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(state.conn.sock)

    def _hand_off(self, state: _Reading) -> None:
        """The request is here: give it (already in memory) to a thread."""
        self._leave(state)
        conn = state.conn
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        held = conn.parser.unreader.buf
        held.seek(0, 2)
        held.write(state.buf)
        state.buf = bytearray()
        conn.initialized = conn.data_ready = True
        conn.sock.setblocking(True)
        self.enqueue_req(conn)

    def _answer(self, state: _Reading, status: int, message: str) -> None:
        """Answer from the loop (best effort, never blocking) and close."""
        self._leave(state)
        with contextlib.suppress(OSError, ValueError):
            state.conn.sock.send(json_error(status, _REASONS[status], message))
        self.log.warning("Invalid request from ip=%s: %s %s", _ip(state.conn), status, message)
        self._close(state.conn)

    def _drop(self, state: _Reading) -> None:
        self._leave(state)
        self._close(state.conn)

    def _close(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    # --- deadlines ------------------------------------------------------------------------------

    def murder_pending(self) -> None:
        """Runs on every turn of the event loop (at least once a second): cut the clients that did not
        send their request in time, then gunicorn's own pending connections."""
        now = time.monotonic()
        while self.reading and self.reading[0].deadline <= now:
            state = self.reading[0]
            if state.handshaking or not (state.buf or state.discard or state.header_end >= 0):
                self._drop(state)  # nothing of a request yet: nothing to answer
            else:
                self._answer(state, 408, f"request not received within {self.request_timeout:g} seconds")
        super().murder_pending()


def _too_large() -> str:
    return f"request body larger than {MAX_BODY_BYTES} bytes (the apiserver's own limit)"


def _ip(conn: TConn) -> str:
    client = conn.client
    return str(client[0]) if isinstance(client, tuple) and client else "?"
