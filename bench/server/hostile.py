"""Hostile traffic against a real ``gpu-admission serve``, measured: what each attack costs the server.

Every attack comes from loopback, against a server on loopback, with bounded counts; each ends with
fresh reviews whose answers are counted. For docs/reliability.md (before/after a change: run it
once with ``--code-root`` pointing at the older code, e.g. a ``git archive`` of it).

    python bench/server/hostile.py [--code-root DIR] [--attack announce|bodies|heads|conns|all]

* ``announce``: 2 workers x 8 threads (the Deployment's shape); 40 connections send the head of a
  3 MiB review and nothing more; then 8 fresh reviews.
* ``bodies``: 1 worker; 20 connections send all but the last KiB of a 3 MiB review; then 8 reviews.
* ``heads``: 1 worker; 100 connections each send up to 780 KiB of header lines, never the blank
  line; the worker's resident memory before and after, and what each connection was answered.
* ``conns``: 1 worker; 200 TCP connections that send nothing; how many the server closed at once.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.server import objects
from tests.server.support import SERVICE_DNS, ServerProcess, client_context, review, serve_args

MAX_BODY = 3 * 1024 * 1024
ANNOUNCE = (
    b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % MAX_BODY
)


def _server(tmp: Path, certs: Any, code_root: str | None, workers: int, threads: int) -> ServerProcess:
    env = {"PYTHONPATH": code_root} if code_root else None
    args = serve_args(certs, "--workers", str(workers), "--threads", str(threads), "--namespaces", "none")
    return ServerProcess(tmp, [*args, "--request-timeout", "30"], ca_files=[certs.ca_cert], env=env)


def _tls(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname=SERVICE_DNS)


def _probes(server: ServerProcess, n: int) -> dict[int, int]:
    """``n`` fresh reviews, each on a new connection: status -> count."""
    out: dict[int, int] = {}
    for _ in range(n):
        client = server.client(timeout=30)
        try:
            sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
            status, _, _ = client.request("POST", "/mutate?timeout=10s", orjson.dumps(sent))
        except (OSError, ssl.SSLError):
            status = 0
        finally:
            client.close()
        out[status] = out.get(status, 0) + 1
    return out


def _unread_total(port: int) -> int:
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    total += int(fields[4].split(":")[1], 16)
    return total


def _settle(port: int) -> None:
    """Until the server has read what it was sent (bounded)."""
    deadline = time.monotonic() + 60
    while _unread_total(port) and time.monotonic() < deadline:
        time.sleep(0.05)


def _answer(sock: socket.socket, timeout: float) -> str:
    try:
        sock.settimeout(timeout)
        data = sock.recv(65536)
    except (TimeoutError, ssl.SSLWantReadError, BlockingIOError):
        return "open"
    except (OSError, ssl.SSLError):
        return "reset"
    return data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else ("closed" if not data else "?")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _tally(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def announce(server: ServerProcess, ctx: ssl.SSLContext) -> str:
    socks = [_tls(server.port, ctx) for _ in range(40)]
    for s in socks:
        s.sendall(ANNOUNCE)
    _settle(server.port)
    probes = _probes(server, 8)
    for s in socks:
        s.close()
    return f"40 announcements of 3 MiB; 8 fresh reviews answered {probes}"


def bodies(server: ServerProcess, ctx: ssl.SSLContext) -> str:
    part = b"[" + b"1," * ((MAX_BODY - 1024) // 2)
    socks = [_tls(server.port, ctx) for _ in range(20)]
    for s in socks:
        with contextlib.suppress(OSError, ssl.SSLError):
            s.sendall(ANNOUNCE + part)
    _settle(server.port)
    probes = _probes(server, 8)
    answers = _tally([_answer(s, 2.0) for s in socks])
    for s in socks:
        s.close()
    return f"20 bodies of 3 MiB - 1 KiB sent: attackers {answers}; 8 fresh reviews answered {probes}"


def heads(server: ServerProcess, ctx: ssl.SSLContext, pid: int) -> str:
    before = _rss_kib(pid)
    line = b"X-Pad-%02d: " + b"a" * 7800 + b"\r\n"
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(line % i for i in range(98))
    socks = []
    for _ in range(100):
        try:
            s = _tls(server.port, ctx)
        except (OSError, ssl.SSLError):
            continue
        socks.append(s)
        with contextlib.suppress(OSError, ssl.SSLError):
            s.sendall(head)
    _settle(server.port)
    grown = (_rss_kib(pid) - before) / 1024
    answers = _tally([_answer(s, 2.0) for s in socks])
    time.sleep(3.0)  # connections answered early are kept 2 s so their clients read the answer
    probes = _probes(server, 8)
    for s in socks:
        s.close()
    return (
        f"100 heads of {len(head) // 1024} KiB, never finished: worker RSS +{grown:.0f} MiB; "
        f"connections {answers} (of {len(socks)} handshaken); 8 fresh reviews 3 s later answered {probes}"
    )


def conns(server: ServerProcess) -> str:
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(200)]
    time.sleep(2.0)  # a measurement, not a test: give the loop time to accept them all
    answers = _tally([_answer(s, 0.0) for s in socks])
    for s in socks[:100]:
        s.close()
    time.sleep(1.0)
    probes = _probes(server, 8)
    for s in socks:
        s.close()
    return f"200 silent TCP connections: {answers}; 8 fresh reviews after 100 of them closed: {probes}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code-root", help="a directory holding the webhook package to serve (default: this one)")
    parser.add_argument("--attack", default="all", choices=["announce", "bodies", "heads", "conns", "all"])
    args = parser.parse_args()
    from tests.reliability.load import worker_pids
    from webhook.certs.generate import generate

    tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
    certs = generate(tmp / "certs", "gpu-admission", "gpu-admission", dns=("localhost",), ips=("127.0.0.1",))
    ctx = client_context([certs.ca_cert])
    for name in ("announce", "bodies", "heads", "conns") if args.attack == "all" else (args.attack,):
        workers, threads = (2, 8) if name == "announce" else (1, 4)
        server = _server(tmp / name, certs, args.code_root, workers, threads)
        (tmp / name).mkdir()
        server.start()
        try:
            if name == "announce":
                result = announce(server, ctx)
            elif name == "bodies":
                result = bodies(server, ctx)
            elif name == "heads":
                result = heads(server, ctx, worker_pids(server)[0])
            else:
                result = conns(server)
        finally:
            server.stop()
        print(f"{name}: {result}", flush=True)


if __name__ == "__main__":
    main()
