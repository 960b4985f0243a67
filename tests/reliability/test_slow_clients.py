"""Slow and half-open clients cannot pin the workers (slowloris).

A client that opens a connection and sends its request a header line at a time (or never finishes
its TLS handshake, or trickles its body) must not hold a worker thread: with four times as many such
connections as the server has threads, a fresh review on a fresh TLS connection is answered at once,
while they are all still open, and each of them is cut off once ``--request-timeout`` has passed.

Everything is bounded: a fixed number of loopback connections, each of which gives up by itself a few
seconds after the server should have cut it. The assertions are about order (the fresh review is
answered before any slow connection is cut, and long before they would have stopped on their own),
not about how much gets done in some time; the measured latency is printed for docs/reliability.md.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from dataclasses import dataclass

import orjson
import pytest

from tests.server import objects
from tests.server.support import SERVICE_DNS, ServerProcess, client_context, review, running, serve_args

pytestmark = pytest.mark.reliability

WORKERS, THREADS = 2, 4
SLOW = 4 * WORKERS * THREADS
REQUEST_TIMEOUT = 3.0
GIVE_UP = REQUEST_TIMEOUT + 8.0  # a slow client stops by itself this long after it started


@dataclass
class Slow:
    kind: str
    started: float = 0.0
    ready: float = 0.0
    cut: float | None = None  # when the server closed it (None: never, it gave up by itself)
    answer: bytes = b""
    error: str = ""


def _trickle(port: int, tls: ssl.SSLContext, slow: Slow, ready: threading.Semaphore, stop: threading.Event) -> None:
    """One slow client: TCP only, a stalled handshake-free TLS session, or a request sent a line at a time."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=GIVE_UP)
    slow.started = time.monotonic()
    conn: socket.socket = raw
    try:
        if slow.kind == "tcp":  # connects, never says a word (not even a ClientHello)
            lines: list[bytes] = []
            raw.settimeout(0.25)
        else:
            conn = tls.wrap_socket(raw, server_hostname=SERVICE_DNS)
            conn.settimeout(0.25)
            body = b"{" * 1000
            lines = [b"POST /validate?timeout=10s HTTP/1.1\r\n", b"Host: x\r\n"]
            if slow.kind == "body":  # the headers at once, then the body a few bytes at a time
                conn.sendall(b"".join(lines) + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
                lines = [body[i : i + 10] for i in range(0, len(body), 10)]
            else:  # a header line every quarter second, never the blank line
                conn.sendall(b"".join(lines))
                lines = [f"X-Slow-{i}: {'a' * 20}\r\n".encode() for i in range(1000)]
        slow.ready = time.monotonic()
        ready.release()
        for line in lines or iter(int, 1):  # "tcp": wait until cut or out of time
            if stop.is_set() or time.monotonic() - slow.started > GIVE_UP:
                return
            if line:
                conn.sendall(line)
            try:
                data = conn.recv(4096)
            except TimeoutError:
                continue
            slow.answer, slow.cut = data, time.monotonic()  # an answer (408) or EOF: the server cut it
            return
    except (OSError, ssl.SSLError) as exc:  # reset or closed while sending: cut
        slow.cut, slow.error = time.monotonic(), f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        if not slow.ready:
            ready.release()  # a client that failed early must not keep the test waiting


def test_four_times_as_many_slow_clients_as_threads_do_not_delay_a_fresh_review(tmp_path, server_certs):
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--workers",
            str(WORKERS),
            "--threads",
            str(THREADS),
            "--request-timeout",
            str(REQUEST_TIMEOUT),
            "--namespace-labels",
            "none",
        ),
        ca_files=[server_certs.ca_cert],
    )
    kinds = ("headers", "body", "tcp", "headers")
    slows = [Slow(kinds[i % len(kinds)]) for i in range(SLOW)]
    with running(server):
        ready = threading.Semaphore(0)
        stop = threading.Event()
        tls = client_context([server_certs.ca_cert])  # one context: building one loads the system CAs
        threads = [
            threading.Thread(target=_trickle, args=(server.port, tls, s, ready, stop), daemon=True) for s in slows
        ]
        for t in threads:
            t.start()
        try:
            for _ in slows:  # every slow client is connected (and past its handshake, where it does one)
                assert ready.acquire(timeout=30)
            early = [(s.kind, s.error) for s in slows if s.error or not s.ready]
            assert not early, f"a slow client failed before it was slow: {early}"
            sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
            client = server.client(timeout=GIVE_UP)  # connects (TLS handshake) on the first request
            started = time.monotonic()
            status, doc = client.post_review("validate", sent)
            answered = time.monotonic()
            client.close()
        finally:
            for t in threads:
                t.join(GIVE_UP + 5)
            stop.set()
        latency = answered - started
        print(f"fresh review with {SLOW} slow connections open ({WORKERS}x{THREADS} threads): {latency * 1000:.1f} ms")
        assert status == 200 and doc["response"]["uid"] == sent["request"]["uid"]
        cut = [s.cut for s in slows if s.cut is not None]
        assert len(cut) == SLOW, f"slow connections never cut: {[s.kind for s in slows if s.cut is None]}"
        first_cut = min(cut)
        assert answered < first_cut, (
            f"the fresh review waited for a slow connection to be cut ({latency:.2f}s; first cut "
            f"{first_cut - started:.2f}s after it was sent)"
        )
        for s in slows:  # cut by the server after the bound, not when the client gave up
            assert s.cut - s.started >= REQUEST_TIMEOUT - 0.1, (s.kind, s.cut - s.started)
            assert s.cut - s.started < GIVE_UP - 1, (s.kind, s.cut - s.started, s.error)
            if s.kind != "tcp" and s.answer:  # past the handshake: a JSON 408, not a silent reset
                head, _, body = s.answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 408 "), head
                assert orjson.loads(body)["code"] == 408
