"""Start-up of ``gpu-admission check`` on one small file (target: <= 0.2 s), next to a bare interpreter.

What a CI job pays per invocation: the interpreter, the imports ``check`` needs, the policy load, one
document judged and reported, and the interpreter's exit. Each candidate runs as a fresh child process,
best of ``--runs`` wall times; ``python -c pass`` runs in the same rounds, interleaved, so the ratio
cancels the machine's load as far as it can. Children run with bytecode caching on (a warm-up run
writes the ``.pyc`` files first): an installed package has its bytecode, and a start-up measured
while recompiling every module (``PYTHONDONTWRITEBYTECODE=1``) measures the compiler.

``TREE...`` compares source trees in the same run (e.g. ``git archive main | tar -x -C /tmp/main``):
each runs its own ``webhook`` package (``PYTHONPATH=TREE``, working directory ``TREE``) on its own
``examples/workloads/pod.yaml`` and ``policies/``.

``--command CMD`` adds any other command line to the same rounds (run in this tree), e.g. the console
script of a regular, non-editable install (an editable install adds its import finder to every start).

``--instructions`` runs each candidate once more under valgrind's callgrind (``PYTHONHASHSEED=0``) and
prints the instructions it executed: the same count in every run whatever the shared machine is doing
(to within about 0.1 %), where best-of-N wall times at load 3 move by 10 %. Instructions are not time
(cache misses and system calls are not in them), so both are reported.

Run: ``python bench/cli_startup.py [--runs 15] [--command CMD]... [--instructions] [TREE...]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL_FILE = Path("examples/workloads/pod.yaml")


def _env(tree: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def _wall(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} in {cwd}: exit {proc.returncode}\n{proc.stderr.decode()}")
    return seconds


def _instructions(cmd: list[str], cwd: Path, env: dict[str, str]) -> int:
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        cwd=cwd, env={**env, "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False,
    )
    found = re.search(r"Collected : (\d+)", proc.stderr.decode())
    if found is None:
        raise SystemExit(f"valgrind {' '.join(cmd)}: no count\n{proc.stderr.decode()[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", type=Path, help="source trees to compare (default: this one)")
    parser.add_argument("--runs", type=int, default=15, help="rounds; the best of each is reported (default 15)")
    parser.add_argument("--command", action="append", default=[], metavar="CMD",
                        help="another command line to time in the same rounds (split on spaces)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each candidate's instructions once under valgrind (callgrind)")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    trees = [t.resolve() for t in args.trees] or [ROOT]
    candidates: dict[str, tuple[list[str], Path, dict[str, str]]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], ROOT, _env(None)),
    }
    for tree in trees:
        label = "check pod.yaml" + ("" if len(trees) == 1 else f" [{tree}]")
        candidates[label] = ([sys.executable, "-m", "webhook", "check", str(SMALL_FILE)], tree, _env(tree))
    for extra in args.command:
        candidates[extra] = (extra.split(), ROOT, _env(None))
    for cmd, cwd, env in candidates.values():  # warm-up: writes the bytecode caches
        _wall(cmd, cwd, env)
    times: dict[str, list[float]] = {label: [] for label in candidates}
    for _ in range(args.runs):
        for label, (cmd, cwd, env) in candidates.items():
            times[label].append(_wall(cmd, cwd, env))
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} (1 min), Python {sys.version.split()[0]}; "
          f"{args.runs} rounds, interleaved")
    floor = min(times["python -c pass"])
    for label, walls in times.items():
        best, median = min(walls), statistics.median(walls)
        ratio = "" if label == "python -c pass" else f"  {best / floor:5.1f}x python -c pass"
        print(f"{label:<60} best {best * 1000:6.0f} ms  median {median * 1000:6.0f} ms{ratio}")
    if args.instructions:
        counts = {label: _instructions(*candidate) for label, candidate in candidates.items()}
        for label, count in counts.items():
            ratio = "" if label == "python -c pass" else f"  {count / counts['python -c pass']:5.1f}x python -c pass"
            print(f"{label:<60} {count / 1e6:9.1f} M instructions{ratio}")


if __name__ == "__main__":
    main()
