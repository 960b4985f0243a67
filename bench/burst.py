"""A burst as the apiserver makes it: gangs of pods created at once, each ``/mutate``d, patched, ``/validate``d.

When a training job of 1,000 pods (or a Deployment scaled up, or a Job's parallel pods) is created, the
kube-apiserver calls the webhook for every pod: ``/mutate`` with the pod as the user (or controller)
sent it, applies the JSON Patch we answer, then ``/validate`` with the patched pod, the object it will
store. This replays that pattern against a real ``gpu-admission serve`` (gunicorn gthread, TLS on
loopback) in cluster mode: namespaces listed and watched through the test suite's fake apiserver
(``tests/server/fake_apiserver.py``), with label changes of an unrelated namespace streaming through
the watch during the burst, so the namespace cache is live, not a file.

The mix (default): gangs of 8, 64 and 1,000 training pods (gang annotations, 8 GPUs each), DRA pods
(``resourceClaims`` from a template), a Deployment with its ReplicaSet and inference pods, a Job with its
pods, and CPU-only pods; every object's expected verdict and patch are computed first with the engine
in this process (same policy, same namespace labels), and every answer is checked against them and
against the AdmissionReview contract. Errors (a non-200, a contract violation, a wrong verdict or patch,
a connection error) are counted, never hidden.

The client: ``--clients`` processes x ``--concurrency`` keep-alive connections each (bounded), every
object taken from a shared queue in order, so a gang's pods are in flight together. Figures: objects
per second over the burst (wall time from the first send to the last answer) and the latency of each
object's mutate+validate pair (p50, p99, max), plus each request's p99.

Run: ``python bench/burst.py`` (``--gangs 8,64 --dra 16`` for a quick look; ``--workers/--threads`` as
``serve``). Loopback only; every loop is bounded by the object count.
"""

from __future__ import annotations

import argparse
import base64
import copy
import http.client
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.server.procs import children, cpu_seconds  # noqa: E402
from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD  # noqa: E402
from tests.server.fake_apiserver import FakeNamespaceAPI  # noqa: E402
from tests.server.support import (  # noqa: E402
    ApiserverClient,
    ServerProcess,
    check_response,
    eventually,
    kubeconfig_for,
    review,
    serve_args,
)

NAMESPACES = {
    "llm": {"gpu-admission.io/tier": "training"},
    "serving": {"gpu-admission.io/tier": "serving"},
    "default": {},
    "churn": {},  # its labels change during the burst: watch events, no verdict depends on them
}


@dataclass(slots=True)
class Unit:
    """One object of the burst: what the apiserver sends, and what the engine says it must get back."""

    name: str
    kind: str  # the benchmark's category: gang-8, dra, deployment, job-pod, …
    obj: dict[str, Any]
    namespace: str
    mutate_allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    validate_allowed: bool = True


def _gang_pod(gang: str, size: int, index: int) -> dict[str, Any]:
    pod = copy.deepcopy(TRAINING_JOB_POD)
    meta = pod["metadata"]
    meta["name"] = f"{gang}-worker-{index}"
    meta["namespace"] = "llm"
    meta["labels"]["app"] = gang
    meta["annotations"]["gpu-admission.io/gang"] = gang
    meta["annotations"]["gpu-admission.io/gang-size"] = str(size)
    pod["spec"]["containers"][0]["env"] = [{"name": "MASTER_ADDR", "value": f"{gang}-worker-0"}]
    return pod


def _dra_pod(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"dra-infer-{index}",
            "namespace": "serving",
            "labels": {"app": "dra-infer", "gpu-admission.io/workload": "inference"},
        },
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example.com/triton:24.10",
                    "resources": {"claims": [{"name": "gpu"}], "limits": {"cpu": "4", "memory": "16Gi"}},
                }
            ],
        },
    }


def _owned(obj: dict[str, Any], kind: str, name: str, api_version: str = "apps/v1") -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    ]
    return obj


def _deployment(replicas: int) -> list[tuple[str, dict[str, Any]]]:
    template = copy.deepcopy(INFERENCE_POD)
    template["metadata"].pop("name")
    template["metadata"].pop("namespace")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm-7b", "namespace": "serving", "labels": {"app": "vllm-7b"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "vllm-7b"}}, "template": template},
    }
    replica_set = _owned(copy.deepcopy(deployment), "Deployment", "vllm-7b")
    replica_set["kind"] = "ReplicaSet"
    replica_set["metadata"]["name"] = "vllm-7b-5d9f8"
    out = [("deployment", deployment), ("replicaset", replica_set)]
    for i in range(replicas):
        pod = _owned(copy.deepcopy(INFERENCE_POD), "ReplicaSet", "vllm-7b-5d9f8")
        pod["metadata"]["name"] = f"vllm-7b-5d9f8-{i:05d}"
        out.append(("deployment-pod", pod))
    return out


def _job(completions: int) -> list[tuple[str, dict[str, Any]]]:
    template = copy.deepcopy(INFERENCE_POD)
    template["metadata"] = {"labels": {"app": "batch-embed", "gpu-admission.io/workload": "inference"},
                            "annotations": {"gpu-admission.io/gpu-memory": "8Gi"}}
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch-embed", "namespace": "serving"},
        "spec": {"parallelism": completions, "completions": completions, "template": template},
    }
    out = [("job", job)]
    for i in range(completions):
        pod = _owned(copy.deepcopy(INFERENCE_POD), "Job", "batch-embed", "batch/v1")
        pod["metadata"]["name"] = f"batch-embed-{i:05d}"
        pod["metadata"]["labels"] = {"app": "batch-embed", "gpu-admission.io/workload": "inference"}
        pod["spec"]["restartPolicy"] = "Never"
        out.append(("job-pod", pod))
    return out


def _cpu_pod(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"web-{index}", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                                 "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}]},
    }


def scenario(gangs: list[int], dra: int, replicas: int, completions: int, cpu: int) -> list[tuple[str, dict[str, Any]]]:
    """The burst's objects in creation order: (category, object)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for g, size in enumerate(gangs):
        out += [(f"gang-{size}", _gang_pod(f"train-{g}-{size}", size, i)) for i in range(size)]
    out += [("dra-pod", _dra_pod(i)) for i in range(dra)]
    out += _deployment(replicas)
    out += _job(completions)
    out += [("cpu-pod", _cpu_pod(i)) for i in range(cpu)]
    return out


def expected(policy_dir: Path, objects: list[tuple[str, dict[str, Any]]]) -> list[Unit]:
    """Every object's verdicts and patch from the engine, in this process: what the server must answer."""
    from webhook.engine import Request, mutate, report
    from webhook.policy import load_policy

    policy = load_policy(policy_dir)
    units = []
    for category, obj in objects:
        ns = obj["metadata"]["namespace"]
        labels = {"kubernetes.io/metadata.name": ns, **NAMESPACES[ns]}
        mutated = mutate(policy, Request(copy.deepcopy(obj), namespace=ns, namespace_labels=labels))
        patch = list(mutated.patch)
        stored = jsonpatch.apply_patch(copy.deepcopy(obj), patch) if patch else obj
        validated = report(policy, Request(copy.deepcopy(stored), namespace=ns, namespace_labels=labels))
        name = obj["metadata"]["name"]
        units.append(Unit(name, category, obj, ns, mutated.allowed, patch, validated.allowed))
    return units


# --- the client -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """One client process's results: latencies in seconds, errors as short descriptions (first 20)."""

    done: int = 0
    pairs: list[float] = field(default_factory=list)
    requests: list[float] = field(default_factory=list)
    errors: int = 0
    wrong: int = 0
    first_errors: list[str] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0  # this client process's CPU time (user + system)
    first: float = float("inf")  # time.time() of the first send
    last: float = 0.0  # time.time() of the last answer

    def error(self, text: str, wrong: bool = False) -> None:
        if wrong:
            self.wrong += 1
        else:
            self.errors += 1
        if len(self.first_errors) < 20:
            self.first_errors.append(text)


def _call(
    client: ApiserverClient, unit: Unit, obj: dict, op: str, tally: Tally, lock: threading.Lock
) -> tuple[dict, float] | None:
    """One of the apiserver's calls (``op``: mutate or validate): its checked response and how long it
    took, or None (counted as an error) when the webhook did not answer 200."""
    sent = review(obj, namespace=unit.namespace)
    t0 = time.perf_counter()
    status, _, data = client.request("POST", f"/{op}?timeout=10s", orjson.dumps(sent))
    took = time.perf_counter() - t0
    if status != 200:
        with lock:
            tally.error(f"{unit.name}: /{op} answered {status}: {data[:200]!r}")
        return None
    return check_response(orjson.loads(data), sent, op), took


def _one(client: ApiserverClient, unit: Unit, tally: Tally, lock: threading.Lock) -> None:
    """The apiserver's two calls for one object, checked; a pair's time runs from the first call's send to
    the second's answer, the patch applied between them included."""
    start = time.perf_counter()
    mutated = _call(client, unit, unit.obj, "mutate", tally, lock)
    if mutated is None:
        return
    response, took_mutate = mutated
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    if response["allowed"] is not unit.mutate_allowed or ops != unit.patch:
        with lock:
            tally.error(f"{unit.name}: /mutate allowed={response['allowed']} with {len(ops)} ops, "
                        f"expected allowed={unit.mutate_allowed} with {len(unit.patch)}", wrong=True)
        return
    if not response["allowed"]:
        with lock:
            tally.done += 1
            tally.pairs.append(took_mutate)
            tally.requests.append(took_mutate)
        return
    stored = jsonpatch.apply_patch(unit.obj, ops) if ops else unit.obj
    validated = _call(client, unit, stored, "validate", tally, lock)
    if validated is None:
        return
    response, took_validate = validated
    with lock:
        if response["allowed"] is not unit.validate_allowed:
            tally.error(f"{unit.name}: /validate allowed={response['allowed']}, expected {unit.validate_allowed}: "
                        f"{response.get('status', {}).get('message', '')[:200]}", wrong=True)
            return
        tally.done += 1
        tally.pairs.append(time.perf_counter() - start)
        tally.requests += [took_mutate, took_validate]
        tally.by_kind[unit.kind] = tally.by_kind.get(unit.kind, 0) + 1


def client_process(port: int, ca: str, units: list[Unit], concurrency: int, start_at: float) -> Tally:
    """``concurrency`` keep-alive connections taking ``units`` in order; starts at ``start_at`` (a
    shared ``time.time()``), so every client process begins the burst together."""
    tally, lock = Tally(), threading.Lock()
    items = iter(units)
    take = threading.Lock()

    def run() -> None:
        client = ApiserverClient(port, [ca], timeout=30.0)
        try:
            client.request("GET", "/healthz")  # the TLS handshake before the burst, as a pooled apiserver
            while time.time() < start_at:
                time.sleep(0.001)
            with lock:
                tally.first = min(tally.first, time.time())
            while True:
                with take:
                    unit = next(items, None)
                if unit is None:
                    with lock:
                        tally.last = max(tally.last, time.time())
                    return
                try:
                    _one(client, unit, tally, lock)
                except Exception as exc:  # a broken connection or answer: counted, and the next one
                    with lock:
                        tally.error(f"{unit.name}: {type(exc).__name__}: {exc}")
                    client.close()
                    client = ApiserverClient(port, [ca], timeout=30.0)
        finally:
            client.close()

    threads = [threading.Thread(target=run) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    tally.cpu_s = usage.ru_utime + usage.ru_stime
    return tally


def _client_entry(args: tuple[int, str, list[Unit], int, float]) -> Tally:
    return client_process(*args)


# --- the run ------------------------------------------------------------------------------------------


def churn(api: FakeNamespaceAPI, stop: threading.Event, limit: int = 10_000) -> int:
    """Relabel the ``churn`` namespace every 50 ms until ``stop`` (at most ``limit`` times): watch
    events reach every worker's namespace cache during the burst."""
    changes = 0
    while not stop.wait(0.05) and changes < limit:
        changes += 1
        api.modify("churn", {"revision": str(changes)})
    return changes


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_burst(
    tmp: Path,
    units: list[Unit],
    *,
    policy_dir: Path,
    workers: int = 2,
    threads: int = 8,
    clients: int = 2,
    concurrency: int = 16,
) -> dict[str, Any]:
    """Start the fake apiserver and ``serve``, replay ``units``, stop both; the figures as a dict."""
    from webhook.certs.generate import generate

    certs = generate(tmp / "certs", "gpu-admission", "gpu-admission", dns=("localhost",), ips=("127.0.0.1",))
    api = FakeNamespaceAPI(NAMESPACES).start()
    server = ServerProcess(
        tmp,
        serve_args(
            certs,
            "--namespaces", "cluster",
            "--kubeconfig", str(kubeconfig_for(tmp, api.url)),
            "--workers", str(workers),
            "--threads", str(threads),
            "--log-level", "warning",
            policy=policy_dir,
        ),
        ca_files=[certs.ca_cert],
    )
    stop = threading.Event()
    changes: list[int] = []
    try:
        server.start(wait_ready=False)
        probe = server.client()
        eventually(lambda: _ready(probe), timeout=60, what="readiness after the first namespace list")
        probe.close()
        eventually(lambda: len(api.watches()) >= workers, timeout=60, what="every worker's namespace watch")
        churner = threading.Thread(target=lambda: changes.append(churn(api, stop)))
        churner.start()
        assert server.proc is not None
        workers_cpu = sum(cpu_seconds(pid) for pid in children(server.proc.pid))
        shares = [units[i::clients] for i in range(clients)]  # each process keeps the creation order
        start_at = time.time() + 3.0  # every client process has connected by then
        if clients == 1:
            tallies = [client_process(server.port, str(certs.ca_cert), units, concurrency, start_at)]
        else:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(clients) as pool:
                tallies = pool.map(
                    _client_entry, [(server.port, str(certs.ca_cert), s, concurrency, start_at) for s in shares]
                )
        # from the synchronised start to the last answer (connection set-up is not in it)
        wall = max(1e-9, max(t.last for t in tallies) - min(t.first for t in tallies))
        workers_cpu = sum(cpu_seconds(pid) for pid in children(server.proc.pid)) - workers_cpu
        stop.set()
        churner.join(10)
        log_errors = [r for r in server.log_records() if r.get("level") == "error"]
    finally:
        stop.set()
        server.stop()
        api.stop()
    total = Tally()
    for t in tallies:
        total.done += t.done
        total.errors += t.errors
        total.wrong += t.wrong
        total.pairs += t.pairs
        total.requests += t.requests
        total.first_errors += t.first_errors
        for k, v in t.by_kind.items():
            total.by_kind[k] = total.by_kind.get(k, 0) + v
    return {
        "objects": len(units),
        "pods": sum(1 for u in units if u.obj["kind"] == "Pod"),
        "answered": total.done,
        "errors": total.errors,
        "wrong_verdicts": total.wrong,
        "first_errors": total.first_errors[:10],
        "by_kind": dict(sorted(total.by_kind.items())),
        "wall_s": round(wall, 3),
        "objects_per_s": round(len(units) / wall, 1),
        "pair_ms": {k: round(percentile(total.pairs, q) * 1000, 2) for k, q in (("p50", 0.5), ("p99", 0.99))}
        | {"max": round(max(total.pairs, default=float("nan")) * 1000, 2)},
        "request_p99_ms": round(percentile(total.requests, 0.99) * 1000, 2),
        "watch_events": changes[0] if changes else 0,
        # what each side cost, so a loaded machine's figure can be read as capacity: 2 cores' worth of
        # server CPU / server CPU per object is what the server could do with the client elsewhere
        "server_cpu_ms_per_object": round(workers_cpu * 1000 / len(units), 3),
        "client_cpu_ms_per_object": round(sum(t.cpu_s for t in tallies) * 1000 / len(units), 3),
        "server_error_lines": len(log_errors),
        "settings": {"workers": workers, "threads": threads, "clients": clients, "concurrency": concurrency},
    }


def _ready(client: ApiserverClient) -> bool:
    try:
        status, _, _ = client.request("GET", "/readyz")
    except (OSError, http.client.HTTPException):
        client.close()  # not listening yet: the next try dials again
        return False
    return status == 200


def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "load_1m": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 8,64,1000, got {text!r}") from None
    if any(v < 1 or v > 10_000 for v in values):
        raise argparse.ArgumentTypeError("each gang has 1 to 10,000 pods")
    return values


def main(argv: list[str] | None = None) -> int:
    from tests.conftest import DEFAULT_POLICY_DIR

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gangs", type=_ints, default=[8, 64, 1000], help="gang sizes (default 8,64,1000)")
    p.add_argument("--dra", type=int, default=200, help="DRA pods (default 200)")
    p.add_argument("--replicas", type=int, default=300, help="the Deployment's pods (default 300)")
    p.add_argument("--completions", type=int, default=200, help="the Job's pods (default 200)")
    p.add_argument("--cpu", type=int, default=100, help="CPU-only pods (default 100)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--clients", type=int, default=2, help="client processes (default 2)")
    p.add_argument("--concurrency", type=int, default=16, help="connections per client process (default 16)")
    p.add_argument("--rounds", type=int, default=1, help="bursts, each against a fresh server (default 1)")
    p.add_argument("--policy", type=Path, default=DEFAULT_POLICY_DIR)
    p.add_argument("--out", type=Path, default=ROOT / ".benchmarks" / "burst.json")
    args = p.parse_args(argv)
    for name in ("dra", "replicas", "completions", "cpu"):
        if not 0 <= getattr(args, name) <= 100_000:
            p.error(f"--{name} must be between 0 and 100,000")
    if not (1 <= args.clients <= 8 and 1 <= args.concurrency <= 64 and 1 <= args.rounds <= 10):
        p.error("--clients 1..8, --concurrency 1..64, --rounds 1..10")
    units = expected(args.policy, scenario(args.gangs, args.dra, args.replicas, args.completions, args.cpu))
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="gpu-admission-burst-") as tmp:
            result = run_burst(
                Path(tmp), units, policy_dir=args.policy, workers=args.workers, threads=args.threads,
                clients=args.clients, concurrency=args.concurrency,
            )
        rounds.append(result)
        print(
            f"burst {r + 1}: {result['objects']:,} objects ({result['pods']:,} pods) in {result['wall_s']:.2f} s: "
            f"{result['objects_per_s']:,.0f} objects/s; mutate+validate p50 {result['pair_ms']['p50']:.1f} ms, "
            f"p99 {result['pair_ms']['p99']:.1f} ms, max {result['pair_ms']['max']:.1f} ms; request p99 "
            f"{result['request_p99_ms']:.1f} ms; errors {result['errors']}, wrong verdicts {result['wrong_verdicts']}, "
            f"watch events {result['watch_events']}, server error lines {result['server_error_lines']}; "
            f"CPU per object: server {result['server_cpu_ms_per_object']:.2f} ms, "
            f"client {result['client_cpu_ms_per_object']:.2f} ms",
            flush=True,
        )
        for line in result["first_errors"]:
            print(f"  error: {line}")
    out = {"machine": machine(), "rounds": rounds,
           "objects_per_s_median": statistics.median(r["objects_per_s"] for r in rounds)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(f"machine: {out['machine']}; JSON: {args.out}")
    return 0 if all(r["errors"] == 0 and r["wrong_verdicts"] == 0 for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
