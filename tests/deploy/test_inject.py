"""``certs inject`` and ``certs generate --secret`` through the real kubernetes client, against a stub.

The stub (``stub_apiserver``) is reached through a kubeconfig, so client configuration, URL layout,
content negotiation and error mapping are the kubernetes 37.x client's own.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography import x509

from tests.deploy.certutil import expired_ca
from tests.deploy.stub_apiserver import ADMISSION, SMP, StubAPIServer, start
from webhook.certs import bundle
from webhook.certs.generate import generate
from webhook.cli import main

MUT, VAL = "gpu-admission-mutating", "gpu-admission-validating"
MUT_PATH = f"{ADMISSION}/mutatingwebhookconfigurations/{MUT}"
VAL_PATH = f"{ADMISSION}/validatingwebhookconfigurations/{VAL}"


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    state = StubAPIServer()
    server = start(state)
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def ca(tmp_path) -> Path:
    return generate(tmp_path / "new", "gpu-admission", "gpu-admission").ca_cert


def _bundle(stub: StubAPIServer, path: str) -> dict[str, list[x509.Certificate]]:
    return {w["name"]: bundle.parse(w["clientConfig"].get("caBundle")) for w in stub.objects[path]["webhooks"]}


def _inject(tmp_path: Path, stub: StubAPIServer, ca: Path, *extra: str) -> int:
    kubeconfig = stub.kubeconfig(tmp_path)
    args = ["certs", "inject", "--ca", str(ca), "--mutating", MUT, "--validating", VAL, "--kubeconfig", str(kubeconfig)]
    return main([*args, *extra])


def test_inject_patches_every_webhook_by_name(tmp_path, stub, ca, capsys):
    stub.add_webhook_config("mutating", MUT, ["mutate.gpu-admission.io"])
    stub.add_webhook_config("validating", VAL, ["validate.gpu-admission.io", "validate-controllers.gpu-admission.io"])
    assert _inject(tmp_path, stub, ca) == 0

    gets, patches = stub.calls("GET"), stub.calls("PATCH")
    assert [g.path for g in gets] == [MUT_PATH, VAL_PATH]
    assert [p.path for p in patches] == [MUT_PATH, VAL_PATH]
    for patch in patches:
        assert patch.content_type == SMP
        assert patch.query.get("fieldManager") == ["gpu-admission-certs"]
        assert set(patch.body) == {"webhooks"}
        for entry in patch.body["webhooks"]:
            assert set(entry) == {"name", "clientConfig"} and set(entry["clientConfig"]) == {"caBundle"}
    assert [w["name"] for w in patches[1].body["webhooks"]] == [
        "validate.gpu-admission.io",
        "validate-controllers.gpu-admission.io",
    ]
    want = bundle.parse(ca.read_bytes())
    for path in (MUT_PATH, VAL_PATH):
        assert all(certs == want for certs in _bundle(stub, path).values())
        # the strategic merge touched caBundle only: rules, policies and service are as they were
        for hook in stub.objects[path]["webhooks"]:
            assert hook["failurePolicy"] == "Fail" and hook["clientConfig"]["service"]["name"] == "gpu-admission"
    assert "patched mutatingwebhookconfiguration/gpu-admission-mutating" in capsys.readouterr().out


def test_keep_previous_appends_and_prunes(tmp_path, stub, ca):
    old = bundle.parse(generate(tmp_path / "old", "gpu-admission", "gpu-admission").ca_cert.read_bytes())
    current = bundle.to_b64([*old, expired_ca()])
    stub.add_webhook_config("mutating", MUT, ["mutate.gpu-admission.io"], ca_bundle=current)
    stub.add_webhook_config("validating", VAL, ["validate.gpu-admission.io"], ca_bundle=current)
    new = bundle.parse(ca.read_bytes())

    assert _inject(tmp_path, stub, ca, "--keep-previous") == 0
    for path in (MUT_PATH, VAL_PATH):
        assert list(_bundle(stub, path).values()) == [[*old, *new]]  # old kept, new appended, expired dropped
    # running it again changes nothing and sends no PATCH
    before = len(stub.calls("PATCH"))
    assert _inject(tmp_path, stub, ca, "--keep-previous") == 0
    assert len(stub.calls("PATCH")) == before
    # without --keep-previous the bundle is replaced by the new CA alone
    assert _inject(tmp_path, stub, ca) == 0
    for path in (MUT_PATH, VAL_PATH):
        assert list(_bundle(stub, path).values()) == [new]


def test_dry_run_prints_the_patch_and_sends_none(tmp_path, stub, ca, capsys):
    stub.add_webhook_config("mutating", MUT, ["mutate.gpu-admission.io"])
    stub.add_webhook_config("validating", VAL, ["validate.gpu-admission.io"])
    assert _inject(tmp_path, stub, ca, "--dry-run") == 0
    assert stub.calls("PATCH") == []
    out = capsys.readouterr().out
    assert f"PATCH mutatingwebhookconfiguration/{MUT} ({SMP})" in out
    first = out.split("\n", 1)[1]
    patch = json.loads(first[: first.index("\n}") + 2])
    (entry,) = patch["webhooks"]
    assert entry["name"] == "mutate.gpu-admission.io"
    assert base64.b64decode(entry["clientConfig"]["caBundle"]) == ca.read_bytes()


def test_missing_configuration_is_a_clear_error(tmp_path, stub, ca, capsys):
    stub.add_webhook_config("mutating", MUT, ["mutate.gpu-admission.io"])
    assert _inject(tmp_path, stub, ca) == 1
    err = capsys.readouterr().err
    assert f"validatingwebhookconfiguration '{VAL}': HTTP 404" in err


def test_bad_ca_file(tmp_path, stub, capsys):
    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate")
    assert _inject(tmp_path, stub, bad) == 2
    assert _inject(tmp_path, stub, tmp_path / "absent.crt") == 2
    assert stub.requests == []


# --- certs generate --secret/--ca-secret: the self-signed Job's persistence -------------------------


def _generate(tmp_path: Path, stub: StubAPIServer, out: Path) -> int:
    kubeconfig = str(stub.kubeconfig(tmp_path))
    return main(
        ["certs", "generate", "--service", "gpu-admission", "--namespace", "gpu-admission", "--out", str(out),
         "--secret", "gpu-admission-tls", "--ca-secret", "gpu-admission-ca", "--kubeconfig", kubeconfig]
    )  # fmt: skip


def test_generate_persists_and_restores_from_secrets(tmp_path, stub, capsys):
    secrets = "/api/v1/namespaces/gpu-admission/secrets"
    assert _generate(tmp_path, stub, tmp_path / "run1") == 0
    tls, ca = stub.objects[f"{secrets}/gpu-admission-tls"], stub.objects[f"{secrets}/gpu-admission-ca"]
    assert tls["type"] == "kubernetes.io/tls" and set(tls["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert ca["type"] == "Opaque" and set(ca["data"]) == {"ca.crt", "ca.key"}  # the CA key is not in the mounted Secret
    assert [r.method for r in stub.requests if r.method != "GET"] == ["POST", "POST"]

    # a fresh Job pod (empty dir): restores from the Secrets, keeps them, writes nothing
    capsys.readouterr()
    assert _generate(tmp_path, stub, tmp_path / "run2") == 0
    out = capsys.readouterr().out
    assert "kept the valid certificates" in out and "unchanged" in out
    assert [r.method for r in stub.requests if r.method != "GET"] == ["POST", "POST"]
    assert (tmp_path / "run2" / "tls.crt").read_bytes() == (tmp_path / "run1" / "tls.crt").read_bytes()
    assert (tmp_path / "run2" / "tls.key").stat().st_mode & 0o777 == 0o600

    # the serving Secret lost its key: the pair is re-issued under the same CA and PUT back
    del stub.objects[f"{secrets}/gpu-admission-tls"]["data"]["tls.key"]
    assert _generate(tmp_path, stub, tmp_path / "run3") == 0
    assert (tmp_path / "run3" / "ca.crt").read_bytes() == (tmp_path / "run1" / "ca.crt").read_bytes()
    assert stub.requests[-1].method == "PUT" and stub.requests[-1].path.endswith("/gpu-admission-tls")
    assert stub.objects[f"{secrets}/gpu-admission-tls"]["metadata"]["resourceVersion"] == "2"


def test_dry_run_from_the_rendered_manifests_needs_no_cluster(tmp_path, ca, capsys, monkeypatch):
    """`--dry-run --from-file` plans the patch from the shipped manifests: no kubeconfig, no API call."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    rendered = Path(__file__).resolve().parents[2] / "manifests" / "base" / "rendered.yaml"
    args = ["certs", "inject", "--ca", str(ca), "--mutating", MUT, "--validating", VAL, "--dry-run"]
    assert main([*args, "--from-file", str(rendered)]) == 0
    out = capsys.readouterr().out
    assert f"PATCH mutatingwebhookconfiguration/{MUT}" in out and f"PATCH validatingwebhookconfiguration/{VAL}" in out
    assert base64.b64encode(ca.read_bytes()).decode() in out
    assert main([*args[:-1], "--from-file", str(rendered)]) == 2, "a file can only be planned, never patched"
    assert main([*args, "--from-file", str(tmp_path / "absent.yaml")]) == 2
    (tmp_path / "other.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main([*args, "--from-file", str(tmp_path / "other.yaml")]) == 1
    assert f"{MUT!r} is not in the given file" in capsys.readouterr().err
