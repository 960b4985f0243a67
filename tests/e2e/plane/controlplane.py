"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-scheduler, no kubelet.

What controller-runtime's envtest and kwok do, for our tests: etcd with fsync off, a kube-apiserver with
the default admission plugins (less ``ServiceAccount``: no controller makes the ``default`` service
accounts), client-certificate users (CN = user, O = groups), ``Node,RBAC`` authorization and a
service-account issuer (so TokenRequest works and the webhook can run with its ServiceAccount's
token), and a kube-scheduler that authenticates as ``system:kube-scheduler``. Every process is started
in its own session and its PID written to ``pids`` in the plane's directory; :func:`stop` (or
``python -m tests.e2e.plane down DIR``) ends exactly those, never anything found by name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_CIDR = "10.0.0.0/24"
ADMIN = ("plane-admin", ("system:masters",))
SCHEDULER = ("system:kube-scheduler", ())
START_TIMEOUT = 120.0


class PlaneError(RuntimeError):
    """A component did not come up; the message names it and shows the tail of its log."""


def free_port() -> int:
    """A loopback port below the ephemeral range, never handed out twice, this worker's share under
    pytest-xdist (``tests.server.support.free_port``): a port the kernel picked for ``bind(0)`` and that
    was closed again can be taken by any outgoing connection before the component binds it."""
    from tests.server.support import free_port as below_ephemeral

    return below_ephemeral()


# --- certificates -----------------------------------------------------------------------------------------


def _pem_key(key: Any) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class CA:
    """The plane's one CA: it signs the apiserver's serving certificate and every client certificate."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def new(cls) -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-admission-e2e-ca")])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )  # fmt: skip
        return cls(cert, key)

    @classmethod
    def load(cls, directory: Path) -> CA:
        cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(cert, key)

    def save(self, directory: Path) -> None:
        (directory / "ca.crt").write_bytes(_pem_cert(self.cert))
        _write_secret(directory / "ca.key", _pem_key(self.key))

    def issue(
        self, cn: str, orgs: tuple[str, ...] = (), *, server: bool = False, sans: tuple[str, ...] = ()
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) for a client user (CN, O = groups) or, with ``server``, a serving cert."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
        now = datetime.now(UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )  # fmt: skip
        if sans:
            names: list[x509.GeneralName] = []
            for san in sans:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(san)))
                except ValueError:
                    names.append(x509.DNSName(san))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)


def _write_secret(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def kubeconfig(server: str, ca_pem: bytes, *, cert: bytes | None = None, key: bytes | None = None,
               token: str | None = None, name: str = "user") -> str:  # fmt: skip
    """A kubeconfig (JSON is YAML) for one user of the plane: a client certificate or a bearer token."""
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    user: dict[str, Any] = {}
    if cert is not None and key is not None:
        user = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    if token is not None:
        user = {"token": token}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
            "current-context": "e2e",
        },
        indent=1,
    )


# --- the plane --------------------------------------------------------------------------------------------


@dataclass
class Plane:
    """A running plane: where its files are, how to reach it, and the processes it started."""

    directory: Path
    bin_dir: Path
    server: str  # https://127.0.0.1:PORT
    admin_kubeconfig: Path
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def ca(self) -> CA:
        return CA.load(self.directory)

    @property
    def ca_pem(self) -> bytes:
        return (self.directory / "ca.crt").read_bytes()

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for a client-certificate user (the apiserver sees CN as the name, O as the groups)."""
        slug = "-".join([user, *groups]).replace(":", "_").replace("/", "_")
        path = self.directory / "users" / f"{slug}.kubeconfig"
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            cert, key = self.ca.issue(user, groups)
            _write_secret(path, kubeconfig(self.server, self.ca_pem, cert=cert, key=key, name=user).encode())
        return path

    def token_kubeconfig(self, token: str, name: str) -> Path:
        path = self.directory / "users" / f"{name}.kubeconfig"
        path.parent.mkdir(exist_ok=True)
        _write_secret(path, kubeconfig(self.server, self.ca_pem, token=token, name=name).encode())
        return path

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, input: str | None = None, check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def metrics(self) -> str:
        """The apiserver's /metrics text (admission, CEL and match-condition counters)."""
        return self.kubectl("get", "--raw", "/metrics").stdout

    def stop(self) -> None:
        stop(self.directory)


def _ssl_context(directory: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    ctx.load_cert_chain(directory / "admin.crt", directory / "admin.key")
    return ctx


def _wait_http(url: str, name: str, log: Path, proc: subprocess.Popen, ctx: ssl.SSLContext | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PlaneError(f"{name} exited with {proc.returncode}; {log}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise PlaneError(f"{name} was not ready within {START_TIMEOUT:.0f} s ({last}); {log}:\n{_tail(log)}")


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _spawn(directory: Path, name: str, argv: list[str]) -> subprocess.Popen:
    log = open(directory / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=directory)  # fmt: skip
    log.close()
    with open(directory / "pids", "a") as f:
        f.write(f"{name} {proc.pid}\n")
    return proc


# Scheduler profiles beyond the default: the names the shipped sharing stacks and gang backends set in
# ``schedulerName``. Each is a stand-in that runs kube-scheduler's default filters under that name (no
# gang, no vGPU accounting), so a pod we hand to "volcano" is still bound, by the same filters, and a
# wrong resource name, count or selector still leaves it Pending.
STAND_IN_SCHEDULERS = ("volcano", "hami-scheduler")


def scheduler_config(kubeconfig_path: Path, names: tuple[str, ...]) -> str:
    profiles = [{"schedulerName": "default-scheduler"}, *({"schedulerName": n} for n in names)]
    return json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig_path)},
        "leaderElection": {"leaderElect": False},
        "profiles": profiles,
    })  # fmt: skip


def start(
    directory: Path, bin_dir: Path, schedulers: tuple[str, ...] = STAND_IN_SCHEDULERS, *, scheduler: bool = True,
    profiling: bool = False,
) -> Plane:
    """etcd, then kube-apiserver (ready), then kube-scheduler (healthy); on any failure, all are stopped.

    ``scheduler=False`` leaves kube-scheduler out (a benchmark of admission alone, where it would compete
    for the same cores); ``profiling=True`` serves the apiserver's ``/debug/pprof`` (where its time goes,
    ``bench/cluster_cost.py --profile``)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "pids").exists():
        stop(directory)
    ca = CA.new()
    ca.save(directory)
    cert, key = ca.issue("kube-apiserver", server=True,
                         sans=("127.0.0.1", "localhost", "10.0.0.1", "kubernetes.default.svc"))  # fmt: skip
    (directory / "apiserver.crt").write_bytes(cert)
    _write_secret(directory / "apiserver.key", key)
    admin_cert, admin_key = ca.issue(ADMIN[0], ADMIN[1])
    (directory / "admin.crt").write_bytes(admin_cert)
    _write_secret(directory / "admin.key", admin_key)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_secret(directory / "sa.key", _pem_key(sa_key))
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    etcd_port, peer_port, api_port, sched_port = free_port(), free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    admin_kc = directory / "admin.kubeconfig"
    admin = kubeconfig(server, _pem_cert(ca.cert), cert=admin_cert, key=admin_key, name="admin")
    _write_secret(admin_kc, admin.encode())
    sched_cert, sched_key = ca.issue(SCHEDULER[0])
    sched_kc = directory / "scheduler.kubeconfig"
    _write_secret(sched_kc, kubeconfig(server, _pem_cert(ca.cert), cert=sched_cert, key=sched_key,
                                       name="scheduler").encode())  # fmt: skip
    plane = Plane(directory, bin_dir, server, admin_kc)
    try:
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = _spawn(directory, "etcd", [
            str(bin_dir / "etcd"), "--data-dir", str(directory / "etcd-data"), "--name", "e2e",
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"e2e={peer_url}", "--unsafe-no-fsync=true", "--log-level", "warn",
        ])  # fmt: skip
        plane.pids["etcd"] = etcd.pid
        _wait_http(f"{etcd_url}/health", "etcd", directory / "etcd.log", etcd, None)
        api = _spawn(directory, "kube-apiserver", [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--tls-cert-file={directory / 'apiserver.crt'}", f"--tls-private-key-file={directory / 'apiserver.key'}",
            f"--client-ca-file={directory / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={directory / 'sa.pub'}",
            f"--service-account-signing-key-file={directory / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--disable-admission-plugins=ServiceAccount",
            f"--cert-dir={directory / 'apiserver-certs'}",
            f"--profiling={'true' if profiling else 'false'}",
            "--v=1",
        ])  # fmt: skip
        plane.pids["kube-apiserver"] = api.pid
        _wait_http(f"{server}/readyz", "kube-apiserver", directory / "kube-apiserver.log", api,
                   _ssl_context(directory))  # fmt: skip
        if scheduler:
            (directory / "scheduler.json").write_text(scheduler_config(sched_kc, schedulers))
            sched = _spawn(directory, "kube-scheduler", [
                str(bin_dir / "kube-scheduler"), f"--config={directory / 'scheduler.json'}",
                f"--authentication-kubeconfig={sched_kc}", f"--authorization-kubeconfig={sched_kc}",
                "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
                f"--cert-dir={directory / 'scheduler-certs'}", "--v=1",
            ])  # fmt: skip
            plane.pids["kube-scheduler"] = sched.pid
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            _wait_http(f"https://127.0.0.1:{sched_port}/healthz", "kube-scheduler",
                       directory / "kube-scheduler.log", sched, insecure)  # fmt: skip
    except BaseException:
        stop(directory)
        raise
    (directory / "plane.json").write_text(json.dumps({"server": server, "bin_dir": str(bin_dir)}))
    return plane


def attach(directory: Path) -> Plane:
    """The plane a previous ``up`` started in ``directory``."""
    info = json.loads((directory / "plane.json").read_text())
    pids = {}
    for line in (directory / "pids").read_text().splitlines():
        name, pid = line.split()
        pids[name] = int(pid)
    return Plane(directory, Path(info["bin_dir"]), info["server"], directory / "admin.kubeconfig", pids)


def stop(directory: Path, grace: float = 10.0) -> None:
    """End the processes this plane started (by the PIDs it wrote), newest first: SIGTERM, then SIGKILL."""
    pid_file = directory / "pids"
    if not pid_file.exists():
        return
    pids = [int(line.split()[1]) for line in pid_file.read_text().splitlines() if line.strip()]
    for pid in reversed(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in reversed(pids):
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    pid_file.unlink()


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child (a developer's `down` from another shell): ask the kernel
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie whose parent is gone is as good as dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False
