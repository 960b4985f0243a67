"""The gunicorn worker: gthread, except that a request is read whole before a thread is given it.

gunicorn's gthread worker hands a new connection to a pool thread, which then does the TLS handshake
and reads the request line, headers and body with blocking ``recv`` calls and no deadline. A client
that sends ``POST /validate HTTP/1.1`` and then a header line every few seconds holds that thread for
as long as it likes; sixteen such clients hold every thread of a 2 x 8 server, and the apiserver's
next review waits (the validating webhook is ``failurePolicy: Fail``: every GPU workload is refused).

Here the event loop (the worker's main thread, which already multiplexes idle keep-alive
connections) does that part instead, without blocking:

* the TLS handshake, non-blocking, on the loop;
* the request line and headers, up to ``HEAD_LIMIT`` (gunicorn's own header limits lie within it);
* the body, up to ``Content-Length`` (the apiserver always sends one; ``Transfer-Encoding`` is
  answered ``411`` — an admission review has no reason to stream).

Only a request that is complete in memory goes to a thread, which then parses it from the buffer and
never waits for the client. Every connection in that phase has a deadline (``request_timeout``, from
the first byte of a request, or the accept for a new connection); past it, it is answered ``408`` if
it got past the handshake, and closed. Slow clients cost one socket and a buffer each, not a thread,
so no number of them delays a review that arrives whole (bounded by ``worker_connections``).

What a connection holds in that phase is bounded, and no one client can take all of it:

* bytes are charged to the worker's read budget (``read_budget``) as they arrive, head and body,
  never by the ``Content-Length`` a client announces: a connection that announces 3 MiB and sends
  nothing holds its head. A request larger than ``SMALL_REQUEST`` (a real review is a few KiB) may
  use only what ``SMALL_SHARE`` leaves to large requests and, with the other large requests of the
  same client address, up to ``PEER_BUDGET``: past either it is answered ``503``, so many half-sent
  3 MiB bodies can neither run the worker out of memory nor starve the small reviews;
* a head (request line and headers) may be ``HEAD_LIMIT`` bytes, what an apiserver sends with room
  to spare; past it: ``431`` at once;
* a body no review needs is refused before it is read: over ``MAX_BODY_BYTES`` on the admission
  paths, over ``SMALL_REQUEST`` anywhere else: ``413`` at once;
* one client address may have ``PEER_CONNECTIONS`` connections in this phase (handshaking or
  sending a request) per worker; a further connection from it is closed as soon as it is accepted;
* with ``--client-ca``, a client certificate whose names are not accepted is known when the
  handshake ends: that connection's head is read (never budgeted) and answered ``403``; its body
  is never buffered.

An error answered before the request is in is sent at once, and the connection is then read and
dropped until the client closes it (up to ``DRAIN_LIMIT`` bytes, for at most ``LINGER`` seconds),
so that a client still sending reads the answer instead of a reset.

Errors gunicorn's own HTTP parser raises before the app runs (a bad ``Content-Length``, obs-fold,
``431``) are written by ``gunicorn.util.write_error`` as an HTML page; this module replaces it with a
JSON answer of the same shape as every other error of the server.
"""

from __future__ import annotations

import contextlib
import errno
import select
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
"""Request bytes (heads and bodies, as received) one worker holds for unfinished requests."""
SMALL_REQUEST = 64 * 1024
"""A request (head and body) up to this size is refused for lack of room only when the whole read
budget is taken; real reviews are a few KiB."""
SMALL_SHARE = 4
"""One part in ``SMALL_SHARE`` of the read budget (12 MiB of 48) is for small requests only."""
PEER_BUDGET = 4 * MAX_BODY_BYTES
"""Bytes one client address may hold per worker in requests larger than ``SMALL_REQUEST``."""
PEER_CONNECTIONS = 128
"""Connections one client address may have per worker in the read phase (handshake, unfinished
request): a quarter of ``WORKER_CONNECTIONS``, so that one pod cannot take them all. The apiserver's
requests arrive whole and it reuses kept-alive connections, so its own are in this phase briefly;
room is left for a burst of new ones (its pool opening)."""
WORKER_CONNECTIONS = 512
"""Connections per worker in all (gunicorn's ``worker_connections``): read phase, in a thread, kept alive."""
HEAD_LIMIT = 8 * 1024
"""Request line and headers, in bytes. The apiserver sends well under 1 KiB (a bearer token for
webhook authentication included)."""
LIMIT_REQUEST_LINE = 2048
LIMIT_REQUEST_FIELDS = 32
LIMIT_REQUEST_FIELD_SIZE = 4096
"""gunicorn's own head limits, within ``HEAD_LIMIT``: its parser answers ``414``/``431`` past them."""
DRAIN_LIMIT = 4 * MAX_BODY_BYTES
"""Bytes read and dropped after an early answer (so that the client reads it) before the connection
is closed anyway."""
LINGER = 2.0
"""Seconds a connection answered early is still read (and dropped) so that its client reads the answer."""
ADMISSION_PATHS = (b"/mutate", b"/validate")
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


class _Peer:
    """What one client address holds in a worker's read phase."""

    __slots__ = ("conns", "large")

    def __init__(self) -> None:
        self.conns = 0
        self.large = 0  # bytes held in its requests larger than SMALL_REQUEST


class _Reading:
    """One connection in the read phase: what has arrived and what is still expected."""

    __slots__ = (
        "answered",
        "budgeted",
        "buf",
        "conn",
        "deadline",
        "done",
        "dropped",
        "handshaking",
        "header_end",
        "large",
        "need",
        "peer",
        "refused",
        "writing",
    )

    def __init__(self, conn: TConn, deadline: float, handshaking: bool, peer: str):
        self.conn = conn
        self.deadline = deadline
        self.handshaking = handshaking
        self.peer = peer
        self.buf = bytearray()
        self.header_end = -1  # index after the blank line, once seen
        self.need = -1  # total bytes of the request, once the headers are in
        self.answered = False  # answered early: what still arrives is dropped (see the module docstring)
        self.dropped = 0
        self.done = False  # left the read phase (handed to a thread, or closed)
        self.budgeted = 0
        self.large = False  # counted in the peer's large bytes
        self.writing = False
        self.refused = False


class AdmissionWorker(ThreadWorker):
    """``gthread`` with the request read by the event loop (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings = getattr(self.app, "settings", None)
        self.request_timeout = float(getattr(settings, "request_timeout", REQUEST_TIMEOUT))
        self.read_budget = int(getattr(settings, "read_budget", READ_BUDGET))
        self.large_budget = self.read_budget - self.read_budget // SMALL_SHARE
        self.client_names: tuple[str, ...] | None = (
            tuple(getattr(settings, "client_names", ())) if getattr(settings, "client_ca", None) else None
        )
        self.reading: deque[_Reading] = deque()  # ordered by deadline: every entry gets now + timeout
        self.lingering: deque[_Reading] = deque()  # answered early, ordered likewise (now + LINGER)
        self.buffered = 0
        self.peers: dict[str, _Peer] = {}
        self._said_full = 0.0  # when a refused connection was last logged (at most once a second)

    # --- entering the read phase ----------------------------------------------------------------

    def accept(self, listener: Any) -> bool:
        """Take one connection from the listener's queue (False: it was empty)."""
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return False
        peer = _address(addr)
        held = self.peers.get(peer)
        if held is not None and held.conns >= PEER_CONNECTIONS:
            # closed before the handshake: a client holding this many unfinished connections gets
            # no more from this worker until some finish (the kernel spreads its others elsewhere)
            with contextlib.suppress(OSError):
                client.close()
            now = time.monotonic()
            if now - self._said_full >= 1.0:
                self._said_full = now
                self.log.warning(
                    "connection from ip=%s closed at accept: it has %d unfinished connections on this worker",
                    peer,
                    held.conns,
                )
            return True
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
                return True
            handshaking = True
        self._start(conn, handshaking, b"")
        return True

    def set_accept_enabled(self, enabled: bool) -> None:
        """At a graceful stop, first accept what the kernel already queued on this worker's socket.

        Each worker has its own ``SO_REUSEPORT`` listener, so a connection in its backlog (the TCP
        handshake done, the request possibly sent) can go to no other worker; gunicorn stops
        accepting and closes the listener, which resets it. A worker stopped while starting, or
        while its loop was busy, had such connections waiting: they are taken now and answered in
        the grace period like the other requests in flight."""
        if not enabled and self._accepting and not self.alive:
            for listener in self.sockets:
                while self.nr_conns < self.worker_connections and self.accept(listener):
                    pass  # until the backlog is empty
        super().set_accept_enabled(enabled)

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        """A kept-alive connection starts its next request: read it here, not in a thread."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._start(conn, False, b"")

    def finish_request(self, conn: TConn, fs: Any) -> None:
        # bytes of the next request read along with this one (pipelining, a drained body) go
        # through the read phase too, instead of a thread reading the rest from the client
        if not fs.cancelled() and fs.exception() is None and fs.result() is True:
            left = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
            # stopping: gunicorn closes a connection whose answer finished after the stop began, but its
            # client may already have sent the next request on it (it read the answer before this loop
            # got here), and would get no answer: read that one too; it is answered "Connection: close"
            if left or (not self.alive and _waiting(conn.sock)):
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
        peer = _address(conn.client)
        state = _Reading(conn, time.monotonic() + self.request_timeout, handshaking, peer)
        held = self.peers.get(peer)
        if held is None:
            held = self.peers[peer] = _Peer()
        held.conns += 1
        self.reading.append(state)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, state))
        if buf:
            self._receive(state, buf)
        if not handshaking and not state.done:  # readable now: read at once, not on the next turn
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
                    state.refused = True  # its request is read and dropped, then answered 403
            while not state.done:
                try:
                    data = conn.sock.recv(_RECV)
                except (ssl.SSLWantReadError, BlockingIOError):
                    return self._want(state, False)
                except ssl.SSLWantWriteError:
                    return self._want(state, True)
                if not data:  # the client went away (or closed an idle keep-alive connection)
                    return self._drop(state)
                self._receive(state, data)
        except (ssl.SSLError, OSError) as exc:  # handshake refused, reset: nothing to answer
            self.log.debug("closing connection in the read phase: %s", exc)
            if not state.done:
                self._drop(state)

    def _want(self, state: _Reading, write: bool) -> None:
        if write != state.writing:
            events = selectors.EVENT_READ | selectors.EVENT_WRITE if write else selectors.EVENT_READ
            self.poller.modify(state.conn.sock, events, partial(self._on_readable, state))
            state.writing = write

    def _receive(self, state: _Reading, data: bytes) -> None:
        """Bytes arrived on a connection in the read phase: drop them, or hold them under the budget."""
        if state.answered:  # answered early: drop what the client still sends, up to a point
            state.dropped += len(data)
            if state.dropped > DRAIN_LIMIT:
                self._drop(state)
            return
        if not state.refused:  # a refused client's head (HEAD_LIMIT at most) is read, never budgeted
            why = self._charge(state, len(data))
            if why is not None:
                return self._answer(state, 503, why)  # what it held is given back; the rest is dropped
        state.buf += data
        self._progress(state)

    def _progress(self, state: _Reading) -> None:
        """Look at what has arrived; hand the request on or answer it when it is decided."""
        if state.header_end < 0:
            end = state.buf.find(b"\r\n\r\n")
            if end < 0 and len(state.buf) <= HEAD_LIMIT:
                return
            if end < 0 or end + 4 > HEAD_LIMIT:
                return self._answer(state, 431, _HEAD_TOO_LONG)
            state.header_end = end + 4
            self._framing(state)
            if state.done or state.answered:
                return
        if len(state.buf) >= state.need:
            self._hand_off(state)

    def _framing(self, state: _Reading) -> None:
        """Decide from the head how much body to wait for, or answer now."""
        line, _, fields = bytes(state.buf[: state.header_end - 4]).partition(b"\r\n")
        method, _, target = line.partition(b" ")
        admission = method == b"POST" and target.rpartition(b" ")[0].partition(b"?")[0] in ADMISSION_PATHS
        length: bytes | None = None
        for field in fields.split(b"\r\n"):
            name, _, value = field.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                return self._answer(state, 411, "send the body with a Content-Length (no Transfer-Encoding)")
            if name == b"content-length":
                if length is not None and length != value.strip():
                    length = b"x"  # conflicting lengths: gunicorn's parser answers 400
                else:
                    length = value.strip()
        if length is None or not length.isdigit():  # no body, or one gunicorn's parser rejects
            if state.refused:
                return self._answer(state, 403, _REFUSED)
            state.need = state.header_end
            return
        size = int(length)
        if state.refused:
            return self._answer(state, 403, _REFUSED)
        if size > (MAX_BODY_BYTES if admission else SMALL_REQUEST):
            return self._answer(state, 413, _too_large() if admission else _no_body())
        state.need = state.header_end + size
        why = self._room(state, state.need - state.budgeted)
        if why is not None:  # cannot fit now: refused before the body is read
            self._answer(state, 503, why)

    # --- the budget -----------------------------------------------------------------------------

    def _room(self, state: _Reading, more: int) -> str | None:
        """Why ``more`` bytes of this connection cannot be held now (None: they can)."""
        held = state.budgeted + more
        total = self.buffered + more
        if total > self.read_budget:
            return "the server holds too many unfinished requests; retry"
        if held > SMALL_REQUEST:
            if total > self.large_budget:  # the rest is for small requests
                return "the server holds too many large unfinished requests; retry"
            peer = self.peers[state.peer]
            if peer.large + (more if state.large else held) > PEER_BUDGET:
                return "this client holds too many large unfinished requests on this server; finish those first"
        return None

    def _charge(self, state: _Reading, more: int) -> str | None:
        why = self._room(state, more)
        if why is not None:
            return why
        held = state.budgeted + more
        if held > SMALL_REQUEST:
            self.peers[state.peer].large += more if state.large else held
            state.large = True
        state.budgeted = held
        self.buffered += more
        return None

    def _release(self, state: _Reading) -> None:
        self.buffered -= state.budgeted
        if state.large:
            self.peers[state.peer].large -= state.budgeted
            state.large = False
        state.budgeted = 0

    # --- leaving the read phase -----------------------------------------------------------------

    def _leave(self, state: _Reading) -> None:
        if state.done:
            return
        state.done = True
        self._release(state)
        peer = self.peers.get(state.peer)
        if peer is not None:
            peer.conns -= 1
            if peer.conns <= 0 and peer.large <= 0:
                del self.peers[state.peer]
        with contextlib.suppress(ValueError):
            (self.lingering if state.answered else self.reading).remove(state)
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

    def _answer(self, state: _Reading, status: int, message: str, linger: bool = True) -> None:
        """Answer from the loop (best effort, never blocking). With ``linger`` the connection then
        stays until the client closes it (``LINGER`` seconds at most), its bytes dropped, so that a
        client still sending reads the answer rather than a reset; else it is closed."""
        self._release(state)
        state.buf = bytearray()
        with contextlib.suppress(OSError, ValueError):
            state.conn.sock.send(json_error(status, _REASONS[status], message))
        self.log.warning("Invalid request from ip=%s: %s %s", _ip(state.conn), status, message)
        if linger:
            self.reading.remove(state)
            state.answered = True
            state.deadline = time.monotonic() + LINGER
            self.lingering.append(state)
        else:
            self._drop(state)

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
        while self.lingering and self.lingering[0].deadline <= now:
            self._drop(self.lingering[0])
        while self.reading and self.reading[0].deadline <= now:
            state = self.reading[0]
            if state.handshaking or not (state.buf or state.header_end >= 0):
                self._drop(state)  # nothing of a request yet: nothing to answer
            else:
                self._answer(state, 408, f"request not received within {self.request_timeout:g} seconds", linger=False)
        super().murder_pending()


_REFUSED = "client certificate not accepted by this webhook"
_HEAD_TOO_LONG = f"request line and headers longer than {HEAD_LIMIT} bytes (an apiserver sends under 1 KiB)"


def _waiting(sock: Any) -> bool:
    """Bytes from the client are waiting on ``sock`` (decrypted, or still in the kernel's buffer). ``poll``,
    not ``select``: a worker holding a thousand connections has descriptors past ``select``'s 1024."""
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False


def _too_large() -> str:
    return f"request body larger than {MAX_BODY_BYTES} bytes (the apiserver's own limit)"


def _no_body() -> str:
    return f"request body larger than {SMALL_REQUEST} bytes: only POST /mutate and /validate carry one that large"


def _address(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else "?"


def _ip(conn: TConn) -> str:
    return _address(conn.client)
