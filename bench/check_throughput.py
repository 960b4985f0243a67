"""``gpu-admission check`` throughput over 10,000 documents (target: >= 2,000 documents/s).

Writes a multi-document manifest stream (a realistic mix: inference pods, training Jobs, Volcano Jobs,
raw GPU Deployments, Services and ConfigMaps), then times the real CLI on it, end to end (process
start, policy load, YAML parse, engine, text report). Run: ``python bench/check_throughput.py``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write", metavar="FILE", help="only write the stream to FILE (e.g. for a memory run)")
    args = parser.parse_args()
    if args.write:
        write_stream(Path(args.write), args.documents)
        return
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "manifests.yaml"
        write_stream(stream, args.documents)
        ns = Path(tmp) / "ns.yaml"
        ns.write_text("llm: {gpu-admission.io/tier: training}\ndefault: {gpu-admission.io/tier: training}\n")
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "webhook", "check", str(stream), "--namespaces", str(ns), "-o", "json"],
                capture_output=True, text=True,
            )
            times.append(time.perf_counter() - start)
            if proc.returncode not in (0, 1):
                raise SystemExit(proc.stderr)
        median = statistics.median(times)
        print(f"documents: {args.documents}, runs: {args.runs}")
        print(f"median wall time: {median:.2f} s, best {min(times):.2f} s")
        print(f"throughput (median): {args.documents / median:,.0f} documents/s")


if __name__ == "__main__":
    main()
