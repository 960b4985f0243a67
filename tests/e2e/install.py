"""The product installed on the real control plane as users install it, minus what needs a kubelet.

- ``manifests/base``'s Namespace, ServiceAccount and RBAC, applied as shipped;
- the real ``gpu-admission serve`` (gunicorn, TLS, certificates from ``certs generate``) on loopback,
  running **with the shipped ServiceAccount's credentials** (a token from the TokenRequest API), so the
  shipped RBAC is what lets it list and watch namespaces, nodes and DRA objects;
- ``policy render``'s output (ConfigMap, PriorityClasses, NetworkPolicy, label guard, both webhook
  configurations) with only ``clientConfig`` rewritten to ``url: https://127.0.0.1:PORT/...`` and the
  ``caBundle`` of ``certs generate``: the Service has no endpoints without a kubelet;
- fake GPU nodes for every pool, advertising what the pool's device plugin would (the scheduler
  oracle's tables, ``tests/oracle/cluster.py``, written independently of the engine).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.plane.controlplane import Plane, free_port

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
SA_NAMESPACE = "gpu-admission"
SA_NAME = "gpu-admission"
WEBHOOK_CONFIGS = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


def apply(
    plane: Plane, objects: Iterable[dict[str, Any]], *, server_side: bool = False, kubeconfig: Path | None = None
) -> str:
    docs = list(objects)
    args = ["apply", "-f", "-"]
    if server_side:
        args += ["--server-side", "--force-conflicts"]
    return plane.kubectl(*args, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
                         kubeconfig=kubeconfig).stdout  # fmt: skip


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render(policy_dir: Path, *extra: str) -> list[dict[str, Any]]:
    """``gpu-admission policy render`` of ``policy_dir`` (the real CLI), parsed."""
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "render", str(policy_dir), *extra],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def point_at(config: dict[str, Any], port: int, ca_pem: bytes) -> dict[str, Any]:
    """A webhook configuration with only ``clientConfig`` rewritten to the loopback URL and our CA."""
    out = json.loads(json.dumps(config))
    for hook in out["webhooks"]:
        path = hook["clientConfig"]["service"].get("path", "/")
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
    return out


# --- the server ---------------------------------------------------------------------------------------------


@dataclass
class Server:
    """A running ``gpu-admission serve`` and what it was given."""

    proc: subprocess.Popen
    port: int
    metrics_port: int
    certs: Path
    log: Path

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def sa_token(plane: Plane, namespace: str = SA_NAMESPACE, name: str = SA_NAME) -> str:
    """A token for the ServiceAccount from the TokenRequest API (what a projected volume gives a pod)."""
    return plane.kubectl("create", "token", name, "-n", namespace, "--duration=24h").stdout.strip()


def make_certs(directory: Path) -> Path:
    """CA and serving certificate from the product's own ``certs generate``, with the loopback IP SAN."""
    subprocess.run(
        [sys.executable, "-m", "webhook", "certs", "generate", "--service", "gpu-admission", "--namespace",
         SA_NAMESPACE, "--ip", "127.0.0.1", "--dns", "localhost", "--out", str(directory)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return directory


def start_server(plane: Plane, policy_dir: Path, workdir: Path, *, extra: Iterable[str] = (),
                 port: int | None = None) -> Server:
    """``gpu-admission serve`` with the shipped ServiceAccount's token, namespaces/nodes/DRA from the plane."""
    workdir.mkdir(parents=True, exist_ok=True)
    certs = workdir / "certs"
    if not (certs / "tls.crt").exists():
        make_certs(certs)
    kubeconfig = plane.token_kubeconfig(sa_token(plane), "gpu-admission-sa")
    port, metrics_port = port or free_port(), free_port()
    log = workdir / f"serve-{port}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--policy", str(policy_dir),
             "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
             "--bind", f"127.0.0.1:{port}", "--metrics-bind", f"127.0.0.1:{metrics_port}",
             "--namespaces", "cluster", "--kubeconfig", str(kubeconfig), "--workers", "2",
             "--log-level", "warning", *extra],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
            start_new_session=True,
        )  # fmt: skip
    server = Server(proc, port, metrics_port, certs, log)
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gpu-admission serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=3) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"gpu-admission serve was not ready within 60 s:\n{log.read_text()[-3000:]}")


# --- what the product installs -------------------------------------------------------------------------------


def install_base(plane: Plane) -> None:
    """The shipped Namespace, ServiceAccount and RBAC, as ``manifests/base`` has them."""
    for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        apply(plane, load_yaml(BASE / name))


def install_rendered(plane: Plane, rendered: list[dict[str, Any]], server: Server | None) -> list[dict[str, Any]]:
    """Apply ``policy render``'s output; webhook configurations point at ``server`` (left out without one)."""
    objects = []
    for doc in rendered:
        if doc["kind"] in WEBHOOK_CONFIGS:
            if server is None:
                continue
            doc = point_at(doc, server.port, (server.certs / "ca.crt").read_bytes())
        objects.append(doc)
    apply(plane, objects)
    return objects


def delete(plane: Plane, objects: Iterable[dict[str, Any]]) -> None:
    for doc in objects:
        meta = doc["metadata"]
        args = ["delete", doc["kind"], meta["name"], "--ignore-not-found", "--wait=false"]
        if meta.get("namespace"):
            args += ["-n", meta["namespace"]]
        plane.kubectl(*args)


# --- fake nodes ---------------------------------------------------------------------------------------------


def node_objects(policy_file: Path, per_pool: int = 2) -> list[tuple[dict[str, Any], dict[str, Any], str | None]]:
    """(node, status, pool) for ``per_pool`` nodes of every pool and one CPU-only node.

    Labels: the pool's nodeSelector, a hostname, a zone and a leaf switch (the topology labels the
    policy maps levels to). Taints: the pool's, with a concrete value and effect where its tolerations
    leave them open. Allocatable: what the pool's device plugin advertises, per the oracle's tables.
    """
    from tests.oracle.cluster import read_policy

    facts = read_policy(policy_file)
    out: list[tuple[dict[str, Any], dict[str, Any], str | None]] = []
    for pool in [*facts.pools, None]:
        for i in range(per_pool if pool is not None else 1):
            name = f"{pool.name if pool else 'cpu'}-{i}"
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      "topology.kubernetes.io/zone": f"zone-{i % 2}",
                      "network.topology.nvidia.com/leaf": f"leaf-{i % 2}"}  # fmt: skip
            taints: list[dict[str, str]] = []
            allocatable = dict(NODE_CAPACITY)
            if pool is not None:
                labels.update(pool.selector)
                taints = [
                    {"key": t["key"], "value": t["value"] if t["value"] is not None else "present",
                     "effect": t["effect"] or "NoSchedule"}
                    for t in pool.taints
                ]  # fmt: skip
                allocatable.update({k: str(v) for k, v in pool.allocatable.items()})
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                    "spec": {"taints": taints} if taints else {}}  # fmt: skip
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status = {
                "capacity": allocatable,
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "fake node of the end-to-end tier", "lastHeartbeatTime": now,
                                "lastTransitionTime": now}],
            }  # fmt: skip
            out.append((node, status, pool.name if pool else None))
    return out


def create_nodes(plane: Plane, policy_file: Path, per_pool: int = 2) -> dict[str, str | None]:
    """Create the fake nodes: Node, then its taints set (TaintNodesByCondition added not-ready), then status."""
    pools: dict[str, str | None] = {}
    for node, status, pool in node_objects(policy_file, per_pool):
        name = node["metadata"]["name"]
        apply(plane, [node])
        # the NodeRestriction-free admin replaces the taints wholesale: the plugin's not-ready taint goes
        plane.kubectl("patch", "node", name, "--type=merge", "-p",
                      json.dumps({"spec": {"taints": node["spec"].get("taints")}}))  # fmt: skip
        plane.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                      json.dumps({"status": status}))  # fmt: skip
        pools[name] = pool
    return pools


# --- namespaces and objects ----------------------------------------------------------------------------------


def namespace(plane: Plane, labels: dict[str, str] | None = None, prefix: str = "e2e") -> str:
    """A fresh namespace (namespaces never finish deleting without kube-controller-manager)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    apply(plane, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}])
    return name


def get(plane: Plane, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    return json.loads(plane.kubectl(*args).stdout)


def wait_for(condition, what: str, timeout: float = 60, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


@contextlib.contextmanager
def installed(plane: Plane, objects: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    apply(plane, objects)
    try:
        yield objects
    finally:
        delete(plane, objects)
