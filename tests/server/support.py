"""Test support for the server suite: a real ``gpu-admission serve`` subprocess and a client that calls
it the way the kube-apiserver does.

The client follows webhook-anchors §4: HTTP/1.1 with keep-alive, ``POST <path>?timeout=10s`` with
``Content-Type: application/json``, TLS verified against the CA bundle with the server name
``gpu-admission.gpu-admission.svc`` (SNI + hostname check), whatever address it dials.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
SERVICE_DNS = "gpu-admission.gpu-admission.svc"
API_VERSION = "admission.k8s.io/v1"


def serve_args(certs: Any, *extra: str, policy: Path | str | None = None) -> list[str]:
    """``serve`` flags every test server shares: the policy and the serving pair; the rest is the test's."""
    from tests.conftest import POLICIES

    return ["--policy", str(policy or POLICIES), "--tls-cert", str(certs.cert), "--tls-key", str(certs.key), *extra]


_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii").split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _worker_index() -> int:
    """This pytest-xdist worker's number (``gw1`` -> 1); 0 outside a parallel run."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def _worker_count() -> int:
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    return max(1, int(count)) if count.isdigit() else 1


def _share() -> range:
    """The ports this process may hand out: below the ephemeral range, this worker's share of them."""
    low, _ = _ephemeral_range()
    pool = range(max(1024, low - 12_000), low) if low > 2048 else range(0)
    return pool[_worker_index() :: _worker_count()]


def free_port() -> int:
    """A loopback port that is free now and that no other caller in this session was given.

    The port is closed again before the server binds it, so two things could take it in between: a
    second call (``bind(("127.0.0.1", 0))`` may hand out the port it just released, and a server whose
    serving and metrics ports came out equal failed to start), and the kernel itself, which gives the
    same ephemeral range to every outgoing connection's local port. Ports below that range, never the
    same twice, avoid both. Parallel workers each have their own share of the range (port modulo the
    worker count), so one worker never hands out a port another worker just handed out."""
    pool = _share()
    for port in random.sample(pool, min(len(pool), 200)):
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    while True:  # a machine whose ephemeral range starts low: the kernel's pick, never one given before
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


# --- the apiserver-like client ------------------------------------------------------------------------


class _Connection(http.client.HTTPSConnection):
    """Dial 127.0.0.1 but verify (and send SNI for) the Service name, like the apiserver does."""

    def __init__(self, port: int, context: ssl.SSLContext, server_name: str, timeout: float):
        super().__init__("127.0.0.1", port, context=context, timeout=timeout)
        self._server_name = server_name
        self.handshakes = 0

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)
        self.handshakes += 1


def client_context(
    ca_files: Sequence[Path | str], client_cert: tuple[Path, Path] | None = None, **versions: Any
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    for ca in ca_files:
        ctx.load_verify_locations(cafile=str(ca))
    if client_cert is not None:
        ctx.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
    for key, value in versions.items():
        setattr(ctx, key, value)
    return ctx


class ApiserverClient:
    """One pooled keep-alive connection to the webhook, reopened only when the server closes it."""

    def __init__(
        self,
        port: int,
        ca_files: Sequence[Path | str],
        *,
        server_name: str = SERVICE_DNS,
        client_cert: tuple[Path, Path] | None = None,
        timeout: float = 10.0,
    ):
        self.context = client_context(ca_files, client_cert)
        self.conn = _Connection(port, self.context, server_name, timeout)

    @property
    def handshakes(self) -> int:
        return self.conn.handshakes

    def peer_serial(self) -> str:
        assert self.conn.sock is not None
        der = self.conn.sock.getpeercert(binary_form=True)
        from cryptography import x509

        return format(x509.load_der_x509_certificate(der).serial_number, "x")

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, http.client.HTTPResponse, bytes]:
        send = {"Accept": "application/json, */*"}
        if body is not None:
            send["Content-Type"] = "application/json"
        send.update(headers or {})
        self.conn.request(method, path, body=body, headers=send)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.will_close:
            self.conn.close()
        return resp.status, resp, data

    def post_review(self, endpoint: str, review: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, _, data = self.request("POST", f"/{endpoint}?timeout=10s", orjson.dumps(review))
        return status, orjson.loads(data)

    def get_json(self, path: str) -> tuple[int, dict[str, Any]]:
        status, _, data = self.request("GET", path)
        return status, orjson.loads(data)

    def close(self) -> None:
        self.conn.close()


# --- AdmissionReview helpers --------------------------------------------------------------------------


def review(
    obj: dict[str, Any] | None,
    *,
    namespace: str | None = "default",
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
    uid: str | None = None,
    user_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview as the apiserver sends it (request.kind/resource filled from the object);
    ``user_info`` is ``request.userInfo`` (default: user alice, group system:authenticated)."""
    api_version = (obj or old or {}).get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    kind = (obj or old or {}).get("kind", "Pod")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "operation": operation,
        "userInfo": user_info or {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    if namespace is not None:
        request["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}


def check_response(doc: dict[str, Any], sent: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """Everything the apiserver verifies (webhook-anchors §3), field by field; returns ``response``."""
    assert doc["apiVersion"] == sent["apiVersion"] == API_VERSION
    assert doc["kind"] == "AdmissionReview"
    response = doc["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    assert ("patch" in response) == ("patchType" in response), "patch and patchType go together"
    if "patch" in response:
        assert endpoint == "mutate", "a validating webhook may not return a patch"
        assert response["patchType"] == "JSONPatch"
        ops = orjson.loads(base64.b64decode(response["patch"], validate=True))
        assert isinstance(ops, list) and ops, "an empty patch must be omitted"
    if response["allowed"]:
        assert "status" not in response
    else:
        assert response["status"]["code"] == 403
        assert response["status"]["reason"] == "Forbidden"
        assert response["status"]["message"]
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and 0 < len(warning) <= 120
    assert all(isinstance(v, str) for v in response.get("auditAnnotations", {}).values())
    if endpoint == "mutate":
        assert "warnings" not in response, "warnings come from /validate"
    return response


def stored(client: ApiserverClient, obj: dict[str, Any], namespace: str | None = "default") -> dict[str, Any]:
    """The object the apiserver stores (and sends to ``/validate``): ``obj`` after our ``/mutate`` patch.

    ``/validate`` judges that object, so a class pod sent there without its mutation is rightly denied
    ``placement-missing``; tests about something else send what the apiserver would."""
    import jsonpatch

    sent = review(obj, namespace=namespace)
    status, doc = client.post_review("mutate", sent)
    assert status == 200, status
    ops = patch_ops(check_response(doc, sent, "mutate"))
    return jsonpatch.apply_patch(obj, ops) if ops else obj


def patch_ops(response: dict[str, Any]) -> list[dict[str, Any]]:
    return orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []


# --- the server subprocess ----------------------------------------------------------------------------


class ServerProcess:
    """``python -m webhook serve`` on free loopback ports; JSON log captured to a file."""

    def __init__(
        self, workdir: Path, args: Sequence[str], *, ca_files: Sequence[Path | str], env: dict[str, str] | None = None
    ):
        self.workdir = workdir
        self.port = free_port()
        self.metrics_port = free_port()
        self.args = [
            "--bind",
            f"127.0.0.1:{self.port}",
            "--metrics-bind",
            f"127.0.0.1:{self.metrics_port}",
            *args,
        ]
        self.ca_files = list(ca_files)
        self.env = env or {}
        self.log_path = workdir / f"server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, wait_ready: bool = True, timeout: float = 30.0) -> ServerProcess:
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "PROMETHEUS_MULTIPROC_DIR" and not k.startswith("GPU_ADMISSION_")
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        env.update(self.env)
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the server process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", *self.args],
            cwd=self.workdir,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def client(self, **kwargs: Any) -> ApiserverClient:
        return ApiserverClient(self.port, self.ca_files, **kwargs)

    def wait_ready(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                client = self.client(timeout=2.0)
            except OSError as exc:  # the CA file may not exist yet (development certificates)
                last = exc
                time.sleep(0.05)
                continue
            try:
                status, body = client.get_json("/readyz")
                if status == 200:
                    return body
                last = body
            except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
                last = exc
            finally:
                client.close()
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout}s: {last}\n{self.output()}")

    def metrics(self) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def wait_metric(self, name: str, minimum: float, timeout: float = 5.0, **labels: str) -> float:
        """``metric`` once it reaches ``minimum``: workers publish request metrics in batches, once a
        second (``RequestTally``), so a scrape right after a review may not count it yet."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.metric(name, **labels)
            if value >= minimum or time.monotonic() > deadline:
                return value
            time.sleep(0.1)

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.output().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                record = orjson.loads(line)
                if isinstance(record, dict):
                    out.append(record)
        return out

    def decisions(self, uid: str | None = None, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Decision lines (of ``uid``). A worker writes them in batches, up to
        ``webhook.server.logs.DECISION_FLUSH_DELAY`` after the answer, so a uid's lines are waited for."""
        deadline = time.monotonic() + timeout
        while True:
            found = [
                r
                for r in self.log_records()
                if r.get("logger") == "gpu_admission.decision" and (uid is None or r.get("uid") == uid)
            ]
            if found or uid is None or time.monotonic() > deadline:
                return found
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its handle
            rc = self.proc.wait()
        self.log.close()
        return rc


@contextlib.contextmanager
def running(server: ServerProcess) -> Iterator[ServerProcess]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- files the way Kubernetes mounts them --------------------------------------------------------------


class AtomicDir:
    """A directory updated like a ConfigMap/Secret volume: files are symlinks into ``..data``, which
    points at a timestamped directory; an update writes a new directory and swaps ``..data`` with a
    rename (atomic), so readers never see a mix of old and new files."""

    def __init__(self, path: Path):
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self.generation = 0

    def write(self, files: dict[str, bytes]) -> None:
        self.generation += 1
        target = self.path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data)
        tmp = self.path / "..data_tmp"
        tmp.symlink_to(target.name)
        old = (self.path / "..data").resolve() if (self.path / "..data").exists() else None
        os.replace(tmp, self.path / "..data")
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        if old is not None and old.name != target.name:
            shutil.rmtree(old, ignore_errors=True)


def eventually(check: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Wait for an event (a watch delivering, a reload landing), with room for a loaded CI machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def kube_api(url: str, api: str = "CoreV1Api") -> Any:
    """A real kubernetes-client API object talking plain HTTP to a fake apiserver at ``url``."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url
    return getattr(client, api)(client.ApiClient(configuration))


def kubeconfig_for(tmp_path: Path, url: str) -> Path:
    """A kubeconfig that points the real ``kubernetes`` client at a fake apiserver on loopback."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: fake, user: u}}]\ncurrent-context: c\n"
    )
    return path


def cluster_server(tmp_path: Path, certs: Any, url: str, threads: int = 2) -> ServerProcess:
    """One gunicorn worker in cluster mode: namespaces watched (and objects read) through the fake
    apiserver at ``url``."""
    return ServerProcess(
        tmp_path,
        serve_args(
            certs,
            "--namespace-labels",
            "cluster",
            "--kubeconfig",
            str(kubeconfig_for(tmp_path, url)),
            "--workers",
            "1",
            "--threads",
            str(threads),
        ),
        ca_files=[certs.ca_cert],
    )
