"""What installing gpu-admission costs a real cluster: pod creates through kube-apiserver, with and without us.

A platform team's first question about any admission controller. The end-to-end tier's real control
plane (etcd, kube-apiserver 1.36.3; no scheduler, so nothing else competes for the two cores) takes
bursts of pod creates from one client, first with nothing of ours installed, then with everything the
product installs on 1.36 (both webhook configurations with their matchConditions pointing at a real
``gpu-admission serve``, the namespace-label guard, the in-tree ValidatingAdmissionPolicies and
MutatingAdmissionPolicies), alternating rounds so drift on a noisy machine hits both sides. Three
bursts: bare pods (CPU only: our matchConditions send them nowhere), class pods (mutated, validated,
in-tree checked), and one 1,000-pod training gang (gang annotations, 8 GPUs each; the shipped policy with its
training pool grown to 1,000 nodes, so the gang is admitted rather than denied ``gang-unschedulable``).

The client: ``--concurrency`` threads, each with a keep-alive HTTPS connection and the admin's client
certificate, POSTing pods from a shared list (bounded by the count, no timing loop). Figures per burst:
creates per second (wall time from the first send to the last answer), p50/p99 of each create's latency,
and the ratios with/without in the same run. Everything runs on loopback.

Run: ``python bench/cluster_cost.py`` (``--pods 500 --rounds 2`` for a quick look). Needs Go and the module
proxy once per machine (the plane is built by ``tests/e2e/plane``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import ssl
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import DEFAULT_POLICY_DIR  # noqa: E402
from tests.e2e import install  # noqa: E402
from tests.e2e.conftest import probe_installed  # noqa: E402
from tests.e2e.plane import build, controlplane  # noqa: E402

KEY = "gpu-admission.io/workload"


def bare_pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"bare-{i}"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}  # fmt: skip


def class_pod(i: int) -> dict[str, Any]:
    cls = ("inference", "dev", "training")[i % 3]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"class-{i}", "labels": {KEY: cls},
                         "annotations": {"gpu-admission.io/gpu-memory": "4Gi"} if cls != "training" else {}},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1",
                                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}  # fmt: skip


def gang_pod(i: int, gang: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{gang}-{i}", "labels": {KEY: "training"},
                         "annotations": {"gpu-admission.io/gpus": "8", "gpu-admission.io/gang": gang,
                                         "gpu-admission.io/gang-size": str(size)}},
            "spec": {"containers": [{"name": "c", "image": "registry.example/train:1"}]}}  # fmt: skip


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU of these processes so far (``/proc/PID/stat``)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def group(pgid: int) -> set[int]:
    """The processes of a process group (our server's master and workers)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    out.add(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    return out


def burst(plane: controlplane.Plane, namespace: str, pods: list[dict[str, Any]], concurrency: int,
          watched: dict[str, set[int]] | None = None) -> dict[str, Any]:  # fmt: skip
    """One burst; ``watched``: processes whose CPU per pod is reported (apiserver, etcd, our server)."""
    watched = watched or {}
    before = {name: cpu_seconds(pids) for name, pids in watched.items()}
    client_before = time.process_time()
    host, port = plane.server.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(plane.directory / "ca.crt"))
    ctx.load_cert_chain(plane.directory / "admin.crt", plane.directory / "admin.key")
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    queue = list(enumerate(pods))
    path = f"/api/v1/namespaces/{namespace}/pods"

    def worker() -> None:
        conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
        while True:
            with lock:
                if not queue:
                    break
                _, pod = queue.pop(0)
            body = json.dumps(pod).encode()
            t0 = time.perf_counter()
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                if resp.status != 201:
                    errors.append(f"{resp.status} {data[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    latencies.sort()
    cpu = {name: (cpu_seconds(pids) - before[name]) * 1000 / len(pods) for name, pids in watched.items()}
    cpu["client"] = (time.process_time() - client_before) * 1000 / len(pods)
    return {
        "cpu_ms_per_pod": cpu,
        "pods": len(pods),
        "per_second": len(pods) / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "errors": errors,
    }


PARTS = ("webhooks", "label-guard", "in-tree-vaps", "in-tree-maps")


def part_of(doc: dict[str, Any], in_tree: bool) -> str | None:
    """Which installed part an object belongs to (``--parts`` measures a subset: where the cost comes from)."""
    kind = doc["kind"]
    if kind in install.WEBHOOK_CONFIGS:
        return "webhooks"
    if kind.startswith("MutatingAdmission"):
        return "in-tree-maps"
    if kind.startswith("ValidatingAdmission"):
        return "in-tree-vaps" if in_tree else "label-guard"
    return None


def install_ours(plane: controlplane.Plane, server: install.Server, policy_dir: Path,
                 parts: tuple[str, ...] = PARTS) -> list[dict[str, Any]]:  # fmt: skip
    rendered = install.render(policy_dir)
    objs = [d for d in rendered if part_of(d, False) in parts or d["kind"] == "PriorityClass"]
    in_tree = install.render(policy_dir, "--in-tree", "--kube-version", "1.36")
    in_tree = [d for d in in_tree if part_of(d, True) in parts]
    applied = install.install_rendered(plane, objs + in_tree, server)
    if "webhooks" in parts:
        install.wait_for(lambda: probe_installed(plane), "our admission to take effect")
    else:
        time.sleep(3)  # admission policies load asynchronously
    return applied


def uninstall_ours(plane: controlplane.Plane, applied: list[dict[str, Any]]) -> None:
    install.delete(plane, [d for d in applied if d["kind"] != "PriorityClass"])

    def gone() -> bool:
        pod = class_pod(0)
        pod["metadata"]["name"] = f"probe-{uuid.uuid4().hex[:6]}"
        code = plane.kubectl("create", "--dry-run=server", "-n", "default", "-o", "json", "-f", "-",
                             input=json.dumps(pod), check=False)  # fmt: skip
        return code.returncode == 0 and not json.loads(code.stdout)["spec"].get("nodeSelector")

    if any(d["kind"] in install.WEBHOOK_CONFIGS for d in applied):
        install.wait_for(gone, "our admission to be gone")
    else:
        time.sleep(3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=1000, help="pods per bare and class burst")
    p.add_argument("--gang", type=int, default=1000, help="pods in the training gang burst")
    p.add_argument("--rounds", type=int, default=3, help="without/with rounds, alternating")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--parts", default=",".join(PARTS),
                   help=f"what 'with' installs, comma-separated (default all: {','.join(PARTS)})")
    p.add_argument("--bursts", default="bare,class,gang", help="which bursts to run (bare, class, gang)")
    args = p.parse_args(argv)

    directory = Path(tempfile.mkdtemp(prefix="gpu-admission-cost-"))
    plane = controlplane.start(directory, build.build(), scheduler=False)
    work = directory / "product"
    policy_dir = work / "policy"
    shutil.copytree(DEFAULT_POLICY_DIR, policy_dir)
    # the shipped default's training pool has 16 nodes: a cluster with room for the 1,000-pod gang (8 GPUs each)
    text = (policy_dir / "default.yaml").read_text()
    assert "      nodes: 16\n" in text
    (policy_dir / "default.yaml").write_text(text.replace("      nodes: 16\n", "      nodes: 1000\n", 1))
    server = None
    results: dict[str, dict[str, list[dict[str, Any]]]] = {"without": {}, "with": {}}
    try:
        install.install_base(plane)
        server = install.start_server(plane, policy_dir, work)
        for r in range(args.rounds):
            for side in ("without", "with"):
                parts = tuple(x for x in args.parts.split(",") if x)
                applied = install_ours(plane, server, policy_dir, parts) if side == "with" else []
                for key, name, make in (
                    ("bare", "bare pods", lambda n: [bare_pod(i) for i in range(n)]),
                    ("class", "class pods", lambda n: [class_pod(i) for i in range(n)]),
                    ("gang", "1,000-pod gang", lambda _n: [gang_pod(i, "g", args.gang) for i in range(args.gang)]),
                ):
                    if key not in args.bursts.split(","):
                        continue
                    ns = install.namespace(plane, prefix=f"cost-{side}")
                    watched = {"apiserver": {plane.pids["kube-apiserver"]}, "etcd": {plane.pids["etcd"]},
                               "server": group(server.proc.pid)}  # fmt: skip
                    figures = burst(plane, ns, make(args.pods), args.concurrency, watched)
                    results[side].setdefault(name, []).append(figures)
                    print(f"round {r + 1} {side:7} {name:15} {figures['per_second']:7.1f} pods/s "
                          f"p50 {figures['p50_ms']:6.1f} ms p99 {figures['p99_ms']:6.1f} ms "
                          f"errors {len(figures['errors'])}; CPU ms/pod "
                          + " ".join(f"{k} {v:.2f}" for k, v in figures["cpu_ms_per_pod"].items()),
                          flush=True)  # fmt: skip
                    if figures["errors"]:
                        print("  first error:", figures["errors"][0], flush=True)
                if applied:
                    uninstall_ours(plane, applied)
    finally:
        if server is not None:
            server.stop()
        plane.stop()
    print(f"\n{platform.processor() or platform.machine()}, {platform.python_version()}; "
          f"kube-apiserver {build.KUBERNETES_VERSION}; medians of {args.rounds} rounds")  # fmt: skip
    print(f"{'burst':15} {'without/s':>10} {'with/s':>10} {'ratio':>6} {'p50 +ms':>8} {'p99 +ms':>8}  "
          "CPU ms per pod without -> with (apiserver, etcd, our server, client)")
    summary = {}
    for name in results["without"]:
        w = results["without"][name]
        o = results["with"][name]
        med = {k: (statistics.median(f[k] for f in w), statistics.median(f[k] for f in o))
               for k in ("per_second", "p50_ms", "p99_ms")}  # fmt: skip
        cpu = {k: (statistics.median(f["cpu_ms_per_pod"][k] for f in w),
                   statistics.median(f["cpu_ms_per_pod"][k] for f in o))
               for k in ("apiserver", "etcd", "server", "client")}  # fmt: skip
        med |= {f"cpu_{k}": v for k, v in cpu.items()}
        summary[name] = med
        print(f"{name:15} {med['per_second'][0]:10.1f} {med['per_second'][1]:10.1f} "
              f"{med['per_second'][1] / med['per_second'][0]:6.2f} {med['p50_ms'][1] - med['p50_ms'][0]:8.1f} "
              f"{med['p99_ms'][1] - med['p99_ms'][0]:8.1f}  "
              + ", ".join(f"{a:.2f} -> {b:.2f}" for a, b in cpu.values()))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"results": results, "summary": summary}, indent=1))
    errors = sum(len(f["errors"]) for side in results.values() for runs in side.values() for f in runs)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
