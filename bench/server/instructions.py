"""Instructions per review, ours against the floor: the server benchmark's ratio without the machine's noise.

``run.py`` measures throughput, which is what the bar is about, but on a shared VM its rounds swing by
±25 % from one minute to the next and a 3 % change in our cost per review drowns in that. This counts
instead: both servers run under ``valgrind --tool=callgrind`` (one worker, two threads), one keep-alive
client sends the AdmissionReview mix (``reviews.py``) in order, and the worker's executed instructions
are read from callgrind's totals at exit. Startup is cancelled by running each server twice, with one
and with ``1 + passes`` passes over the mix, and taking the difference. ``PYTHONHASHSEED`` is fixed so
that set and dict order, hence the work, is the same in every run: the figures repeat to within a few
hundred instructions.

What it does not see: cache misses, GIL hand-offs between request threads and the event loop, and
anything else that costs time without costing instructions. It says how much work a review is, and
whether a change added or removed some; ``run.py`` still says what that does to throughput.

Run: ``python bench/server/instructions.py [--passes 3] [--code-root DIR]`` (needs valgrind; about two
minutes per tree, most of it the servers starting under valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.server import reviews  # noqa: E402
from bench.server.procs import Server  # noqa: E402
from bench.server.run import start_servers  # noqa: E402
from tests.server.support import ApiserverClient  # noqa: E402

STARTUP_TIMEOUT = 600.0
"""Seconds a server may take to start under valgrind (imports run ~50 times slower)."""


def _under_callgrind(out_dir: Path) -> None:
    """Make every ``Server`` started from here on run under callgrind, writing one file per process."""
    start = Server.start

    def start_under_callgrind(self: Server, timeout: float = STARTUP_TIMEOUT) -> Server:
        self.cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.%p", *self.cmd]
        return start(self, max(timeout, STARTUP_TIMEOUT))

    Server.start = start_under_callgrind  # type: ignore[method-assign]


def _drive(server: Server, bodies: list[reviews.Body], passes: int) -> int:
    """Send the mix ``passes`` times on one connection; the worker's pid (its callgrind file's name)."""
    client = ApiserverClient(server.port, [server.ca_file], timeout=STARTUP_TIMEOUT)
    try:
        for _ in range(passes):
            for body in bodies:
                status, _, data = client.request("POST", body.path, body.data)
                if status != 200:
                    raise SystemExit(f"{server.name}: {body.file.name} answered {status}: {data[:300]!r}")
    finally:
        client.close()
    (pid,) = server.worker_pids()
    return pid


def _instructions(out_dir: Path, pid: int) -> int:
    text = (out_dir / f"callgrind.{pid}").read_text()
    found = re.search(r"^totals: (\d+)", text, re.M)
    if found is None:
        raise SystemExit(f"no totals in callgrind's file for pid {pid}")
    return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=3, help="passes over the mix counted (after one warm-up pass)")
    p.add_argument("--code-root", type=Path, default=None, help="measure another tree (as run.py --code-root)")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    os.environ["PYTHONHASHSEED"] = "0"  # inherited by both servers: the same work in every run
    code_root = args.code_root.resolve() if args.code_root else None
    tmp = Path(tempfile.mkdtemp(prefix="gpu-admission-instructions-"))
    bodies = reviews.build(tmp / "bodies", policy_dir=(code_root or ROOT) / "policies")
    _under_callgrind(tmp)
    settings = argparse.Namespace(workers=1, threads=2, serve_arg=[], code_root=code_root)
    totals: dict[int, tuple[int, int, int]] = {}
    try:
        for passes in (1, 1 + args.passes):
            servers = start_servers(tmp, settings)  # ours, the Flask floor, the bare floor
            try:
                pids = [_drive(server, bodies, passes) for server in servers]
            finally:
                for server in servers:
                    server.stop()
            totals[passes] = tuple(_instructions(tmp, pid) for pid in pids)  # type: ignore[assignment]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    reviewed = args.passes * len(bodies)
    high, low = totals[1 + args.passes], totals[1]
    ours_per, floor_per, bare_per = ((high[i] - low[i]) / reviewed for i in range(3))
    print(f"tree: {code_root or ROOT}; {reviewed} reviews counted ({args.passes} passes over {len(bodies)} bodies)")
    print(
        f"instructions per review: bare {bare_per:,.0f}, floor {floor_per:,.0f}, ours {ours_per:,.0f} "
        f"(adds {ours_per - floor_per:,.0f} to the Flask floor, {ours_per - bare_per:,.0f} to bare)"
    )
    print(f"floor / ours: {floor_per / ours_per:.3f}; bare / ours: {bare_per / ours_per:.3f}")


if __name__ == "__main__":
    main()
