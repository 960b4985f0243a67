"""Certificate rotation and policy reload while the real server is under load.

Both the Secret (certificate) and the ConfigMap (policy) are laid out the way the kubelet mounts them
(``AtomicDir``: files are symlinks into ``..data``, swapped with one rename). A background load of
concurrent clients (``CLIENTS`` threads, each alternating a fresh connection and its own kept-alive
one, so new handshakes race the swap on both workers) runs the whole time; not one request may fail.
Also selected by ``pytest -m reliability``.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.support import (
    ApiserverClient,
    AtomicDir,
    ServerProcess,
    check_response,
    eventually,
    patch_ops,
    review,
)
from webhook.certs.generate import generate

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.reliability]

CLIENTS = 4

DEFAULT = (POLICIES / "default.yaml").read_text()


def _policy(priority: str) -> bytes:
    text = DEFAULT.replace("priorityClassName: gpu-inference\n", f"priorityClassName: {priority}\n")
    assert text != DEFAULT or priority == "gpu-inference"
    return text.encode()


def _serial(path: Path) -> str:
    return format(x509.load_pem_x509_certificate(path.read_bytes()).serial_number, "x")


class Load:
    """``clients`` threads sending reviews in a loop, each alternately on a new connection and on its
    own kept-alive connection."""

    def __init__(self, server: ServerProcess, ca_files: list[Path], clients: int = CLIENTS):
        self.server = server
        self.ca_files = ca_files
        self.failures: list[str] = []
        self.priorities: Counter[str] = Counter()
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]
        self.keepalives = [ApiserverClient(server.port, ca_files) for _ in range(clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        for c in self.keepalives:
            c.close()

    def count(self) -> int:
        with self._lock:
            return self.sent

    def wait_for(self, total: int, what: str) -> None:
        """Until ``total`` reviews have been answered: load is driven by counts, never by a sleep."""
        eventually(lambda: self.count() >= total, timeout=120.0, what=f"{total} reviews {what}")

    def _one(self, client: ApiserverClient) -> str:
        sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
        status, doc = client.post_review("mutate", sent)
        assert status == 200, status
        response = check_response(doc, sent, "mutate")
        values = [op["value"] for op in patch_ops(response) if op["path"] == "/spec/priorityClassName"]
        return values[0] if values else "-"

    def _run(self, index: int) -> None:
        while not self._stop.is_set():
            fresh = ApiserverClient(self.server.port, self.ca_files)
            for client in (fresh, self.keepalives[index]):
                try:
                    priority = self._one(client)
                    with self._lock:
                        self.sent += 1
                        self.priorities[priority] += 1
                except Exception as exc:
                    with self._lock:
                        self.failures.append(f"{type(exc).__name__}: {exc}")
            fresh.close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, AtomicDir, AtomicDir, dict]]:
    tmp = tmp_path_factory.mktemp("reload")
    pair_a = generate(tmp / "a", "gpu-admission", "gpu-admission", dns=("localhost",))
    pair_b = generate(tmp / "b", "gpu-admission", "gpu-admission", dns=("localhost",))  # another CA, too
    secret = AtomicDir(tmp / "secret")
    secret.write({"tls.crt": pair_a.cert.read_bytes(), "tls.key": pair_a.key.read_bytes()})
    configmap = AtomicDir(tmp / "policy")
    configmap.write({"default.yaml": _policy("gpu-inference")})
    server = ServerProcess(
        tmp,
        [
            "--policy",
            str(configmap.path),
            "--tls-cert",
            str(secret.path / "tls.crt"),
            "--tls-key",
            str(secret.path / "tls.key"),
            "--policy-interval",
            "0.2",
            "--cert-interval",
            "0.2",
            "--workers",
            "2",
            "--threads",
            "4",
            "--namespace-labels",
            "none",
        ],
        ca_files=[pair_a.ca_cert, pair_b.ca_cert],  # caBundle holds old and new CA during rotation
    )
    server.start()
    yield server, secret, configmap, {"a": pair_a, "b": pair_b}
    assert server.stop() == 0


def test_certificate_rotation_loses_no_request(setup):
    server, secret, _, pairs = setup
    serial_a, serial_b = _serial(pairs["a"].cert), _serial(pairs["b"].cert)
    probe = server.client()
    probe.get_json("/healthz")
    assert probe.peer_serial() == serial_a
    probe.close()

    with Load(server, server.ca_files) as load:
        load.wait_for(10 * CLIENTS, "before the rotation")
        secret.write({"tls.crt": pairs["b"].cert.read_bytes(), "tls.key": pairs["b"].key.read_bytes()})

        def new_connections_get_b() -> bool:
            serials = set()
            for _ in range(6):  # several fresh connections: both workers
                c = server.client()
                c.get_json("/healthz")
                serials.add(c.peer_serial())
                c.close()
            return serials == {serial_b}

        eventually(new_connections_get_b, what="the rotated certificate on new connections")
        rotated_at = load.count()
        load.wait_for(rotated_at + 10 * CLIENTS, "after the rotation")  # fresh and kept-alive connections
    print(
        f"\ncertificate rotation under load: {load.sent} requests from {CLIENTS} clients, {len(load.failures)} failed"
    )
    assert load.failures == []
    assert all(c.handshakes == 1 for c in load.keepalives), "the kept-alive connections survived the rotation"
    not_after_b = x509.load_pem_x509_certificate(pairs["b"].cert.read_bytes()).not_valid_after_utc.timestamp()
    eventually(
        lambda: server.metric("gpu_admission_cert_expiry_timestamp_seconds") == pytest.approx(not_after_b),
        what="the expiry metric of the new certificate",
    )
    assert server.metric("gpu_admission_cert_reloads_total", result="success") >= 4, "2 workers x (load + reload)"


def test_policy_good_broken_good_under_load(setup):
    server, _, configmap, _ = setup

    def all_say(priority: str) -> Callable[[], bool]:
        def check() -> bool:
            seen = set()
            for _ in range(6):
                c = server.client()
                sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
                _, doc = c.post_review("mutate", sent)
                c.close()
                ops = patch_ops(doc["response"])
                seen.update(op["value"] for op in ops if op["path"] == "/spec/priorityClassName")
            return seen == {priority}

        return check

    with Load(server, server.ca_files) as load:
        assert all_say("gpu-inference")()
        configmap.write({"default.yaml": _policy("gpu-inference-v2")})
        eventually(all_say("gpu-inference-v2"), what="the new policy to serve")

        broken = _policy("gpu-inference-v3").replace(b"maxGPUs: 2", b"maxGPUs: [2")
        configmap.write({"default.yaml": broken})

        def both_workers_stale() -> bool:
            failed = [r for r in server.log_records() if r.get("msg", "").startswith("policy reload failed")]
            return len({r["pid"] for r in failed}) == 2

        eventually(both_workers_stale, what="both workers to log the broken policy")
        for _ in range(6):
            c = server.client()
            status, _ = c.get_json("/readyz")
            c.close()
            assert status == 200, "a broken policy file does not make the pod unready"
        failed = [r for r in server.log_records() if r.get("msg", "").startswith("policy reload failed")]
        errors = failed[0]["errors"]
        assert any(re.search(r"default\.yaml:\d+:\d+: error: ", e) for e in errors), errors
        assert all_say("gpu-inference-v2")(), "the last good policy keeps serving"
        assert server.metric("gpu_admission_policy_reload_error") == 1
        assert server.metric("gpu_admission_policy_reloads_total", result="failure") >= 1

        configmap.write({"default.yaml": _policy("gpu-inference-v3")})
        eventually(all_say("gpu-inference-v3"), what="the fixed policy to serve")
        eventually(lambda: server.metric("gpu_admission_policy_reload_error") == 0, what="the error gauge to clear")
    print(
        f"\npolicy good -> broken -> good under load: {load.sent} requests from {CLIENTS} clients, "
        f"{len(load.failures)} failed, served by policy: {dict(load.priorities)}"
    )
    assert load.failures == []
    assert set(load.priorities) <= {"gpu-inference", "gpu-inference-v2", "gpu-inference-v3"}
    assert load.priorities["gpu-inference-v2"] > 0
    logged = [r for r in server.log_records() if r.get("msg", "").startswith("policy reload failed")]
    assert logged and any("default.yaml:" in e for e in logged[0]["errors"])
