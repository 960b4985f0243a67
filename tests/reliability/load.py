"""Concurrent apiserver-like load for the reliability tests, and the outcome of every request.

Each client thread owns one kept-alive TLS connection (``ApiserverClient``), learns which worker
serves it (the worker process that holds the server end of its socket, found in /proc; a kept-alive
connection stays on its worker),
then posts reviews in a loop. A failed request is recorded with the worker its connection was on,
the connection is dropped and a new one is opened, as the apiserver's HTTP client does.
"""

from __future__ import annotations

import http.client
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.server import objects
from tests.server.support import ApiserverClient, ServerProcess, check_response, review

TRANSPORT_ERRORS = (OSError, ssl.SSLError, http.client.HTTPException, orjson.JSONDecodeError)


def worker_pids(server: ServerProcess) -> list[int]:
    """The gunicorn master's children, from /proc (the master is the process the test started)."""
    assert server.proc is not None
    pid = server.proc.pid
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []
    return sorted(out)


def serving_pid(server: ServerProcess, client: ApiserverClient) -> int | None:
    """The worker that holds the server end of ``client``'s connection (which must be open, after a
    request): the socket's inode from /proc/net/tcp, looked up among the workers' descriptors.
    ``/readyz`` does not say which process answered (it says ready or not, and no more)."""
    sock = client.conn.sock
    if sock is None:
        return None
    port = sock.getsockname()[1]
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()  # sl local_address rem_address st ... uid timeout inode
            if cols[1].endswith(f":{server.port:04X}") and cols[2].endswith(f":{port:04X}"):
                inodes.add(cols[9])
    for pid in worker_pids(server):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return pid
    return None


def wait_for_workers(server: ServerProcess, count: int, timeout: float = 30.0) -> list[int]:
    """``/readyz`` answers as soon as one worker is up; wait until all ``count`` are."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = worker_pids(server)
        if len(pids) == count:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"expected {count} workers, have {worker_pids(server)}")


def answering_pids(server: ServerProcess, attempts: int, *, until: int | None = None) -> set[int]:
    """The workers that answer ``/readyz`` (200 every time) over ``attempts`` fresh connections;
    stops early once worker ``until`` has answered."""
    seen: set[int] = set()
    for _ in range(attempts):
        client = server.client()
        status, _ = client.get_json("/readyz")
        pid = serving_pid(server, client)
        client.close()
        assert status == 200 and pid is not None
        seen.add(pid)
        if until is not None and until in seen:
            break
    return seen


@dataclass
class Outcome:
    started: float
    finished: float
    pid: int | None  # the worker the connection was on (None: not known yet)
    ok: bool
    error: str = ""


@dataclass
class Load:
    """``clients`` threads posting ``make()`` reviews to ``endpoint`` until stopped."""

    server: ServerProcess
    clients: int = 6
    endpoint: str = "mutate"
    make: Callable[[], dict[str, Any]] = field(
        default=lambda: review(objects.inference_pod(), namespace=objects.SERVING_NS)
    )
    outcomes: list[Outcome] = field(default_factory=list)
    setup_failures: list[str] = field(default_factory=list)
    current: dict[int, int | None] = field(default_factory=dict)  # thread index -> worker pid now

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _connect(self, index: int) -> tuple[ApiserverClient | None, int | None]:
        client = self.server.client(timeout=10.0)
        try:
            status, _ = client.get_json("/readyz")
            if status != 200:
                raise http.client.HTTPException(f"/readyz answered {status}")
            return client, serving_pid(self.server, client)
        except TRANSPORT_ERRORS as exc:
            client.close()
            with self._lock:
                self.setup_failures.append(f"{type(exc).__name__}: {exc}")
            return None, None

    def _run(self, index: int) -> None:
        client: ApiserverClient | None = None
        pid: int | None = None
        while not self._stop.is_set():
            if client is None:
                client, pid = self._connect(index)
                self.current[index] = pid
                if client is None:
                    time.sleep(0.05)
                    continue
            sent = self.make()
            started = time.monotonic()
            try:
                status, doc = client.post_review(self.endpoint, sent)
                if status != 200:
                    raise AssertionError(f"HTTP {status}: {doc}")
                check_response(doc, sent, self.endpoint)
                outcome = Outcome(started, time.monotonic(), pid, True)
            except (*TRANSPORT_ERRORS, AssertionError, KeyError) as exc:
                outcome = Outcome(started, time.monotonic(), pid, False, f"{type(exc).__name__}: {exc}")
                client.close()
                client = None
            with self._lock:
                self.outcomes.append(outcome)
        if client is not None:
            client.close()

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def successes_after(self, moment: float) -> int:
        return sum(1 for o in self.outcomes if o.ok and o.started > moment)


__all__ = ["TRANSPORT_ERRORS", "Load", "Outcome", "serving_pid", "wait_for_workers", "worker_pids"]
