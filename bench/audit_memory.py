"""``gpu-admission audit`` over 100,000 pods: wall time and the audit process's peak RSS (bar: well under 400 MB).

Builds a cluster of ``--pods`` pods as the apiserver stores them (managedFields, status, the
service-account volume, owner references; ~4 KB of YAML each), spread over 200 namespaces: 80 %
CPU-only, 20 % GPU pods, of which half were mutated at admission (admitted), a quarter were created
while the webhook was down (``placement-missing``) and a quarter are raw GPU requests. Then it
runs the real CLI as a child process, end to end, in one or both modes:

* ``snapshot``: the cluster written as ``kubectl get pods -A -o yaml`` prints it (one ``kind: List``),
  read with ``--snapshot``;
* ``api``: the cluster served by the test suite's fake apiserver (``tests/audit/fake_apiserver.py``,
  loopback, in this process) and read through the ``kubernetes`` client in pages of 500.

Peak RSS is the audit process's ``ru_maxrss`` (``os.wait4``); the fake apiserver runs in a process of
its own, so its memory is not counted (nor inherited: a child started from a parent holding the pods
would report the parent's pages as its peak). With ``--workers N`` above 1 the audit forks workers, and
a pod's memory limit charges them all: the tree's peak is sampled every 50 ms as the sum of each
process's PSS (``/proc/PID/smaps_rollup``: pages shared after the fork counted once, as the cgroup
charges them). Run: ``python bench/audit_memory.py`` (``--pods 10000`` for a quick look).
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proctree import PeakSampler  # noqa: E402
from tests.audit.fake_apiserver import FakeAPIServer  # noqa: E402
from tests.conftest import DEFAULT_POLICY_DIR  # noqa: E402
from webhook.engine import Request, report  # noqa: E402
from webhook.policy import load_policy  # noqa: E402

NAMESPACES = 200


def _pod(i: int) -> dict[str, Any]:
    ns = f"team-{i % NAMESPACES:03d}"
    name = f"app-{i // NAMESPACES:04d}-7f9c{i:06d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"{i:08x}-1111-2222-3333-444455556666",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "generateName": name[:-5],
            "labels": {"app": f"app-{i // NAMESPACES:04d}", "pod-template-hash": "7f9c"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"app-{i // NAMESPACES:04d}-7f9c",
                 "uid": f"rs-{i // NAMESPACES:08x}", "controller": True, "blockOwnerDeletion": True}
            ],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
                              "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {},
                                                                                "f:resources": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                 "time": "2026-12-01T10:00:05Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}}}},
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/team/app:1.2.3",
                    "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(6)],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                  "limits": {"cpu": "500m", "memory": "512Mi"}},
                    "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "nodeName": f"node-{i % 500:03d}",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.1.5",
            "podIP": "10.244.1.7",
            "qosClass": "Guaranteed",
            "startTime": "2026-12-01T10:00:01Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-01T10:00:03Z"}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                                   "image": "registry.example.com/team/app:1.2.3",
                                   "imageID": "registry.example.com/team/app@sha256:" + "ab" * 32,
                                   "containerID": "containerd://" + "cd" * 32,
                                   "state": {"running": {"startedAt": "2026-12-01T10:00:02Z"}}}],
        },
    }


def pods(n: int, policy: Any) -> Any:
    """The cluster's pods, one at a time: 20 % GPU pods (admitted, unmutated, raw) among CPU pods."""
    for i in range(n):
        pod = _pod(i)
        kind = i % 20
        if kind in (0, 1):  # admitted: the real mutation applied at CREATE
            pod["metadata"]["labels"]["gpu-admission.io/workload"] = "inference"
            spec = report(
                policy, Request({**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}})
            ).mutated["spec"]
            pod["spec"] = {**copy.deepcopy(spec), "nodeName": pod["spec"]["nodeName"]}
        elif kind == 2:  # created while the webhook was down
            pod["metadata"]["labels"]["gpu-admission.io/workload"] = "inference"
            pod["spec"].pop("nodeName")
        elif kind == 3:  # a raw GPU request
            pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
        yield pod


def write_snapshot(path: Path, n: int, policy: Any) -> int:
    """``kubectl get pods -A -o yaml``: one List, items at column 0."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    with path.open("w") as out:
        out.write("apiVersion: v1\nitems:\n")
        for pod in pods(n, policy):
            text = yaml.dump(pod, Dumper=dumper, sort_keys=True, default_flow_style=False)
            lines = text.splitlines(keepends=True)
            out.write("- " + lines[0] + "".join("  " + line for line in lines[1:]))
        out.write('kind: List\nmetadata:\n  resourceVersion: ""\n')
    return path.stat().st_size


def measure(cmd: list[str]) -> tuple[float, float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS MB, the process tree's peak PSS MB, exit code) of one run
    of the CLI as a child process.

    CPU seconds (user + system) are what the audit itself cost, workers included: on a shared machine
    the wall time also counts the time it waited for a core."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = PeakSampler(proc.pid, interval=0.05, pss=True)
    err = proc.stderr.read().decode() if proc.stderr else ""  # drained while it runs: a full pipe would block it
    _, status, usage = os.wait4(proc.pid, 0)
    peak = sampler.stop() / 1024
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"audit failed ({proc.returncode}): {err}")
    cpu = usage.ru_utime + usage.ru_stime  # wait4 reports the child with the workers it reaped
    return seconds, cpu, usage.ru_maxrss / 1024, peak, proc.returncode


def serve(n: int, directory: str, conn: Any) -> None:
    """The fake apiserver with ``n`` pods, until told to stop; sends its kubeconfig's path first."""
    api = FakeAPIServer()
    api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-000"}})
    for pod in pods(n, load_policy(DEFAULT_POLICY_DIR)):
        api.objects.setdefault(("", "pods"), []).append(pod)
    api.start()
    conn.send(str(api.kubeconfig(Path(directory))))
    conn.recv()
    api.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--mode", choices=("snapshot", "api", "both"), default="both")
    parser.add_argument("--output", default="openreports", choices=("openreports", "json", "text", "junit"))
    parser.add_argument("--workers", type=int, default=1, help="the audit's --workers (default 1)")
    args = parser.parse_args()
    policy = load_policy(DEFAULT_POLICY_DIR)  # the shipped default, as the other benchmarks' numbers
    cli = [sys.executable, "-m", "webhook", "audit", "--policy", str(DEFAULT_POLICY_DIR), "-o", args.output,
           "--workers", str(args.workers)]
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode in ("snapshot", "both"):
            snap = Path(tmp) / "pods.yaml"
            size = write_snapshot(snap, args.pods, policy)
            seconds, cpu, rss, tree, code = measure([*cli, "--snapshot", str(snap)])
            print(f"snapshot: {args.pods:,} pods ({size / 1e6:,.0f} MB of YAML), {args.workers} worker(s): "
                  f"{seconds:.1f} s wall, {cpu:.1f} s CPU ({args.pods / cpu:,.0f} pods per CPU second), "
                  f"peak RSS {rss:,.0f} MB, tree peak PSS {tree:,.0f} MB, exit {code}", flush=True)
            snap.unlink()
        if args.mode in ("api", "both"):
            # the fake apiserver holds every pod: it runs in a process of its own, since a child
            # started from a large parent reports the parent's pages as its own peak (vfork/fork)
            parent, child = multiprocessing.Pipe()
            server = multiprocessing.get_context("fork").Process(target=serve, args=(args.pods, tmp, child))
            server.start()
            try:
                config = parent.recv()
                seconds, cpu, rss, tree, code = measure([*cli, "--kubeconfig", config])
            finally:
                parent.send("stop")
                server.join(30)
            print(f"api: {args.pods:,} pods in pages of 500, {args.workers} worker(s): {seconds:.1f} s wall, "
                  f"{cpu:.1f} s CPU ({args.pods / cpu:,.0f} pods per CPU second), peak RSS {rss:,.0f} MB, "
                  f"tree peak PSS {tree:,.0f} MB, exit {code}", flush=True)


if __name__ == "__main__":
    main()
