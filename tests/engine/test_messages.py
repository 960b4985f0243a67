"""What kubectl shows: warnings put the fix first and fit in 120 characters (the full text stays in the
audit annotation), an entitlement denial names the label that would grant the class, typos in a class
or a quantity get a "did you mean"."""

from __future__ import annotations

import pytest

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, pod, run, violation
from webhook.engine.model.decision import WARNING_LIMIT, Action, Decision, Violation, short_warning


def _inference_without_limits() -> dict:
    return pod(intent("inference", gpu_memory="4Gi"), [container(requests={"cpu": "1", "memory": "1Gi"})])


def test_a_long_warning_leads_with_its_fix_and_fits(policy):
    decision = run(policy, _inference_without_limits())
    v = violation(decision, "inference-not-guaranteed")
    assert v.action is Action.WARN and len(v.render()) > WARNING_LIMIT  # the case that used to be cut
    _, _, fix = v.message.partition("; ")
    assert fix, "the message says how to fix it"
    (warning,) = [w for w in decision.warnings if w.startswith("[inference-not-guaranteed]")]
    assert len(warning) <= WARNING_LIMIT
    assert warning.startswith(f"[inference-not-guaranteed] {fix}"), warning
    assert decision.audit_annotations["inference-not-guaranteed"] == v.render(), "the full text is audited"


@pytest.mark.parametrize(
    "message",
    [
        "short problem; short fix",
        "x" * 300 + "; " + "set it so",
        "a problem; " + "a very long fix " * 12,
        "no fix given, only a long description " * 5,
        "",
    ],
)
def test_short_warning_always_fits_and_keeps_the_rule_id(message):
    text = short_warning("some-rule", message)
    assert len(text) <= WARNING_LIMIT and text.startswith("[some-rule] ")
    _, sep, fix = message.partition("; ")
    if sep and len(fix) < 80:
        assert text.startswith(f"[some-rule] {fix}")


def test_every_warning_of_a_decision_fits():
    long = "y" * 500
    decision = Decision(
        kind="Pod",
        name="p",
        operation="CREATE",
        violations=(Violation("raw-gpu-request", Action.WARN, "metadata.labels", f"{long}; {long}"),),
    )
    assert all(len(w) <= WARNING_LIMIT for w in decision.warnings)


def test_entitlement_denial_names_the_label_that_grants_the_class(tmp_path):
    from tests.conftest import POLICIES
    from webhook.policy import load_policy

    # training as an opt-in: granted by a label, left out of the catch-all rule
    text = (POLICIES / "default.yaml").read_text()
    catch_all = "      classes: [training, inference, batch, dev]\n"
    assert catch_all in text
    text = text.replace(catch_all, "      classes: [inference, batch, dev]\n").replace(
        "  namespaces:\n",
        "  namespaces:\n    - name: training-teams\n      selector:\n"
        "        matchLabels: {gpu-admission.io/tier: training}\n      classes: [training]\n",
        1,
    )
    (tmp_path / "p.yaml").write_text(text)
    opt_in = load_policy(tmp_path)
    decision = run(opt_in, pod(intent("training", gpus="8"), [container()]), labels={"team": "a"})
    v = violation(decision, "class-not-allowed")
    assert "gpu-admission.io/tier=training" in v.message, v.message
    assert "training-teams" in v.message


def test_entitlement_denial_in_a_restricted_namespace_says_its_labels_restrict_it(policy):
    serving = {"gpu-admission.io/tier": "serving"}
    decision = run(policy, pod(intent("training", gpus="8"), [container()]), labels=serving)
    v = violation(decision, "class-not-allowed")
    assert "(entitlement everyone-else)" in v.message and "change this namespace's labels" in v.message, v.message


def test_a_class_typo_gets_a_did_you_mean(policy):
    v = violation(run(policy, pod(intent("inferance"), [container()])), "intent-invalid")
    assert "did you mean 'inference'?" in v.message


@pytest.mark.parametrize(("typed", "meant"), [("4GB", "4Gi"), ("4gb", "4Gi"), ("16 GiB", "16Gi"), ("512MB", "512Mi")])
def test_a_quantity_typo_gets_a_did_you_mean(policy, typed, meant):
    v = violation(run(policy, pod(intent("inference", gpu_memory=typed), [container()])), "intent-invalid")
    assert f"did you mean {meant}" in v.message, v.message


def test_explain_never_breaks_a_label_key_across_lines(tmp_path, capsys):
    """``--explain`` wraps long rule messages; a key like gpu-admission.io/tier must stay whole, wherever
    the line happens to end (the namespace name's length moves the key along the line)."""
    import yaml

    from webhook.cli import main

    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod(intent("training", gpus="8"), [container()])))
    for length in range(1, 40):
        ns = "n" * length
        (tmp_path / "ns.yaml").write_text(yaml.safe_dump({ns: {"gpu-admission.io/tier": "serving"}}))
        args = ["check", str(path), "--explain", "--policy", str(POLICIES), "--namespace", ns]
        main([*args, "--namespaces", str(tmp_path / "ns.yaml")])
        out = capsys.readouterr().out
        assert "class-not-allowed" in out
        for line in out.splitlines():
            assert not line.rstrip().endswith(("gpu-", "gpu-admission.io/", "gpu-admission.")), (length, line)


def test_an_entitlement_by_namespace_name_is_not_a_label_to_set(tmp_path):
    """``kubernetes.io/metadata.name`` is the namespace's name, set by the apiserver: the fix is to run the
    workload in that namespace or to grant the class, never to "set the label" or "change the labels"."""
    from webhook.policy import load_policy

    text = (POLICIES / "default.yaml").read_text().replace(
        "  namespaces:\n",
        "  namespaces:\n    - name: ml-team\n      selector:\n"
        "        matchLabels: {kubernetes.io/metadata.name: ml}\n      classes: [training]\n"
        "    - name: research\n      selector:\n        matchExpressions:\n"
        "        - {key: kubernetes.io/metadata.name, operator: In, values: [lab-a, lab-b]}\n"
        "      classes: [training]\n",
        1,
    ).replace("classes: [training, inference, batch, dev]", "classes: [inference, batch, dev]")
    (tmp_path / "p.yaml").write_text(text)
    by_name = load_policy(tmp_path)
    decision = run(by_name, pod(intent("training", gpus="8"), [container()]), labels={"team": "a"})
    v = violation(decision, "class-not-allowed")
    assert "kubernetes.io/metadata.name=" not in v.message and "set it" not in v.message, v.message
    assert "only namespace ml (entitlement ml-team) gets it" in v.message, v.message
    assert "run the workload there, or ask the platform team to grant the class to this namespace" in v.message
