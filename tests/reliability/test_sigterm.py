"""SIGTERM under load: requests in flight complete, and every other request fails *cleanly*: the
connection is refused or closed before a single byte of an answer, never a half response or a 5xx.

Six clients post reviews back to back on kept-alive connections (reconnecting after a failure, as
the apiserver does). The master gets SIGTERM; clients carry on until it has exited. Every request
is classified: ``ok`` (200, contract-valid), ``refused`` (connect refused), ``closed`` (connection
closed or reset before the status line), or a failure (partial answer, non-200, bad contract).
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

import orjson
import pytest

from tests.reliability.load import wait_for_workers
from tests.server import objects
from tests.server.support import ApiserverClient, ServerProcess, check_response, review, serve_args

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
            "--namespaces",
            "none",
        ),
        ca_files=[server_certs.ca_cert],
    ).start()
    wait_for_workers(server, 2)
    assert server.proc is not None
    stop = threading.Event()
    lock = threading.Lock()
    results: list[tuple[float, float, str, str]] = []  # (started, finished, outcome, detail)

    def client_loop() -> None:
        client: ApiserverClient | None = None
        while not stop.is_set():
            sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
            started = time.monotonic()
            try:
                if client is None:
                    client = server.client(timeout=10.0)
                status, _, data = client.request("POST", "/mutate?timeout=10s", orjson.dumps(sent))
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
                results.append((started, time.monotonic(), outcome, detail))
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
            return sum(r[2] == "ok" for r in results)

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: answered() >= 50, "50 answered reviews before SIGTERM")
        term_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        rc = server.proc.wait(30)
        exited_at = time.monotonic()

        def tried_after_exit() -> bool:  # clients keep trying against the closed port
            with lock:
                return sum(r[0] > exited_at + 0.1 for r in results) >= CLIENTS

        wait_until(tried_after_exit, "every client to try the closed port")
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        server.stop()

    counts = Counter(outcome for _, _, outcome, _ in results)
    in_flight = [r for r in results if r[0] < term_at <= r[1]]
    after_exit = [r for r in results if r[0] > exited_at + 0.1]
    print(
        f"\nSIGTERM under load: {dict(counts)}; in flight at SIGTERM: {len(in_flight)} "
        f"({sum(r[2] == 'ok' for r in in_flight)} completed); master exited after {exited_at - term_at:.2f} s"
    )

    assert rc == 0
    bad = [r for r in results if r[2] not in ("ok", "refused", "closed")]
    assert not bad, f"never a half response, a 5xx or a broken contract: {bad[:5]}"
    assert sum(r[2] == "ok" for r in results if r[1] < term_at) >= 50
    assert in_flight, "the load was running at SIGTERM"
    assert all(r[2] == "ok" for r in in_flight), f"every request in flight at SIGTERM completes: {in_flight}"
    assert after_exit and all(r[2] == "refused" for r in after_exit), "after exit, connections are refused"
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
            server_certs, "--workers", "1", "--threads", "4", "--graceful-timeout", "10", "--namespaces", "none"
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
