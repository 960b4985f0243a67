"""The kustomize base and overlays: they render, they are schema-valid, and they keep the contract.

Schema: every object of a built-in kind is validated strictly (unknown fields fail) against the
Kubernetes 1.30 and 1.37 OpenAPI schemas; only kinds kubernetes-validate has no schema for
(cert-manager CRs) are skipped, and the test asserts exactly which ones were.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import POLICIES, ROOT
from tests.deploy.conftest import MANIFESTS, MUTATING, NAMESPACE, VALIDATING, one, render, render_policy

K8S_VERSIONS = ("1.30.0", "1.37.0")
NO_SCHEMA = {"base": set(), "self-signed": set(), "cert-manager": {"Certificate", "Issuer"}}


def test_root_renders_the_base():
    root, base = render("root"), render("base")
    assert root == base
    kinds = {d["kind"] for d in base}
    assert kinds >= {
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
        "PodDisruptionBudget", "Service", "ConfigMap", "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration", "PriorityClass", "NetworkPolicy",
    }  # fmt: skip


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_builtin_kinds_are_schema_valid(rendered, version):
    name, docs = rendered
    skipped: set[str] = set()
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            skipped.add(doc["kind"])
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {exc}")
    assert skipped == NO_SCHEMA[name]


def test_strict_validation_is_live():
    """Guard against a validator that silently accepts everything: an unknown field must fail."""
    dep = copy.deepcopy(one(render("base"), "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True  # typo'd key
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, "1.30.0", strict=True)


def test_every_namespaced_object_is_in_the_webhook_namespace(rendered):
    _, docs = rendered
    cluster_scoped = {
        "Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }  # fmt: skip
    for doc in docs:
        if doc["kind"] in cluster_scoped:
            assert "namespace" not in doc["metadata"]
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


# --- policies ConfigMap -----------------------------------------------------------------------------


def test_the_cli_renders_what_the_deploy_tests_build_on(capsys):
    """`gpu-admission policy render DIR` prints exactly what these tests put into base/rendered.yaml."""
    from webhook.cli import main

    assert main(["policy", "render", str(POLICIES)]) == 0
    assert capsys.readouterr().out == render_policy(POLICIES)


def test_kustomize_carries_every_rendered_object():
    """What `policy render` produces reaches the cluster through the base unchanged (labels aside)."""
    import yaml

    rendered = [d for d in yaml.safe_load_all(render_policy(POLICIES)) if d]
    docs = render("root")
    kinds = {d["kind"] for d in rendered}
    assert {"PriorityClass", "NetworkPolicy", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    for want in rendered:
        got = copy.deepcopy(one(docs, want["kind"], want["metadata"]["name"]))
        assert got["metadata"]["labels"].pop("app.kubernetes.io/part-of") == "gpu-admission"
        assert got == want, f"{want['kind']}/{want['metadata']['name']} changed on its way through kustomize"


def test_every_priority_class_the_policy_names_is_installed(policy):
    docs = render("base")
    installed = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PriorityClass"}
    named = {c.priority_class_name for c in policy.classes.values() if c.priority_class_name}
    assert named and named <= set(installed), named - set(installed)
    batch = installed[policy.classes["batch"].priority_class_name]
    assert batch["preemptionPolicy"] == "Never"
    assert batch["value"] == min(p["value"] for p in installed.values())
    assert installed[policy.classes["inference"].priority_class_name]["value"] == max(
        p["value"] for p in installed.values()
    )
    assert not any(p["globalDefault"] for p in installed.values())


def test_policy_configmap_holds_every_policy_file():
    cm = one(render("base"), "ConfigMap", "gpu-admission-policy")
    assert set(cm["data"]) == {p.name for p in POLICIES.glob("*.yaml")}
    for fname, text in cm["data"].items():
        assert text == (POLICIES / fname).read_text()


# --- Deployment, Service, PDB ----------------------------------------------------------------------


def _container(dep: dict[str, Any]) -> dict[str, Any]:
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return container


def _arg(container: dict[str, Any], flag: str) -> str:
    for arg in container["args"]:
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1].split()[0]
    raise AssertionError(f"{flag} not in args")


def test_deployment_is_highly_available_and_hardened():
    docs = render("base")
    dep = one(docs, "Deployment")
    spec, pod = dep["spec"], dep["spec"]["template"]["spec"]
    c = _container(dep)
    assert spec["replicas"] >= 3
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert {t["topologyKey"] for t in pod["topologySpreadConstraints"]} >= {"kubernetes.io/hostname"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["args"][0] == "serve"

    # Writable paths on a read-only root: /tmp, /dev/shm (gunicorn worker tmp), the prometheus dir.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    prom = next(e["value"] for e in c["env"] if e["name"] == "PROMETHEUS_MULTIPROC_DIR")
    for path in ("/tmp", "/dev/shm", prom):
        assert "emptyDir" in volumes[mounts[path]["name"]], path
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    # Hot reload needs directory mounts: a subPath mount never sees ConfigMap/Secret updates.
    assert not any("subPath" in m for m in c["volumeMounts"])
    policy_dir, cert = _arg(c, "--policy"), _arg(c, "--tls-cert")
    assert "configMap" in volumes[mounts[policy_dir]["name"]]
    assert volumes[mounts[policy_dir]["name"]]["configMap"]["name"] == "gpu-admission-policy"
    tls_mount = mounts[cert.rsplit("/", 1)[0]]
    assert volumes[tls_mount["name"]]["secret"]["secretName"] == "gpu-admission-tls"
    assert _arg(c, "--tls-key").startswith(tls_mount["mountPath"])


def test_probes_and_shutdown_timing():
    c = _container(one(render("base"), "Deployment"))
    pod = one(render("base"), "Deployment")["spec"]["template"]["spec"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["scheme"], get["path"], get["port"]) == ("HTTPS", path, "https")
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    sleep, graceful = int(pre_stop[1]), int(_arg(c, "--graceful-timeout"))
    assert pod["terminationGracePeriodSeconds"] > sleep + graceful


def test_service_and_ports_line_up():
    docs = render("base")
    dep, svc = one(docs, "Deployment"), one(docs, "Service")
    c = _container(dep)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["https"] == int(_arg(c, "--bind").rsplit(":", 1)[1]) == 8443
    assert ports["http-metrics"] == int(_arg(c, "--metrics-bind").rsplit(":", 1)[1])
    by_port = {p["port"]: p for p in svc["spec"]["ports"]}
    assert by_port[443]["targetPort"] == "https"
    assert by_port[ports["http-metrics"]]["targetPort"] == "http-metrics"
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable")


# --- webhook configurations -------------------------------------------------------------------------

# the operator CRDs of the kind table: mutated at CREATE, validated at CREATE and UPDATE
OPERATOR_KINDS = {
    ("kubeflow.org", r) for r in ("pytorchjobs", "tfjobs", "paddlejobs", "xgboostjobs", "jaxjobs", "mpijobs")
} | {
    ("jobset.x-k8s.io", "jobsets"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("ray.io", "rayclusters"),
    ("ray.io", "rayjobs"),
    ("ray.io", "rayservices"),
    ("trainer.kubeflow.org", "trainjobs"),
}
SCALED_KINDS = {
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("kubeflow.org", "pytorchjobs"),  # training-operator release-1.9: Worker replicas
    ("kubeflow.org", "paddlejobs"),
    ("kubeflow.org", "jaxjobs"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),  # groups
}
VALIDATED_KINDS = {
    ("batch.volcano.sh", "cronjobs"),
    ("trainer.kubeflow.org", "trainingruntimes"),
    # DRA claims on their own: the scheduler's marker, device-taint tolerations, capacity requests
    ("resource.k8s.io", "resourceclaims"),
    ("resource.k8s.io", "resourceclaimtemplates"),
}
MUTATING_RULES = {("", "pods", "CREATE"), ("batch", "jobs", "CREATE"), ("batch.volcano.sh", "jobs", "CREATE")} | {
    (g, r, "CREATE") for g, r in OPERATOR_KINDS
}
VALIDATING_RULES = (
    {("", "pods", "CREATE"), ("", "pods", "UPDATE"), ("", "pods/ephemeralcontainers", "UPDATE")}
    | {(g, r, op) for g, r in (*OPERATOR_KINDS, *VALIDATED_KINDS) for op in ("CREATE", "UPDATE")}
    | {
        (g, r, op)
        for g, r in (("batch", "jobs"), ("batch.volcano.sh", "jobs"), ("batch", "cronjobs"))
        for op in ("CREATE", "UPDATE")
    }
    | {
        ("apps", r, op)
        for r in ("deployments", "statefulsets", "replicasets", "daemonsets")
        for op in ("CREATE", "UPDATE")
    }
    # the scale subresources of every kind whose size the gang rules read (their CRDs serve one)
    | {(g, f"{r}/scale", "UPDATE") for g, r in SCALED_KINDS}
)


def _rules(hook: dict[str, Any]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in hook["rules"]:
        assert rule["scope"] == "Namespaced"
        assert "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                for op in rule["operations"]:
                    out.add((g, r, op))
    return out


@pytest.mark.parametrize(
    ("kind", "name", "rules", "failure"),
    [
        ("MutatingWebhookConfiguration", MUTATING, MUTATING_RULES, "Ignore"),
        ("ValidatingWebhookConfiguration", VALIDATING, VALIDATING_RULES, "Fail"),
    ],
)
def test_webhook_configuration_contract(rendered, kind, name, rules, failure):
    _, docs = rendered
    cfg = one(docs, kind, name)
    svc = one(docs, "Service")
    (hook,) = cfg["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["failurePolicy"] == failure
    assert hook["matchPolicy"] == "Equivalent"
    if kind.startswith("Mutating"):
        assert hook["reinvocationPolicy"] == "IfNeeded"
    assert _rules(hook) == rules
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
    assert service["port"] == 443 and service["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("kubernetes.io/metadata.name", "NotIn")
    assert {"kube-system", NAMESPACE} <= set(expr["values"])
    assert "objectSelector" not in hook  # raw GPU requests carry no label: only matchConditions can select them
    conditions = hook["matchConditions"]
    assert 1 <= len(conditions) <= 64
    assert len({c["name"] for c in conditions}) == len(conditions)
    assert all(c["expression"].strip() for c in conditions)


def test_mutating_and_validating_share_their_gpu_conditions():
    docs = render("base")
    (mut,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    (val,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert val["matchConditions"][: len(mut["matchConditions"])] == mut["matchConditions"]


def test_base_leaves_ca_bundle_to_the_overlays():
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(render("base"), kind)["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]


# --- cert-manager overlay ---------------------------------------------------------------------------


def test_cert_manager_chain_and_injection():
    from webhook.certs.generate import service_sans

    docs = render("cert-manager")
    issuers = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Issuer"}
    certs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Certificate"}
    for doc in (*issuers.values(), *certs.values()):
        assert doc["apiVersion"] == "cert-manager.io/v1"
        assert doc["metadata"]["namespace"] == NAMESPACE
    # selfSigned Issuer -> CA Certificate -> CA Issuer -> serving Certificate
    selfsigned = [n for n, i in issuers.items() if i["spec"] == {"selfSigned": {}}]
    ca_issuers = {n: i for n, i in issuers.items() if "ca" in i["spec"]}
    assert len(selfsigned) == 1 and len(ca_issuers) == 1
    ((ca_issuer_name, ca_issuer),) = ca_issuers.items()
    (ca_cert,) = [c for c in certs.values() if c["spec"].get("isCA")]
    assert ca_cert["spec"]["issuerRef"]["name"] == selfsigned[0]
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    (serving,) = [c for c in certs.values() if not c["spec"].get("isCA")]
    assert serving["spec"]["issuerRef"]["name"] == ca_issuer_name
    assert serving["spec"]["issuerRef"]["kind"] == "Issuer"
    svc = one(docs, "Service")["metadata"]["name"]
    assert set(serving["spec"]["dnsNames"]) == set(service_sans(svc, NAMESPACE))
    assert "server auth" in serving["spec"]["usages"]
    for c in certs.values():
        assert re.fullmatch(r"\d+h", c["spec"]["duration"]) and re.fullmatch(r"\d+h", c["spec"]["renewBefore"])
        assert int(c["spec"]["renewBefore"][:-1]) < int(c["spec"]["duration"][:-1])
    # the Deployment mounts the Secret cert-manager writes, and cainjector is pointed at that Certificate
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert serving["spec"]["secretName"] in secrets
    want = f"{NAMESPACE}/{serving['metadata']['name']}"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert one(docs, kind)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == want


# --- self-signed overlay ----------------------------------------------------------------------------


def test_self_signed_job_generates_and_injects():
    docs = render("self-signed")
    image = _container(one(docs, "Deployment"))["image"]
    job, cron = one(docs, "Job"), one(docs, "CronJob")
    for pod in (job["spec"]["template"]["spec"], cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]):
        (c,) = pod["containers"]
        script = " ".join(c["args"])
        assert c["image"] == image
        assert pod["serviceAccountName"] == "gpu-admission-certs"
        assert "gpu-admission certs generate --service gpu-admission" in script
        assert "--secret gpu-admission-tls" in script and "--ca-secret gpu-admission-ca" in script
        assert "gpu-admission certs inject --ca /certs/ca.crt --keep-previous" in script
        assert f"--mutating {MUTATING} --validating {VALIDATING}" in script
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert job["spec"]["ttlSecondsAfterFinished"] > 0  # re-created (and re-run, idempotently) on upgrade
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


# --- Dockerfile -------------------------------------------------------------------------------------


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return dict(re.fullmatch(r"([a-z0-9\-]+)==(\S+)", line).groups() for line in lines if not line.startswith("#"))


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_dockerfile_pins_base_and_runtime_dependencies():
    from packaging.requirements import Requirement

    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", text).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim(-\w+)?", base), base
    assert "COPY constraints.txt /tmp/constraints.txt" in text
    assert re.search(r"pip install --constraint /tmp/constraints.txt \.", text)
    pins = _pins()
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        req = Requirement(dep)
        name = _normal(req.name)
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} violates pyproject {req.specifier}"
    assert re.search(r"^USER 10001", text, re.M)
    assert 'ENTRYPOINT ["gpu-admission"]' in text and '"serve"' in text


def test_constraints_pin_the_whole_runtime_closure():
    """Every package the pinned runtime dependencies require is pinned too, at a version they accept.

    Read from the installed metadata: a package installed at its pinned version tells what that
    version requires. (One installed at another version, after a newer release, says nothing about
    the pinned one, so its requirements are not followed.)"""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    pins = _pins()
    todo, seen, followed = ["gpu-admission"], set(), 0
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if name != "gpu-admission" and dist.version != pins.get(name):
            continue
        followed += 1
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = _normal(req.name)
            assert dep in pins, f"{dep} (required by {name}) is not pinned in constraints.txt"
            assert req.specifier.contains(pins[dep], prereleases=True), f"{dep}=={pins[dep]}: {name} needs {req}"
            todo.append(dep)
    assert followed > 1, "the pinned versions are installed here: the closure was followed"


def test_the_image_is_set_in_one_place():
    """One file names the registry image; every container that runs gpu-admission, in the base and in
    each overlay, gets it from there."""
    setting = yaml.safe_load((MANIFESTS / "image" / "kustomization.yaml").read_text())
    (image,) = setting["images"]
    want = f"{image['newName']}:{image['newTag']}"
    naming = [
        p.relative_to(ROOT)
        for p in MANIFESTS.rglob("*.yaml")
        if image["newName"] in p.read_text() or re.search(r"^\s*newTag:", p.read_text(), re.M)
    ]
    assert naming == [Path("manifests/image/kustomization.yaml")], naming
    for target in ("base", "cert-manager", "self-signed"):
        docs = render(target)
        pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")]
        pods += [d["spec"]["jobTemplate"]["spec"]["template"]["spec"] for d in docs if d["kind"] == "CronJob"]
        images = {c["image"] for pod in pods for c in pod["containers"] + pod.get("initContainers", [])}
        assert images == {want}, (target, images)
