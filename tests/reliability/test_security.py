"""Security checks against the real server: TLS >= 1.2 only and no plaintext on the admission port;
``--client-ca`` accepts only certificates from that CA; no endpoint puts object contents into the
logs or the metrics; with it, only the client names listed are accepted; TLS 1.2 offers ECDHE with
AEAD ciphers only; errors raised by the HTTP layer before the app are JSON like every other error.

TLS 1.0/1.1: the client is set up to *offer* them (``@SECLEVEL=0``), and a control server in the
test proves that this client really can speak TLS 1.1 with this OpenSSL; only then does the
refusal by gpu-admission mean something. Where OpenSSL cannot speak TLS 1.1 at all, the test skips.
"""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.server import objects
from tests.server.client_certs import make_client_pki
from tests.server.support import (
    SERVICE_DNS,
    ApiserverClient,
    ServerProcess,
    check_response,
    client_context,
    review,
    running,
    serve_args,
)

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.security,
    pytest.mark.server,
    pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning"),
]


def _serve_args(certs: Any, *extra: str) -> list[str]:
    return serve_args(certs, "--workers", "1", "--threads", "4", "--namespace-labels", "none", *extra)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_certs) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("security"),
        _serve_args(server_certs, "--log-level", "debug"),
        ca_files=[server_certs.ca_cert],
    ).start()
    yield proc
    assert proc.stop() == 0


# --- TLS versions and plaintext ------------------------------------------------------------------


def _legacy_client(ca: Path, version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(ca))
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this OpenSSL offer pre-1.2 protocols at all
    ctx.minimum_version = version
    ctx.maximum_version = version
    return ctx


def _control_server_speaks(certs: Any, version: ssl.TLSVersion) -> bool:
    """Can this machine's OpenSSL do ``version`` at all? A throwaway permissive server answers."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    try:
        server_ctx.minimum_version = ssl.TLSVersion.TLSv1
    except (ValueError, ssl.SSLError):
        return False
    server_ctx.load_cert_chain(str(certs.cert), str(certs.key))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        try:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True):
                pass
        except (OSError, ssl.SSLError):
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            _legacy_client(certs.ca_cert, version).wrap_socket(raw, server_hostname=SERVICE_DNS) as tls,
        ):
            return tls.version() is not None
    except (OSError, ssl.SSLError):
        return False
    finally:
        t.join(5)
        listener.close()


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["TLSv1.0", "TLSv1.1"])
def test_tls_before_1_2_is_refused(server: ServerProcess, server_certs, version: ssl.TLSVersion):
    if not _control_server_speaks(server_certs, version):
        pytest.skip(f"this OpenSSL cannot negotiate {version.name} even with a permissive server")
    legacy = _legacy_client(server_certs.ca_cert, version)
    with (
        pytest.raises(ssl.SSLError) as refused,
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        legacy.wrap_socket(raw, server_hostname=SERVICE_DNS),
    ):
        pass
    text = str(refused.value).upper()
    assert "PROTOCOL_VERSION" in text or "UNSUPPORTED_PROTOCOL" in text or "WRONG_VERSION" in text, text


def test_tls_1_2_and_1_3_are_served(server: ServerProcess, server_certs):
    for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        ctx = _legacy_client(server_certs.ca_cert, version)
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls,
        ):
            assert tls.version() == name


@pytest.mark.parametrize("path", ["/mutate", "/validate", "/healthz"])
def test_plaintext_http_gets_no_answer(server: ServerProcess, path: str):
    body = orjson.dumps(review(objects.inference_pod(), namespace=objects.SERVING_NS))
    method = "GET" if path == "/healthz" else "POST"
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        answer = b""
        try:
            while chunk := raw.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert not answer.startswith(b"HTTP/"), f"no HTTP answer on the TLS port: {answer[:80]!r}"
    assert b"AdmissionReview" not in answer and b"status" not in answer


# --- client certificates -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory, server_certs) -> Iterator[tuple[ServerProcess, tuple, tuple]]:
    tmp = tmp_path_factory.mktemp("mtls")
    right_ca, right_cert, right_key = make_client_pki(
        tmp / "right",
        others={
            "kubelet": ("system:node:gpu-node-1", ()),  # a kubelet's certificate from the same CA
            "user": ("alice", ("alice.example.com",)),
            "san": ("webhook-caller", ("kube-apiserver",)),  # the accepted name as a DNS SAN
        },
    )
    _, other_cert, other_key = make_client_pki(tmp / "other", cn="kube-apiserver")  # same name, other CA
    proc = ServerProcess(tmp, _serve_args(server_certs, "--client-ca", str(right_ca)), ca_files=[server_certs.ca_cert])
    proc.client = lambda **kw: ApiserverClient(  # type: ignore[method-assign]  # readiness needs a client cert
        proc.port, [server_certs.ca_cert], client_cert=(right_cert, right_key), **kw
    )
    proc.start()
    yield proc, (right_cert, right_key), (other_cert, other_key)
    assert proc.stop() == 0


def _attempt(server: ServerProcess, ca: Path, client_cert: tuple | None) -> int:
    client = ApiserverClient(server.port, [ca], client_cert=client_cert)
    try:
        sent = review(objects.raw_gpu_pod())
        status, doc = client.post_review("validate", sent)
        check_response(doc, sent, "validate")
        return status
    finally:
        client.close()


def test_client_ca_rejects_a_client_without_a_certificate(mtls, server_certs):
    server, _, _ = mtls
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        _attempt(server, server_certs.ca_cert, None)


def test_client_ca_rejects_a_certificate_from_another_ca(mtls, server_certs):
    server, _, other = mtls
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)) as err:
        _attempt(server, server_certs.ca_cert, other)
    assert "CERTIFICATE" in str(err.value).upper() or isinstance(err.value, OSError)


def test_client_ca_accepts_the_right_certificate(mtls, server_certs):
    server, right, _ = mtls
    assert _attempt(server, server_certs.ca_cert, right) == 200


def _answer_to(server: ServerProcess, ca: Path, client_cert: tuple[Path, Path]) -> tuple[int, dict[str, Any]]:
    client = ApiserverClient(server.port, [ca], client_cert=client_cert)
    try:
        status, _, data = client.request("POST", "/validate?timeout=10s", orjson.dumps(review(objects.raw_gpu_pod())))
        return status, orjson.loads(data)
    finally:
        client.close()


@pytest.mark.parametrize("stem", ["kubelet", "user"])
def test_client_ca_refuses_other_names_from_the_same_ca(mtls, server_certs, stem: str):
    """The CA that signs the apiserver's client certificate often signs kubelets' and users' too:
    only the names in --client-names (default kube-apiserver) may call the webhook."""
    server, right, _ = mtls
    folder = right[0].parent
    status, body = _answer_to(server, server_certs.ca_cert, (folder / f"{stem}.crt", folder / f"{stem}.key"))
    assert status == 403 and body["code"] == 403 and "not accepted" in body["message"]
    assert "alice" not in body["message"] and "system:node" not in body["message"]


def test_client_ca_accepts_the_name_as_a_dns_san(mtls, server_certs):
    server, right, _ = mtls
    folder = right[0].parent
    assert _attempt(server, server_certs.ca_cert, (folder / "san.crt", folder / "san.key")) == 200


def test_client_names_flag_replaces_the_default(tmp_path, server_certs):
    ca, cert, key = make_client_pki(tmp_path / "pki", others={"caller": ("webhook-caller", ())})
    proc = ServerProcess(
        tmp_path,
        _serve_args(server_certs, "--client-ca", str(ca), "--client-names", "webhook-caller, other"),
        ca_files=[server_certs.ca_cert],
    )
    proc.client = lambda **kw: ApiserverClient(  # type: ignore[method-assign]
        proc.port, [server_certs.ca_cert], client_cert=(tmp_path / "pki/caller.crt", tmp_path / "pki/caller.key"), **kw
    )
    with running(proc):
        assert _attempt(proc, server_certs.ca_cert, (tmp_path / "pki/caller.crt", tmp_path / "pki/caller.key")) == 200
        status, _ = _answer_to(proc, server_certs.ca_cert, (cert, key))  # kube-apiserver is no longer listed
        assert status == 403


# --- TLS 1.2 cipher suites -----------------------------------------------------------------------


def test_tls_1_2_offers_only_ecdhe_with_aead(server: ServerProcess, server_certs):
    cbc = _legacy_client(server_certs.ca_cert, ssl.TLSVersion.TLSv1_2)
    cbc.set_ciphers("ECDHE+AES+SHA:ECDHE+AES+SHA256:AES128-SHA:AES256-SHA:AES128-SHA256")  # CBC suites only
    assert all(
        "GCM" not in c["name"] and "CHACHA" not in c["name"] for c in cbc.get_ciphers() if c["protocol"] != "TLSv1.3"
    )
    with (
        pytest.raises(ssl.SSLError) as refused,
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        cbc.wrap_socket(raw, server_hostname=SERVICE_DNS),
    ):
        pass
    assert "HANDSHAKE_FAILURE" in str(refused.value).upper() or "NO_SHARED_CIPHER" in str(refused.value).upper()
    aead = _legacy_client(server_certs.ca_cert, ssl.TLSVersion.TLSv1_2)
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        aead.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls,
    ):
        name, version, _ = tls.cipher()
        assert version == "TLSv1.2" and name.startswith("ECDHE-") and ("GCM" in name or "CHACHA20" in name), name


def test_tls_1_2_renegotiation_is_refused(server: ServerProcess, server_certs):
    """``openssl s_client`` asks for a renegotiation (its ``R`` command) on a TLS 1.2 connection: the
    server refuses it (a ``no_renegotiation`` alert), and the connection stays unusable for it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command on this machine")
    connect = ["-connect", f"127.0.0.1:{server.port}", "-servername", SERVICE_DNS]
    result = subprocess.run(
        [openssl, "s_client", *connect, "-tls1_2", "-CAfile", str(server_certs.ca_cert), "-no_ign_eof"],
        input=b"R\n",
        capture_output=True,
        timeout=30,
    )
    out = (result.stdout + result.stderr).decode(errors="replace")
    assert "Protocol  : TLSv1.2" in out or "Protocol: TLSv1.2" in out, out[-2000:]
    assert "RENEGOTIATING" in out, "the client asked for a renegotiation"
    assert "no renegotiation" in out.lower(), out[-2000:]
    assert result.returncode != 0


# --- errors from the HTTP layer are JSON ---------------------------------------------------------


def _raw_exchange(server: ServerProcess, server_certs: Any, request: bytes) -> bytes:
    ctx = client_context([server_certs.ca_cert])
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls,
    ):
        tls.sendall(request)
        answer = b""
        try:
            while chunk := tls.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError, ssl.SSLError):
            pass
    return answer


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}", 400),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\n{}", 400),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(150)) + b"\r\n", 431),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", 413),
    ],
    ids=[
        "bad-content-length",
        "two-content-lengths",
        "obs-fold",
        "header-too-large",
        "too-many-headers",
        "chunked",
        "too-large",
        "body-on-a-path-without-one",
    ],
)
def test_errors_before_the_app_are_json(server: ServerProcess, server_certs, request_bytes: bytes, code: int):
    answer = _raw_exchange(server, server_certs, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {code} ".encode()), head[:120]
    assert b"content-type: application/json" in head.lower()
    doc = orjson.loads(body)
    assert doc["code"] == code and doc["message"] and b"<html" not in body.lower()


# --- nothing from the object reaches the logs or the metrics -------------------------------------

SECRETS = {
    "env": "envsecret-7f3a9c2e51",
    "image": "imgsecret-51d0be77",
    "label": "labelsecret-c0ffee11",
    "label_key": "labelkeysecret-9e8d7c6b",
    "annotation": "annosecret-deadbeef42",
    "annotation_key": "annokeysecret-0badf00d",
    "args": "argsecret-feedface99",
    "gpu_memory": "gpumemsecret-12ab34cd",
}


def _secret_pod() -> dict[str, Any]:
    pod = objects.inference_pod()
    meta = pod["metadata"]
    meta["labels"]["team"] = SECRETS["label"]
    meta["labels"][f"example.com/{SECRETS['label_key']}"] = "x"
    meta["annotations"]["note"] = SECRETS["annotation"]
    meta["annotations"][f"example.com/{SECRETS['annotation_key']}"] = "y"
    container = pod["spec"]["containers"][0]
    container["env"].append({"name": "API_TOKEN", "value": SECRETS["env"]})
    container["image"] = f"registry.example.com/{SECRETS['image']}:1"
    container["args"] = ["--token", SECRETS["args"]]
    return pod


def _reviews_carrying_secrets() -> list[tuple[str, Any]]:
    pod = _secret_pod()
    bad_intent = _secret_pod()
    bad_intent["metadata"]["annotations"]["gpu-admission.io/gpu-memory"] = SECRETS["gpu_memory"]  # intent-invalid
    malformed = _secret_pod()
    malformed["spec"]["nodeSelector"] = [SECRETS["label"]]  # malformed-object
    training = objects.training_vcjob()
    training["metadata"]["annotations"]["note"] = SECRETS["annotation"]
    tpl = training["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    tpl["env"] = [{"name": "WANDB_API_KEY", "value": SECRETS["env"]}]
    wrong_op = review(_secret_pod(), namespace=objects.SERVING_NS)
    wrong_op["request"]["operation"] = "PATCH"
    cases: list[tuple[str, Any]] = []
    for endpoint in ("mutate", "validate"):
        for obj, ns in (
            (pod, objects.SERVING_NS),
            (bad_intent, objects.SERVING_NS),
            (malformed, "default"),
            (training, objects.TRAINING_NS),
        ):
            cases.append((endpoint, review(obj, namespace=ns)))
            cases.append((endpoint, review(obj, namespace=ns, operation="UPDATE", old=obj)))
            cases.append((endpoint, review(None, namespace=ns, operation="DELETE", old=obj)))
        cases.append((endpoint, wrong_op))
    return cases


def test_no_object_content_in_logs_or_metrics(server: ServerProcess):
    client = server.client()
    answered: set[int] = set()
    try:
        for endpoint, doc in _reviews_carrying_secrets():
            status, _, data = client.request("POST", f"/{endpoint}?timeout=10s", orjson.dumps(doc))
            answered.add(status)
            assert status in (200, 400), data[:300]
        # the same bodies as the wrong content type and as a truncated body: the 4xx paths log too
        body = orjson.dumps(review(_secret_pod(), namespace=objects.SERVING_NS))
        assert client.request("POST", "/mutate", body, {"Content-Type": "text/plain"})[0] == 415
        assert client.request("POST", "/validate", body[:-20])[0] == 400
        last = review(_secret_pod(), namespace=objects.SERVING_NS)
        assert client.post_review("validate", last)[0] == 200
    finally:
        client.close()
    assert answered == {200, 400}
    assert server.decisions(last["request"]["uid"]), "the last decision line is written: the log is complete"
    texts = {"log": server.output(), "metrics": server.metrics()}
    assert '"level":"debug"' in texts["log"], "the server ran at debug level: everything it logs is here"
    for where, text in texts.items():
        for field, secret in SECRETS.items():
            assert secret not in text, f"{field} value leaked into the {where}"
            encoded = base64.b64encode(secret.encode()).decode()[:12]
            assert encoded not in text, f"{field} value leaked (base64) into the {where}"
