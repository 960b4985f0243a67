"""``check`` (or ``audit --snapshot``) documents/s of two source trees (before and after a change), on 1
and N workers, in one run.

The machine this project is measured on is shared; absolute figures drift with its load, so the two
trees and the worker counts alternate within every round (the order reversed each round) and the
after/before ratio is taken per round. Each tree runs its own code (``python -m webhook`` with the
tree as working directory, which puts it first on ``sys.path``); the outputs must be byte-identical.

Run: ``git archive main | tar -x -C /tmp/before`` then
``python bench/check_before_after.py /tmp/before . --stream /tmp/m6k.yaml [--rounds 6] [--workers 2]``
(write the stream with ``python bench/check_throughput.py --write /tmp/m6k.yaml --documents 6000``).
``--snapshot FILE`` times ``audit --policy policies --snapshot FILE -o json`` instead (write one with
``bench/audit_memory.py``'s ``write_snapshot``); documents are then the snapshot's items.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.check_throughput import measure
from webhook import yamlpos


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stream", type=Path, help="a multi-document manifest stream, for check")
    source.add_argument("--snapshot", type=Path, help="a kubectl List of stored objects, for audit --snapshot")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2, help="N, measured next to 1")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    if args.snapshot is not None:
        from webhook.audit.snapshot import objects_unparsed

        stream = args.snapshot.resolve()
        count = sum(1 for _ in objects_unparsed([str(stream)], None))
    else:
        stream = args.stream.resolve()
        count = sum(yamlpos.has_content(c) for _, c in yamlpos.split_documents(stream.read_text(encoding="utf-8")))
    counts = (1, args.workers)
    rows: dict[tuple[str, int], list[dict[str, float | str]]] = {(t, w): [] for t in trees for w in counts}
    with tempfile.TemporaryDirectory() as tmp:
        ns = Path(tmp) / "ns.yaml"
        ns.write_text("llm: {gpu-admission.io/tier: training}\ndefault: {gpu-admission.io/tier: training}\n")
        print(f"{count:,} documents; load {os.getloadavg()[0]:.2f} (1 min)", flush=True)
        for r in range(args.rounds):
            order = [(t, w) for t in trees for w in counts]
            for tree, workers in order[::-1] if r % 2 else order:
                if args.snapshot is not None:
                    cmd = [sys.executable, "-m", "webhook", "audit", "--policy", "policies", "--snapshot", str(stream),
                           "-o", "json", "--workers", str(workers)]
                else:
                    cmd = [sys.executable, "-m", "webhook", "check", str(stream), "--namespaces", str(ns), "-o",
                           "json", "--workers", str(workers)]
                cwd = Path.cwd()
                os.chdir(trees[tree])
                try:
                    rows[(tree, workers)].append(measure(cmd))
                finally:
                    os.chdir(cwd)
    digests = {str(run["stdout_sha256"]) for runs in rows.values() for run in runs}
    print(f"identical output: {len(digests) == 1}")
    for workers in counts:
        rates = {t: [count / float(x["wall_s"]) for x in rows[(t, workers)]] for t in trees}
        cpu = {t: statistics.median(float(x["cpu_s"]) for x in rows[(t, workers)]) * 1000 / count for t in trees}
        ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
        median = {t: statistics.median(rates[t]) for t in trees}
        print(
            f"{workers} worker(s): before {median['before']:,.0f}/s ({cpu['before']:.3f} ms CPU/doc), "
            f"after {median['after']:,.0f}/s ({cpu['after']:.3f} ms CPU/doc); after/before median "
            f"{statistics.median(ratios):.2f}x, per round {', '.join(f'{x:.2f}' for x in ratios)}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
