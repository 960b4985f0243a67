"""``check`` and ``audit`` throughput on one worker and on N (target: >= 5,000 documents/s on 2 cores).

Writes a multi-document manifest stream (a realistic mix: inference pods, training Jobs, Volcano Jobs,
raw GPU Deployments, Services and ConfigMaps), then times the real CLI on it, end to end (process
start, policy load, YAML parse, engine, JSON report), with ``--workers 1`` and ``--workers N``
alternating, and checks that both print the same bytes. Then the same for ``audit --snapshot`` over a
cluster of stored pods (``bench/audit_memory.py``'s: 80 % CPU-only, ~4 KB of YAML each).

Per run: wall time, documents/s, and peak RSS two ways: the main process's own (``ru_maxrss``) and
the whole process tree's (main + workers, sampled from /proc every 20 ms; PSS is not needed, the
workers are forked and share the policy's pages, so the tree's RSS over-counts). Medians over
``--runs``; the ratio N/1 is taken per run, so the machine's load cancels as far as it can.

Run: ``python bench/check_throughput.py [--documents 10000] [--audit-pods 20000] [--workers N] [--runs 3]``;
``--write FILE`` only writes the stream.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.proctree import PeakSampler
from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD
from webhook.pool import usable_cores

SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
           "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}}
VOLCANO = {
    "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
    "metadata": {"name": "train-qwen", "labels": {"gpu-admission.io/workload": "training"}},
    "spec": {"minAvailable": 8, "tasks": [{"name": "worker", "replicas": 8, "template": {"spec": {
        "containers": [{"name": "torch", "image": "torch:2.4", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}]},
}
DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "legacy"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "legacy"}},
             "template": {"metadata": {"labels": {"app": "legacy"}},
                          "spec": {"containers": [{"name": "c", "image": "i",
                                                   "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
}
MIX = [INFERENCE_POD, TRAINING_JOB_POD, VOLCANO, DEPLOYMENT, SERVICE, CONFIGMAP]


def write_stream(path: Path, documents: int) -> None:
    texts = [yaml.safe_dump(doc, sort_keys=False) for doc in MIX]
    with path.open("w") as out:
        for i in range(documents):
            if i:
                out.write("---\n")
            out.write(texts[i % len(texts)])


def measure(cmd: list[str]) -> dict[str, float | str]:
    """One run of the CLI as a child: wall seconds, CPU seconds of the tree, peak RSS (MB) of the main
    process and of the tree, exit code, and a digest of stdout (N workers must print what 1 prints)."""
    digest = hashlib.sha256()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    sampler = PeakSampler(proc.pid, interval=0.02)
    assert proc.stdout is not None
    for block in iter(lambda: proc.stdout.read(1 << 16), b""):  # type: ignore[union-attr]
        digest.update(block)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    peak = sampler.stop()
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {code}")
    return {
        "wall_s": seconds,
        "cpu_s": usage.ru_utime + usage.ru_stime,  # the main process and its reaped workers
        "main_peak_rss_mb": usage.ru_maxrss / 1024,
        "tree_peak_rss_mb": peak / 1024,
        "exit": code,
        "stdout_sha256": digest.hexdigest(),
    }


def compare(name: str, cmd: list[str], count: int, workers: int, runs: int) -> dict[str, object]:
    """``cmd`` with ``--workers 1`` and ``--workers N``, alternating; prints and returns the medians."""
    rows: dict[int, list[dict[str, float | str]]] = {1: [], workers: []}
    for r in range(runs):
        for w in ((1, workers) if r % 2 == 0 else (workers, 1)):
            rows[w].append(measure([*cmd, "--workers", str(w)]))
    digests = {str(run["stdout_sha256"]) for runs_ in rows.values() for run in runs_}
    ratios = [float(b["wall_s"]) / float(a["wall_s"]) for a, b in zip(rows[workers], rows[1], strict=True)]
    out: dict[str, object] = {"name": name, "count": count, "workers": workers, "identical_output": len(digests) == 1}
    for w, label in ((1, "one"), (workers, "n")):
        wall = statistics.median(float(x["wall_s"]) for x in rows[w])
        out[label] = {
            "wall_s": round(wall, 2),
            "per_s": round(count / wall),
            "cpu_ms_per_document": round(statistics.median(float(x["cpu_s"]) for x in rows[w]) * 1000 / count, 3),
            "main_peak_rss_mb": round(max(float(x["main_peak_rss_mb"]) for x in rows[w]), 1),
            "tree_peak_rss_mb": round(max(float(x["tree_peak_rss_mb"]) for x in rows[w]), 1),
        }
    out["speedup_median"] = round(statistics.median(ratios), 2)
    one, n = out["one"], out["n"]
    print(
        f"{name}: {count:,} documents, median of {runs}: 1 worker {one['per_s']:,}/s "  # type: ignore[index]
        f"({one['main_peak_rss_mb']} MB); {workers} workers {n['per_s']:,}/s "  # type: ignore[index]
        f"({n['main_peak_rss_mb']} MB main, {n['tree_peak_rss_mb']} MB tree); "  # type: ignore[index]
        f"speedup {out['speedup_median']}x; CPU per document {one['cpu_ms_per_document']} / "  # type: ignore[index]
        f"{n['cpu_ms_per_document']} ms; identical output: {out['identical_output']}",  # type: ignore[index]
        flush=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--audit-pods", type=int, default=20_000, help="0: no audit run")
    parser.add_argument("--workers", type=int, default=usable_cores(), help="N (default: the usable cores)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", metavar="FILE", help="only write the stream to FILE (e.g. for a memory run)")
    args = parser.parse_args()
    if args.write:
        write_stream(Path(args.write), args.documents)
        return
    print(f"machine: {os.cpu_count()} CPUs, {usable_cores()} usable, load {os.getloadavg()[0]:.2f} (1 min)")
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "manifests.yaml"
        write_stream(stream, args.documents)
        ns = Path(tmp) / "ns.yaml"
        ns.write_text("llm: {gpu-admission.io/tier: training}\ndefault: {gpu-admission.io/tier: training}\n")
        cli = [sys.executable, "-m", "webhook"]
        compare("check", [*cli, "check", str(stream), "--namespace-labels", str(ns), "-o", "json"],
                args.documents, args.workers, args.runs)
        stream.unlink()
        if args.audit_pods:
            from bench.audit_memory import write_snapshot
            from tests.conftest import DEFAULT_POLICY_DIR
            from webhook.policy import load_policy

            snap = Path(tmp) / "pods.yaml"
            write_snapshot(snap, args.audit_pods, load_policy(DEFAULT_POLICY_DIR))
            compare("audit --snapshot", [*cli, "audit", "--policy", str(DEFAULT_POLICY_DIR), "--snapshot", str(snap),
                                         "-o", "json"], args.audit_pods, args.workers, args.runs)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
