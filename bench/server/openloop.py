"""Open-loop, fixed-rate load over kept-alive TLS connections, latency measured from the intended send.

Why not plain wrk: wrk is closed-loop. Each connection sends its next request only after the previous
answer, so when the server stalls the generator politely stops sending, the stall shows up as *one*
slow request, and the requests that would have queued behind it are never measured (coordinated
omission). wrk's ``delay()`` hook only adds think time between a response and the next request; it
does not make the schedule independent of the server. wrk2 fixes this but is not packaged.

So: ``connections`` threads, each owning one keep-alive TLS connection (HTTP/1.1, like the
apiserver). Request ``i`` is due at ``t0 + i / rate`` and belongs to connection ``i mod
connections`` (wrk2's model). A thread sleeps until its next due time and sends; if it is already
late because its previous request is still out, it sends at once, and the lateness is *counted*:
latency = completion - intended send time. ``service`` latency (completion - actual send) is
reported next to it; the two differ only when requests queued.

Caveats: a request can wait only behind the one before it on its own connection (the apiserver also
spreads load over several connections); the client shares the 2 CPUs with the server, so its own
scheduling delay (tens of microseconds, measured as ``client_lag``) is included in the latencies of
both servers alike.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class OpenLoopResult:
    rate: float
    duration: float
    connections: int
    sent: int = 0
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    latency: list[float] = field(default_factory=list)  # completion - intended send (seconds)
    service: list[float] = field(default_factory=list)  # completion - actual send
    lag: list[float] = field(default_factory=list)  # actual send - intended send
    wall: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "rate_target": self.rate,
            "rate_achieved": round(self.sent / self.wall, 1) if self.wall else 0.0,
            "connections": self.connections,
            "sent": self.sent,
            "ok": self.ok,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "latency_ms": percentiles(self.latency),
            "service_ms": percentiles(self.service),
            "client_lag_ms": percentiles(self.lag),
        }


def percentiles(values: Sequence[float], points: Sequence[float] = (50, 90, 99, 99.9)) -> dict[str, float]:
    """Nearest-rank percentiles in milliseconds (plus max)."""
    if not values:
        return {}
    ordered = sorted(values)
    out = {}
    for p in points:
        rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
        out[f"p{p:g}"] = round(ordered[rank - 1] * 1000, 3)
    out["max"] = round(ordered[-1] * 1000, 3)
    return out


def _http_request(path: str, body: bytes, host: str) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, */*\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Conn:
    def __init__(self, port: int, context: ssl.SSLContext, server_name: str):
        self.port, self.context, self.server_name = port, context, server_name
        self.sock: ssl.SSLSocket | None = None
        self.buf = b""

    def open(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self.context.wrap_socket(raw, server_hostname=self.server_name)
        self.buf = b""

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def exchange(self, request: bytes) -> int:
        """Send one request, read one full response; returns the status. Reconnects when closed."""
        if self.sock is None:
            self.open()
        assert self.sock is not None
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the response headers")
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length, close = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-body")
            rest += chunk
        self.buf = rest[length:]
        if close:
            self.close()
        return status


def run_open_loop(
    port: int,
    context: ssl.SSLContext,
    server_name: str,
    requests: Sequence[tuple[str, bytes]],
    *,
    rate: float = 500.0,
    duration: float = 20.0,
    connections: int = 8,
) -> OpenLoopResult:
    """Send ``rate * duration`` requests on a fixed schedule; ``requests`` are (path, body), rotated."""
    sys.setswitchinterval(0.0005)  # short GIL hand-offs: a waking sender must not wait 5 ms for a parser
    wire = [_http_request(path, body, f"{server_name}:443") for path, body in requests]
    total = int(rate * duration)
    period = 1.0 / rate
    result = OpenLoopResult(rate=rate, duration=duration, connections=connections)
    conns = [_Conn(port, context, server_name) for _ in range(connections)]
    for c in conns:
        c.open()  # handshakes before the clock starts: the schedule measures requests, not TLS setup
    lock = threading.Lock()
    start_at = time.perf_counter() + 0.2

    def worker(k: int) -> None:
        conn = conns[k]
        latency, service, lag, statuses, errors = [], [], [], {}, []
        for i in range(k, total, connections):
            intended = start_at + i * period
            now = time.perf_counter()
            if intended > now:
                time.sleep(intended - now)
            sent = time.perf_counter()
            try:
                status = conn.exchange(wire[i % len(wire)])
            except (OSError, ValueError, IndexError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                continue
            done = time.perf_counter()
            statuses[status] = statuses.get(status, 0) + 1
            latency.append(done - intended)
            service.append(done - sent)
            lag.append(sent - intended)
        with lock:
            result.latency += latency
            result.service += service
            result.lag += lag
            result.errors += errors
            for s, n in statuses.items():
                result.statuses[s] = result.statuses.get(s, 0) + n

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration * 4 + 30)
    result.wall = time.perf_counter() - start_at
    for c in conns:
        c.close()
    result.sent = len(result.latency) + len(result.errors)
    result.ok = result.statuses.get(200, 0)
    return result
