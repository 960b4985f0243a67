"""Start a gunicorn-based server as a child process, wait for it, and read its workers from /proc."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.server.support import SERVICE_DNS, client_context


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the gunicorn master's workers), from /proc."""
    out: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
    return sorted(out)


def memory(pid: int) -> dict[str, int]:
    """RSS (VmRSS) and PSS of one process in KiB. PSS splits pages shared copy-on-write with the
    master (``preload_app``) between the processes sharing them, so summing PSS does not double count."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss_kib"] = int(line.split()[1])
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Pss:", "Private_Clean:", "Private_Dirty:")):
                key = line.split(":")[0].lower()
                out[f"{key}_kib"] = int(line.split()[1])
    if "private_clean_kib" in out:
        out["uss_kib"] = out.pop("private_clean_kib") + out.pop("private_dirty_kib")
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (``/proc/PID/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """One server under test: ``cmd`` runs a gunicorn master in the foreground on ``port``."""

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        port: int,
        workers: int,
        ca_file: Path,
        log: Path,
        code_root: Path | None = None,
    ):
        self.name, self.cmd, self.port, self.workers = name, list(cmd), port, workers
        self.ca_file, self.log_path, self.code_root = ca_file, log, code_root
        self.proc: subprocess.Popen[bytes] | None = None

    def context(self) -> ssl.SSLContext:
        return client_context([self.ca_file])

    def start(self, timeout: float = 60.0) -> Server:
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "PROMETHEUS_MULTIPROC_DIR" and not k.startswith("GPU_ADMISSION_")
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        if self.code_root is not None:  # benchmark another checkout of the webhook package (before/after)
            env["PYTHONPATH"] = str(self.code_root)
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        # stdout is a pipe, drained by ``cat`` into the log file: what a container runtime does with a
        # pod's stdout (a FIFO read by the shim), and the cost the server really pays per log line
        self.drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=self.log)
        self.proc = subprocess.Popen(
            self.cmd, stdout=self.drain.stdin, stderr=subprocess.STDOUT, env=env, cwd=self.code_root
        )
        assert self.drain.stdin is not None
        self.drain.stdin.close()  # the server holds the write end now
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log_path.read_text()}")
            if len(children(self.proc.pid)) == self.workers and self._healthy():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {timeout}s: {self.log_path.read_text()}")

    def _healthy(self) -> bool:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context(), timeout=2)
        conn._context.check_hostname = False  # type: ignore[attr-defined]  # dialled by IP; the cert has it
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        return children(self.proc.pid)

    def workers_cpu(self) -> float:
        """CPU seconds used by all workers so far: divided by requests, the cost of one request."""
        return sum(cpu_seconds(p) for p in self.worker_pids())

    def memory(self) -> dict[str, Any]:
        assert self.proc is not None
        return {"master": memory(self.proc.pid), "workers": [memory(p) for p in self.worker_pids()]}

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its handle
            rc = self.proc.wait()
        self.drain.wait(10)
        self.log.close()
        return rc


__all__ = ["SERVICE_DNS", "Server", "children", "cpu_seconds", "memory"]
