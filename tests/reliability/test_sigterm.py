"""SIGTERM under load: requests in flight complete, and every other request fails *cleanly*: the
connection is refused or closed before a single byte of an answer, never a half response or a 5xx.

Six clients post reviews back to back on kept-alive connections (reconnecting after a failure, as
the apiserver does). The master gets SIGTERM; clients carry on until it has exited. Every request
is classified: ``ok`` (200, contract-valid), ``refused`` (connect refused), ``closed`` (connection
closed or reset before the status line), or a failure (partial answer, non-200, bad contract).

"In flight at SIGTERM" is what the server had accepted: a request written, before the signal, on a
connection whose TLS handshake the server had completed (only a worker that accepted the connection
can finish its handshake), and answered or failed after it. A client that began building a request
before the signal but connected after the listener closed was never in flight: it is refused, and
that is clean. One request is in flight by construction: its head and half its body are sent before
SIGTERM, the rest once the master has handled the signal (and is stopping its workers); it must be
answered.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass

import orjson
import pytest

from tests.reliability.load import wait_for_workers
from tests.server import objects
from tests.server.support import (
    SERVICE_DNS,
    ApiserverClient,
    ServerProcess,
    check_response,
    client_context,
    review,
    serve_args,
)

pytestmark = [pytest.mark.reliability, pytest.mark.server, pytest.mark.slow]

CLIENTS = 6


def _classify(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, http.client.RemoteDisconnected):  # closed before the status line
        return "closed"
    if isinstance(exc, http.client.HTTPException | orjson.JSONDecodeError):
        return "half"  # IncompleteRead, a broken status line, a truncated body
    if isinstance(exc, OSError | ssl.SSLError):  # reset, broken pipe, TLS EOF: nothing was answered
        return "closed"
    return f"unexpected {type(exc).__name__}"


@dataclass
class Attempt:
    started: float  # the client began (building the review, connecting if it had no connection)
    sent: float | None  # the request was written on a connection the server had accepted (handshake done)
    finished: float
    outcome: str
    detail: str
    fresh: bool  # it needed a new connection


def _held_request(port: int, ca: object) -> tuple[ssl.SSLSocket, bytes, dict]:
    """A review whose head and first half of body are sent now; the caller sends ``rest`` later."""
    sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
    body = orjson.dumps(sent)
    head = (
        b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    tls = client_context([ca]).wrap_socket(raw, server_hostname=SERVICE_DNS)  # type: ignore[list-item]
    half = len(body) // 2
    tls.sendall(head + body[:half])
    return tls, body[half:], sent


def _read_answer(tls: ssl.SSLSocket) -> tuple[int, bytes]:
    resp = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
    resp.begin()
    return resp.status, resp.read()


def test_sigterm_under_load_finishes_in_flight_and_refuses_cleanly(tmp_path, server_certs):
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--workers",
            "2",
            "--threads",
            "4",
            "--graceful-timeout",
            "10",
            "--request-timeout",
            "30",
            "--namespace-labels",
            "none",
        ),
        ca_files=[server_certs.ca_cert],
    ).start()
    wait_for_workers(server, 2)
    assert server.proc is not None
    stop = threading.Event()
    lock = threading.Lock()
    results: list[Attempt] = []

    def client_loop() -> None:
        client: ApiserverClient | None = None
        while not stop.is_set():
            sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
            started = time.monotonic()
            written: float | None = None
            fresh = client is None
            try:
                if client is None:
                    client = server.client(timeout=10.0)
                if client.conn.sock is None:
                    fresh = True
                    client.conn.connect()  # TCP and the TLS handshake: the server has accepted it
                # written: when the whole request had left (the socket took it), not when the thread
                # began sending: on a loaded machine a thread can wait for the GIL between the two, and a
                # request that left after SIGTERM was not in flight then
                client.conn.request("POST", "/mutate?timeout=10s", body=orjson.dumps(sent),
                                    headers={"Accept": "application/json, */*", "Content-Type": "application/json"})
                written = time.monotonic()
                resp = client.conn.getresponse()
                status, data = resp.status, resp.read()
                if resp.will_close:
                    client.conn.close()
                if status != 200:
                    outcome, detail = "status", f"HTTP {status}"
                else:
                    check_response(orjson.loads(data), sent, "mutate")
                    outcome, detail = "ok", ""
            except AssertionError as exc:
                outcome, detail = "contract", str(exc)
            except Exception as exc:
                outcome, detail = _classify(exc), f"{type(exc).__name__}: {exc}"
                if client is not None:
                    client.close()
                client = None
                if outcome == "refused":
                    time.sleep(0.02)
            with lock:
                results.append(Attempt(started, written, time.monotonic(), outcome, detail, fresh))
        if client is not None:
            client.close()

    def wait_until(check, what: str, timeout: float = 120.0) -> None:
        """Load is driven by counts and events, never by how much fits in a sleep."""
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def answered() -> int:
        with lock:
            return sum(r.outcome == "ok" for r in results)

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(CLIENTS)]
    held: ssl.SSLSocket | None = None
    try:
        for t in threads:
            t.start()
        wait_until(lambda: answered() >= 50, "50 answered reviews before SIGTERM")
        held, rest, held_review = _held_request(server.port, server_certs.ca_cert)
        term_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "Handling signal: term" in server.output(), "the master to handle SIGTERM")
        held.sendall(rest)  # the rest of a request the server had accepted before SIGTERM
        held_status, held_body = _read_answer(held)
        held_at = time.monotonic()
        rc = server.proc.wait(60)
        exited_at = time.monotonic()

        def tried_after_exit() -> bool:  # clients keep trying against the closed port
            with lock:
                return sum(r.started > exited_at + 0.1 and r.fresh for r in results) >= CLIENTS

        wait_until(tried_after_exit, "every client to try the closed port")
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        if held is not None:
            held.close()
        server.stop()

    counts = Counter(r.outcome for r in results)
    in_flight = [r for r in results if r.sent is not None and r.sent < term_at <= r.finished]
    after_exit = [r for r in results if r.started > exited_at + 0.1]
    by_start = [r for r in results if r.started < term_at <= r.finished and r not in in_flight]
    print(
        f"\nSIGTERM under load: {dict(counts)}; in flight at SIGTERM: {len(in_flight)} + 1 held "
        f"({sum(r.outcome == 'ok' for r in in_flight)} + {int(held_status == 200)} completed, the held one "
        f"{held_at - term_at:.2f} s after SIGTERM); master exited after {exited_at - term_at:.2f} s; "
        f"begun before SIGTERM but never accepted: {[r.outcome for r in by_start]}"
    )

    assert rc == 0
    bad = [r for r in results if r.outcome not in ("ok", "refused", "closed")]
    assert not bad, f"never a half response, a 5xx or a broken contract: {bad[:5]}"
    assert sum(r.outcome == "ok" for r in results if r.finished < term_at) >= 50
    assert held_status == 200, held_body[:300]
    check_response(orjson.loads(held_body), held_review, "mutate")
    assert all(r.outcome == "ok" for r in in_flight), f"every request in flight at SIGTERM completes: {in_flight}"
    assert after_exit and all(r.outcome in ("refused", "closed") for r in after_exit)
    assert all(r.outcome == "refused" for r in after_exit if r.fresh), "after exit, connections are refused"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2)
    messages = [r.get("msg", "") for r in server.log_records()]
    assert "Handling signal: term" in messages and "Shutting down: Master" in messages


def _accept_queue(port: int) -> int:
    """Connections the kernel completed on the listener at ``port`` that no ``accept`` took yet (for a
    listening socket, /proc/net/tcp's ``rx_queue`` is its accept queue)."""
    queued = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN on our port
                    queued += int(fields[4].split(":")[1], 16)
    return queued


def test_connections_queued_on_a_stopping_worker_are_answered(tmp_path, server_certs):
    """Each worker listens on its own ``SO_REUSEPORT`` socket, so connections in its accept queue can go to
    no other worker. The worker is frozen (SIGSTOP: in life, a worker still starting or with a busy
    loop) while four reviews connect and send; it gets SIGTERM and resumes. Every one of them is
    answered in the grace period, none reset when the listener closes."""
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs, "--workers", "1", "--threads", "4", "--graceful-timeout", "10", "--namespace-labels", "none"
        ),
        ca_files=[server_certs.ca_cert],
    ).start()
    (pid,) = wait_for_workers(server, 1)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one_review() -> None:
        sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
        client = server.client(timeout=20.0)
        try:
            status, _, data = client.request("POST", "/mutate?timeout=10s", orjson.dumps(sent))
            check_response(orjson.loads(data), sent, "mutate")
            outcome = "ok" if status == 200 else f"HTTP {status}"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one_review, daemon=True) for _ in range(4)]
    try:
        os.kill(pid, signal.SIGSTOP)
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while _accept_queue(server.port) < len(threads):  # every connection waits in the kernel's queue
            assert time.monotonic() < deadline, f"accept queue holds {_accept_queue(server.port)}"
            time.sleep(0.02)
        os.kill(pid, signal.SIGTERM)
    finally:
        os.kill(pid, signal.SIGCONT)
        for t in threads:
            t.join(30)
        server.stop()
    assert outcomes == ["ok"] * len(threads), outcomes
