"""Profile one ``gpu-admission serve`` worker under the benchmark load (py-spy, sampling).

Starts the server like ``run.py`` does, drives it with wrk and the same AdmissionReview mix, and
records one worker with py-spy (``--gil``: only the thread holding the GIL, i.e. the Python work
we can shave; py-spy's idle heuristic mislabels threads blocked on the GIL). Prints
the functions with the most samples, self and inclusive, and keeps the collapsed stacks (flamegraph
input) and a speedscope file next to the JSON results.

Run: ``python bench/server/profile.py [--duration 15] [--top 30]`` (needs ``pip install -e .[bench]``
for py-spy, and wrk; as root or with ptrace permission).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.server import reviews  # noqa: E402
from bench.server.run import start_servers, wrk  # noqa: E402


def summarize(collapsed: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("/")[-1] + ")" for f in stack.split(";")
        ]
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    print(f"{total} samples")
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"\n--- top {top} by {title} samples ---")
        for name, n in counter.most_common(top):
            print(f"{100 * n / total:6.1f}%  {name}")


# (bucket, marker): a sample in a request's stack goes to the first bucket whose marker its stack holds
BUCKETS = (
    ("engine (evaluate)", "evaluate (webhook/engine/core.py"),
    ("decision log", "log_decision ("),
    ("metrics", "prometheus_client/"),
    ("review parse/response", "webhook/server/review.py"),
    ("admission other", "Admitter."),
    ("flask/werkzeug", "flask/"),
    ("TLS send", "SSLSocket.send"),
    ("TLS read", "SSLSocket.read"),
    ("gunicorn http", "gunicorn/http/"),
)


def breakdown(collapsed: Path) -> None:
    """Where the samples of request handling go (stacks under ``ThreadWorker.handle``)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "ThreadWorker.handle (" not in stack:
            continue
        bucket = next((name for name, marker in BUCKETS if marker in stack), "gunicorn worker other")
        counts[bucket] += int(count)
    total = sum(counts.values()) or 1
    print("\n--- request handling, by part ---")
    for name, n in counts.most_common():
        print(f"{100 * n / total:6.1f}%  {name}")


MODE_FLAGS: dict[str, tuple[str, ...]] = {"gil": ("--gil",), "active": (), "all": ("--idle",)}
"""py-spy's flags for each ``--mode``."""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--rate", type=int, default=250, help="py-spy samples/s")
    p.add_argument("--out", type=Path, default=ROOT / ".benchmarks")
    p.add_argument(
        "--mode",
        choices=("gil", "active", "all"),
        default="active",
        help="py-spy sampling: gil = only the GIL holder (py-spy's GIL detection is unreliable on 3.11), "
        "active = threads py-spy considers running, all = every thread (wall clock, --idle)",
    )
    args = p.parse_args()
    args.wrk_threads = 1
    args.serve_arg = []
    args.code_root = None
    if shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    tmp = Path(tempfile.mkdtemp(prefix="gpu-admission-profile-"))
    reviews.build(tmp / "bodies")
    ours, *floors = start_servers(tmp, args)
    for floor in floors:
        floor.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    collapsed = args.out / "profile-worker.txt"
    try:
        wrk(ours, tmp / "bodies" / "manifest.txt", args, 3)  # warm-up
        pid = ours.worker_pids()[0]
        load = threading.Thread(target=wrk, args=(ours, tmp / "bodies" / "manifest.txt", args, args.duration + 2))
        load.start()
        subprocess.run(
            [
                pyspy,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(args.duration)),
                "--rate",
                str(args.rate),
                "--format",
                "raw",
                "--output",
                str(collapsed),
                *MODE_FLAGS[args.mode],
            ],
            check=True,
            capture_output=True,
        )
        load.join()
    finally:
        ours.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summarize(collapsed, args.top)
    breakdown(collapsed)
    print(f"\ncollapsed stacks: {collapsed} (flamegraph.pl / speedscope input)")


if __name__ == "__main__":
    main()
