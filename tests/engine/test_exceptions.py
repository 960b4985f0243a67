"""Policy exceptions (SPEC §14) in the engine: who they hold for, when, where, and the grant chain through
controllers, with every forgery a tenant with create rights on Pods and Deployments could try.

The policy is ``tests/engine/policies/exceptions`` (its own platform, exceptions in a second file). The
objects go through the engine the way the server calls it: ``/mutate`` (the ``mutate`` entry) writes the
grants, the patched object is what the apiserver stores, ``/validate`` (``Stage.STORED``) judges it.
"""

from __future__ import annotations

import copy
from datetime import date
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from webhook import engine
from webhook.engine import Decision, Request, Stage, explain, report
from webhook.engine.model.grants import GRANT_NAME, GrantKeys, issue, read_grants
from webhook.engine.model.requester import Requester
from webhook.policy import PolicyError, load_policy, load_policy_texts

POLICY_DIR = Path(__file__).parent / "policies" / "exceptions"
NS = "diag"
LABELS = {"team": "diag"}
TODAY = date(2026, 12, 3)
KEYS = GrantKeys((b"test-grant-key-0123456789abcdef",))
GRANT = f"gpu-admission.io/{GRANT_NAME}"

ALICE = Requester("alice", ("system:authenticated",))
MALLORY = Requester("mallory", ("system:authenticated", "tenants"))
DEPLOYER = Requester("system:serviceaccount:ci:deployer", ("system:serviceaccounts", "system:serviceaccounts:ci"))
DEPLOYMENT_CONTROLLER = Requester("system:serviceaccount:kube-system:deployment-controller")
REPLICASET_CONTROLLER = Requester("system:serviceaccount:kube-system:replicaset-controller")
JOB_CONTROLLER = Requester("system:serviceaccount:kube-system:job-controller")
CRONJOB_CONTROLLER = Requester("system:serviceaccount:kube-system:cronjob-controller")


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICY_DIR)


def privileged(name: str = "dcgm") -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/cloud-native/dcgm:3.3.5",
        "securityContext": {"privileged": True},
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }


def pod_spec() -> dict[str, Any]:
    return {"containers": [privileged()], "serviceAccountName": "deployer"}


def a_pod(name: str = "diag", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": pod_spec()}


def a_deployment(name: str = "dcgm") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec()},
        },
    }


def judge(
    policy, obj, who: Requester | None, *, today: date | None = TODAY, keys=KEYS, entry=report, **kw: Any
) -> Decision:
    """``/validate``: the object as stored, judged for the requester (``entry``: ``explain`` for the trace)."""
    return entry(
        policy,
        Request(
            obj,
            namespace=NS,
            namespace_labels=LABELS,
            requester=who,
            today=today,
            grant_keys=keys,
            stage=Stage.STORED,
            **kw,
        ),
    )


def mutate(policy, obj, who: Requester | None, **kw: Any) -> dict[str, Any]:
    """``/mutate`` and the apiserver applying its patch: what gets stored."""
    decision = engine.mutate(
        policy, Request(obj, namespace=NS, namespace_labels=LABELS, requester=who, today=TODAY, grant_keys=KEYS, **kw)
    )
    return jsonpatch.apply_patch(obj, list(decision.patch)) if decision.patch else copy.deepcopy(obj)


def verdict(decision: Decision, rule: str = "privileged-gpu") -> tuple[str, str | None]:
    (v,) = [v for v in decision.violations if v.rule == rule]
    return v.action.value, v.exception


def grant_of(template_holder: dict[str, Any]) -> str:
    return template_holder["metadata"]["annotations"][GRANT]


def replicaset_of(deployment: dict[str, Any], hash_: str = "7c9f5d8b4") -> dict[str, Any]:
    """What the deployment controller creates: the template, the pod-template-hash label, an owner."""
    name = deployment["metadata"]["name"]
    template = copy.deepcopy(deployment["spec"]["template"])
    template["metadata"].setdefault("labels", {})["pod-template-hash"] = hash_
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{hash_}",
            "namespace": NS,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": "d-1",
                                 "controller": True}],
        },
        "spec": {"replicas": 1, "selector": {"matchLabels": template["metadata"]["labels"]}, "template": template},
    }  # fmt: skip


def pod_of(owner: dict[str, Any], template: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a controller creates from ``owner``'s template (generateName, owner reference)."""
    template = copy.deepcopy(template if template is not None else owner["spec"]["template"])
    name = owner["metadata"]["name"]
    meta = {**template.get("metadata", {}), "generateName": f"{name}-", "namespace": NS}
    meta["ownerReferences"] = [
        {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": name, "uid": "o-1", "controller": True}
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def placed(policy, pod: dict[str, Any], who: Requester) -> dict[str, Any]:
    return mutate(policy, pod, who)  # the raw request is pinned onto the pool, as the apiserver stores it


# --- who: users, groups, service accounts -------------------------------------------------------------------


def test_a_user_subject_is_excepted_and_the_finding_is_an_audit_entry_naming_the_exception(policy):
    d = judge(policy, placed(policy, a_pod(), ALICE), ALICE)
    assert d.allowed
    assert verdict(d) == ("audit", "dcgm-diag")
    assert verdict(d, "raw-gpu-request") == ("audit", "dcgm-diag")  # a warn-level rule is excepted too
    notes = d.audit_annotations
    assert notes["exceptions"] == "dcgm-diag: privileged-gpu, raw-gpu-request"
    assert notes["privileged-gpu"].endswith("[exception dcgm-diag]")
    assert not d.warnings  # nothing silently dropped: the finding moved from warning to audit


def test_everyone_else_meets_the_rule(policy):
    d = judge(policy, placed(policy, a_pod(), MALLORY), MALLORY)
    assert not d.allowed and verdict(d) == ("deny", None)
    assert "exceptions" not in d.audit_annotations


def test_a_group_subject_matches_through_the_requesters_groups(policy):
    who = Requester("dave", ("system:authenticated", "gpu-diagnostics"))
    assert verdict(judge(policy, placed(policy, a_pod(), who), who)) == ("audit", "dcgm-diag")


def test_a_service_account_subject_matches_its_username_only_in_its_own_namespace(policy):
    assert verdict(judge(policy, placed(policy, a_pod(), DEPLOYER), DEPLOYER)) == ("audit", "dcgm-diag")
    other = Requester("system:serviceaccount:team-b:deployer", ("system:serviceaccounts",))
    assert verdict(judge(policy, placed(policy, a_pod(), other), other)) == ("deny", None)
    # a user who calls himself by the service account's short name is not the service account
    named = Requester("deployer", ("system:serviceaccounts:ci",))
    assert verdict(judge(policy, placed(policy, a_pod(), named), named)) == ("deny", None)


def test_no_requester_no_exception(policy):
    """``check`` without ``--as`` and ``policy test`` judge as nobody in particular."""
    assert verdict(judge(policy, placed(policy, a_pod(), ALICE), None)) == ("deny", None)


# --- where, what and when ---------------------------------------------------------------------------------------


def test_the_namespace_selector_decides_where(policy):
    d = report(
        policy,
        Request(
            placed(policy, a_pod(), ALICE),
            namespace="web",
            namespace_labels={"team": "web"},
            requester=ALICE,
            today=TODAY,
            stage=Stage.STORED,
        ),
    )
    assert verdict(d) == ("deny", None)


def test_kinds_and_names_narrow_an_exception_to_one_object(policy):
    carol = Requester("carol")
    assert verdict(judge(policy, placed(policy, a_pod("nightly"), carol), carol)) == ("deny", None)  # a Pod
    cron = a_cronjob("nightly")
    assert verdict(judge(policy, cron, carol, keys=None)) == ("audit", "nightly-only")
    assert verdict(judge(policy, a_cronjob("other"), carol, keys=None)) == ("deny", None)


def test_a_rule_the_exception_does_not_name_keeps_its_action(policy):
    pod = placed(policy, a_pod(), ALICE)
    pod["spec"]["nodeName"] = "gpu-node-1"  # node-name-set: not in the exception
    d = judge(policy, pod, ALICE)
    assert verdict(d, "node-name-set") == ("deny", None) and not d.allowed


@pytest.mark.parametrize(
    ("today", "expected"),
    [
        (date(2027, 1, 30), ("audit", "dcgm-diag")),  # the day before
        (date(2027, 1, 31), ("deny", None)),  # expires: 2027-01-31 -- stopped on the day
        (date(2027, 3, 1), ("deny", None)),
        (None, ("deny", None)),  # no date given: no exception (fail closed)
    ],
)
def test_an_exception_stops_applying_on_its_expiry_day(policy, today, expected):
    assert verdict(judge(policy, placed(policy, a_pod(), ALICE), ALICE, today=today)) == expected


def test_the_trace_says_which_exception_held_and_why(policy):
    d = judge(policy, placed(policy, a_pod(), ALICE), ALICE, entry=explain)
    assert "exception dcgm-diag: requester User:alice matches" in d.explanation
    assert any(line.startswith("rule privileged-gpu: audit (exception dcgm-diag)") for line in d.explanation)


# --- the chain: Deployment -> ReplicaSet -> Pod -------------------------------------------------------------------


def deploy(policy, who: Requester = DEPLOYER, name: str = "dcgm") -> dict[str, Any]:
    return mutate(policy, a_deployment(name), who)


def test_the_subjects_deployment_gets_a_grant_and_is_admitted(policy):
    stored = deploy(policy)
    (grant,), bad = read_grants(KEYS, grant_of(stored["spec"]["template"]))
    assert bad == 0
    assert (grant.exception, grant.by, grant.namespace, grant.group, grant.kind, grant.name) == (
        "dcgm-diag", "ServiceAccount:ci:deployer", NS, "apps", "Deployment", "dcgm",
    )  # fmt: skip
    assert verdict(judge(policy, stored, DEPLOYER)) == ("audit", "dcgm-diag")


def test_the_grant_travels_through_the_replicaset_to_the_pods(policy):
    rs = replicaset_of(deploy(policy))
    assert mutate(policy, rs, DEPLOYMENT_CONTROLLER) == rs  # /mutate keeps the carried grant as it is
    assert verdict(judge(policy, rs, DEPLOYMENT_CONTROLLER)) == ("audit", "dcgm-diag")
    pod = placed(policy, pod_of(rs), REPLICASET_CONTROLLER)
    d = judge(policy, pod, REPLICASET_CONTROLLER)
    assert d.allowed and verdict(d) == ("audit", "dcgm-diag")


def test_without_keys_pods_of_controllers_carry_nothing(policy):
    """No ``--grant-key``: the subject's own object is excepted, its pods are not (documented)."""
    stored = mutate(policy, a_deployment(), DEPLOYER)
    evaluate_no_keys = judge(policy, stored, DEPLOYER, keys=None)
    assert verdict(evaluate_no_keys) == ("audit", "dcgm-diag")
    rs = replicaset_of(deploy(policy))  # even a real grant is not honoured without the key to verify it
    assert verdict(judge(policy, placed(policy, pod_of(rs), REPLICASET_CONTROLLER), REPLICASET_CONTROLLER,
                         keys=None)) == ("deny", None)  # fmt: skip


def test_a_subjects_deployment_without_its_grant_is_denied_with_the_reason(policy):
    """The mutating webhook did not run (it fails open): admitting it would leave a ReplicaSet failing
    to create pods in silence, so /validate denies and says why."""
    d = judge(policy, a_deployment(), DEPLOYER)
    assert verdict(d) == ("deny", None)
    (v,) = [v for v in d.violations if v.rule == "privileged-gpu"]
    assert "exception dcgm-diag holds for ServiceAccount:ci:deployer but the pod template lacks its grant" in v.message


def test_an_expired_exception_stops_the_pods_of_an_existing_deployment(policy):
    pod = placed(policy, pod_of(replicaset_of(deploy(policy))), REPLICASET_CONTROLLER)
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER, today=date(2027, 1, 31))) == ("deny", None)


def test_removing_the_subject_from_the_exception_revokes_its_grants(policy):
    pod = placed(policy, pod_of(replicaset_of(deploy(policy))), REPLICASET_CONTROLLER)
    text = (POLICY_DIR / "exceptions.yaml").read_text().replace(
        "        - {kind: ServiceAccount, namespace: ci, name: deployer}\n", ""
    )
    revoked = load_policy_texts([(str(POLICY_DIR / "platform.yaml"), (POLICY_DIR / "platform.yaml").read_text()),
                                 ("exceptions.yaml", text)])  # fmt: skip
    assert verdict(judge(revoked, pod, REPLICASET_CONTROLLER)) == ("deny", None)
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("audit", "dcgm-diag")


def a_job(name: str = "burn-in") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"metadata": {}, "spec": {**pod_spec(), "restartPolicy": "Never"}}},
    }


def a_cronjob(name: str = "nightly") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": a_job()["spec"]}},
    }


def test_a_job_we_mutate_is_granted_on_its_stored_template_and_its_pods_inherit(policy):
    stored = mutate(policy, a_job(), ALICE)  # our mutation pins the raw request, then the grant is signed
    assert GRANT in stored["spec"]["template"]["metadata"]["annotations"]
    # the Job strategy adds its selector labels to the template after /mutate: not part of the digest
    stored["spec"]["template"]["metadata"].setdefault("labels", {}).update(
        {"batch.kubernetes.io/controller-uid": "u-1", "batch.kubernetes.io/job-name": "burn-in",
         "controller-uid": "u-1", "job-name": "burn-in"}
    )  # fmt: skip
    assert verdict(judge(policy, stored, ALICE)) == ("audit", "dcgm-diag")
    pod = placed(policy, pod_of(stored), JOB_CONTROLLER)
    assert verdict(judge(policy, pod, JOB_CONTROLLER)) == ("audit", "dcgm-diag")


def test_a_cronjobs_grant_reaches_its_jobs_and_their_pods(policy):
    carol = Requester("carol")
    cron = mutate(policy, a_cronjob(), carol)
    assert verdict(judge(policy, cron, carol)) == ("audit", "nightly-only")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "nightly-29412180", "namespace": NS,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                                          "uid": "c-1", "controller": True}]},
        "spec": copy.deepcopy(cron["spec"]["jobTemplate"]["spec"]),
    }  # fmt: skip
    job = mutate(policy, job, CRONJOB_CONTROLLER)  # the Job is mutated (pinned): the grant stays
    assert GRANT in job["spec"]["template"]["metadata"]["annotations"]
    assert verdict(judge(policy, job, CRONJOB_CONTROLLER)) == ("audit", "nightly-only")
    pod = placed(policy, pod_of(job), JOB_CONTROLLER)
    assert verdict(judge(policy, pod, JOB_CONTROLLER)) == ("audit", "nightly-only")


# --- forgeries: each is denied (the exception does not apply, the rule's action holds) ------------------------------


def legit_pod(policy) -> dict[str, Any]:
    """A pod of the subject's Deployment, as stored: the thing a tenant would copy from."""
    return placed(policy, pod_of(replicaset_of(deploy(policy))), REPLICASET_CONTROLLER)


def test_forgery_a_pod_naming_the_excepted_service_account(policy):
    pod = placed(policy, a_pod(), MALLORY)
    assert pod["spec"]["serviceAccountName"] == "deployer"  # the subject's own service account
    assert verdict(judge(policy, pod, MALLORY)) == ("deny", None)


def test_forgery_a_tenants_pod_with_a_copied_grant_and_owner_reference(policy):
    """A copy of a legitimate pod, owner reference to the subject's ReplicaSet and all, created by the
    tenant: the grant is only honoured on objects a controller creates."""
    copied = copy.deepcopy(legit_pod(policy))
    copied["metadata"]["name"] = "mine"
    assert verdict(judge(policy, copied, MALLORY)) == ("deny", None)


def test_forgery_a_copied_grant_in_another_deployment(policy):
    theirs = a_deployment("mine")
    theirs["spec"]["template"]["metadata"]["annotations"] = {GRANT: grant_of(deploy(policy)["spec"]["template"])}
    assert GRANT not in mutate(policy, theirs, MALLORY)["spec"]["template"]["metadata"].get("annotations", {})
    assert verdict(judge(policy, theirs, MALLORY)) == ("deny", None)  # and if /mutate was skipped
    # its controllers then carry the copy: the owner is not the object the grant names
    rs = replicaset_of(theirs)
    assert GRANT not in mutate(policy, rs, DEPLOYMENT_CONTROLLER)["spec"]["template"]["metadata"]["annotations"]
    assert verdict(judge(policy, rs, DEPLOYMENT_CONTROLLER)) == ("deny", None)
    pod = placed(policy, pod_of(rs), REPLICASET_CONTROLLER)
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("deny", None)


def test_forgery_a_deployment_named_like_a_child_of_the_granted_one(policy):
    """``dcgm-x`` creates ReplicaSet ``dcgm-x-<hash>``: not ``dcgm-<hash>``."""
    theirs = a_deployment("dcgm-x")
    theirs["spec"]["template"]["metadata"]["annotations"] = {GRANT: grant_of(deploy(policy)["spec"]["template"])}
    pod = placed(policy, pod_of(replicaset_of(theirs)), REPLICASET_CONTROLLER)
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("deny", None)


def test_forgery_an_owner_reference_to_someone_elses_controller(policy):
    """A controller creates a pod from the tenant's own ReplicaSet carrying a copied grant: the
    ReplicaSet is not the Deployment the grant was issued for."""
    grant = grant_of(deploy(policy)["spec"]["template"])
    theirs = replicaset_of(a_deployment("other"))
    theirs["spec"]["template"]["metadata"]["annotations"] = {GRANT: grant}
    pod = placed(policy, pod_of(theirs), REPLICASET_CONTROLLER)
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("deny", None)


def test_forgery_a_grant_the_tenant_wrote_itself(policy):
    wrong_key = GrantKeys((b"not-the-webhooks-key-0123456789",))
    payload_edit = grant_of(deploy(policy)["spec"]["template"])
    version, payload, sig = payload_edit.split(".")
    for token in (
        issue(wrong_key, read_grants(KEYS, payload_edit)[0][0]),  # signed with a guessed key
        f"{version}.{payload[:-4]}AAAA.{sig}",  # the payload edited (another name)
        f"{version}.{payload}.",  # no signature
        "v1.garbage.x",
    ):
        theirs = a_deployment()
        theirs["spec"]["template"]["metadata"]["annotations"] = {GRANT: token}
        assert verdict(judge(policy, theirs, MALLORY)) == ("deny", None), token
        pod = placed(policy, pod_of(replicaset_of(theirs)), REPLICASET_CONTROLLER)
        assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("deny", None), token


def test_forgery_an_update_that_adds_the_grant_to_a_pod(policy):
    old = placed(policy, a_pod("mine"), MALLORY)
    new = copy.deepcopy(old)
    new["metadata"].setdefault("annotations", {})[GRANT] = grant_of(legit_pod(policy))
    new["spec"]["containers"].append(privileged("second"))  # ...to make a new finding pass
    d = judge(policy, new, MALLORY, operation="UPDATE", old_object=old)
    assert ("deny", None) in [(v.action.value, v.exception) for v in d.violations if v.rule == "privileged-gpu"]


def test_forgery_an_update_that_adds_the_grant_to_a_deployment(policy):
    old = a_deployment("mine")
    old["spec"]["template"]["spec"]["containers"][0].pop("securityContext")  # a clean one...
    new = a_deployment("mine")  # ...made privileged, with a grant copied in
    new["spec"]["template"]["metadata"]["annotations"] = {GRANT: grant_of(deploy(policy)["spec"]["template"])}
    stored = mutate(policy, new, MALLORY, operation="UPDATE", old_object=old)
    assert GRANT not in stored["spec"]["template"]["metadata"].get("annotations", {})
    d = judge(policy, new, MALLORY, operation="UPDATE", old_object=old)
    assert verdict(d) == ("deny", None)


def test_forgery_the_template_edited_after_the_grant_was_issued(policy):
    """The tenant may update the subject's Deployment: changing the image of the excepted container
    is a finding the old object already had, but the old one held only through the grant."""
    granted = deploy(policy)
    edited = copy.deepcopy(granted)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    after_mutate = mutate(policy, edited, MALLORY, operation="UPDATE", old_object=granted)
    assert GRANT not in after_mutate["spec"]["template"]["metadata"].get("annotations", {})
    d = judge(policy, edited, MALLORY, operation="UPDATE", old_object=granted)  # even if /mutate was skipped
    assert verdict(d) == ("deny", None) and not d.allowed


def test_a_tenants_update_that_leaves_the_template_alone_keeps_the_grant(policy):
    granted = deploy(policy)
    scaled = copy.deepcopy(granted)
    scaled["spec"]["replicas"] = 3
    assert mutate(policy, scaled, MALLORY, operation="UPDATE", old_object=granted) == scaled
    d = judge(policy, scaled, MALLORY, operation="UPDATE", old_object=granted)
    assert d.allowed


def test_the_subjects_own_update_reissues_the_grant_for_the_new_template(policy):
    granted = deploy(policy)
    edited = copy.deepcopy(granted)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/cloud-native/dcgm:3.3.6"
    stored = mutate(policy, edited, DEPLOYER, operation="UPDATE", old_object=granted)
    assert grant_of(stored["spec"]["template"]) != grant_of(granted["spec"]["template"])
    assert judge(policy, stored, DEPLOYER, operation="UPDATE", old_object=granted).allowed  # nothing new
    stale = judge(policy, edited, DEPLOYER, operation="UPDATE", old_object=granted)  # /mutate did not run
    assert verdict(stale) == ("deny", None) and "lacks its grant" in stale.message


def test_forgery_impersonation_extras_are_not_identity(policy):
    """Only username and groups count. An impersonated identity *is* that identity to the apiserver
    (it needs the ``impersonate`` verb on it), so whoever may impersonate a subject holds its
    exceptions (docs/policy.md); extras such as the bound-token pod name are never read."""
    info = {
        "username": "mallory",
        "groups": ["system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["dcgm-7c9f5d8b4-abcde"],
                  "authentication.kubernetes.io/credential-id": ["JTI=deployer"]},
    }  # fmt: skip
    who = Requester.from_user_info(info)
    assert who == MALLORY.__class__("mallory", ("system:authenticated",))
    assert verdict(judge(policy, placed(policy, a_pod(), who), who)) == ("deny", None)


def test_a_controller_sending_a_pod_without_a_grant_holds_nothing(policy):
    """Exempting the controller would exempt everyone who can create Deployments (PSA docs)."""
    assert verdict(judge(policy, placed(policy, a_pod(), REPLICASET_CONTROLLER), REPLICASET_CONTROLLER)) == (
        "deny", None,
    )  # fmt: skip


# --- update semantics and policy errors ---------------------------------------------------------------------------


def write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "platform.yaml").write_text((POLICY_DIR / "platform.yaml").read_text())
    (tmp_path / "exceptions.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n  exceptions:\n" + body
    )
    return tmp_path


ENTRY = """\
    - name: {name}
      rules: [{rules}]
      namespaces: {{}}
{subjects}      expires: 2027-01-31
      reason: r
      owner: o
"""


@pytest.mark.parametrize(
    ("rules", "subjects", "message", "hint"),
    [
        ("privileged-gpus", "      subjects: [{kind: User, name: a}]\n", "unknown rule id 'privileged-gpus'",
         "did you mean 'privileged-gpu'?"),
        ("engine-error", "      subjects: [{kind: User, name: a}]\n", "engine-error cannot be excepted", ""),
        ("placement-missing", "      subjects: [{kind: User, name: a}]\n", "placement-missing cannot be excepted",
         "remove it from rules"),
        ("privileged-gpu", "", "exception 'x' names no subject", "add subjects:"),
    ],
)  # fmt: skip
def test_policy_errors_at_file_line(tmp_path, rules, subjects, message, hint):
    path = write(tmp_path, ENTRY.format(name="x", rules=rules, subjects=subjects))
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    (issue_,) = [i for i in err.value.issues if message in i.message]
    assert issue_.file.endswith("exceptions.yaml") and issue_.line >= 5 and hint in issue_.hint


def test_an_exception_name_defined_in_two_files_is_an_error(tmp_path):
    user = "      subjects: [{kind: User, name: a}]\n"
    path = write(tmp_path, ENTRY.format(name="x", rules="privileged-gpu", subjects=user))
    (path / "more.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n  exceptions:\n"
        + ENTRY.format(name="x", rules="node-name-set", subjects="      subjects: [{kind: Group, name: g}]\n")
    )
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    (issue_,) = err.value.issues
    assert issue_.file.endswith("more.yaml") and "already defined in" in issue_.message
    assert "exceptions.yaml:5" in issue_.message


@pytest.mark.parametrize(
    ("subject", "message"),
    [
        ("{kind: ServiceAccount, name: deployer}", "needs a namespace"),
        ("{kind: User, name: a, namespace: ci}", "User subjects are cluster-wide"),
        ("{kind: Robot, name: a}", "kind"),
    ],
)
def test_subjects_are_spelled_as_in_rbac(tmp_path, subject, message):
    path = write(tmp_path, ENTRY.format(name="x", rules="privileged-gpu", subjects=f"      subjects: [{subject}]\n"))
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert any(message in i.message or message in i.path for i in err.value.issues), err.value


def test_the_garbage_collectors_update_of_an_excepted_pod_introduces_nothing(policy):
    """Orphaning a pod (``kubectl delete rs --cascade=orphan``): the GC's UPDATE drops the owner
    reference; the finding was already there, so the update is admitted whatever it does to the grant."""
    pod = legit_pod(policy)
    orphan = copy.deepcopy(pod)
    del orphan["metadata"]["ownerReferences"]
    gc = Requester("system:serviceaccount:kube-system:generic-garbage-collector")
    d = judge(policy, orphan, gc, operation="UPDATE", old_object=pod)
    assert d.allowed and not [v for v in d.violations if v.rule == "privileged-gpu"]


def test_forgery_a_grant_of_a_volcano_job_on_a_batch_job_of_the_same_name(policy):
    """Same kind name, same object name, same template: another API, so another object."""
    job = a_job()
    vcjob = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "burn-in", "namespace": NS},
        "spec": {"minAvailable": 1, "schedulerName": "volcano",
                 "tasks": [{"name": "t", "replicas": 1, "template": copy.deepcopy(job["spec"]["template"])}]},
    }  # fmt: skip
    granted = mutate(policy, vcjob, ALICE)
    (grant,), _ = read_grants(KEYS, grant_of(granted["spec"]["tasks"][0]["template"]))
    assert (grant.group, grant.kind) == ("batch.volcano.sh", "Job")
    theirs = mutate(policy, job, MALLORY)  # the tenant's batch Job, mutated as ours would be
    theirs["spec"]["template"]["metadata"]["annotations"] = {GRANT: grant_of(granted["spec"]["tasks"][0]["template"])}
    assert verdict(judge(policy, theirs, MALLORY)) == ("deny", None)
    assert verdict(judge(policy, placed(policy, pod_of(theirs), JOB_CONTROLLER), JOB_CONTROLLER)) == ("deny", None)


def test_a_huge_grant_annotation_is_read_only_up_to_its_bounds(policy):
    from webhook.engine.model.grants import MAX_TOKENS

    good = grant_of(deploy(policy)["spec"]["template"])
    flood = " ".join(["v1.x.y"] * 50_000 + [good])
    grants, bad = read_grants(KEYS, flood)
    assert grants == [] and bad == MAX_TOKENS + 1  # the good one past the bound is never reached
    assert read_grants(KEYS, "v1." + "A" * 100_000 + ".sig") == ([], 1)
