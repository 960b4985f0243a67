"""Policy exceptions in every audit output (SPEC §13, §14; #27 part 3): the exceptions in use, with the
objects and findings each covered, and those expiring within a week of the audit's date (``--date``).

The cluster is a snapshot built here: a Deployment a subject applied (so it carries the grant the
webhook's ``/mutate`` wrote, signed with the test's key), its ReplicaSet and pod, and pods the
exception must not cover (one without a grant, one with a copied grant and someone else's owner).
The policy is the test's own (tests/audit/policies/exceptions), judged on 2027-01-25.
"""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonpatch
import jsonschema
import pytest
import yaml

from tests.audit.conftest import run_cli
from tests.audit.openreports_schema import schema
from webhook.engine import Request, mutate
from webhook.engine.model.grants import GrantKeys
from webhook.engine.model.requester import Requester
from webhook.policy import load_policy

POLICY = Path(__file__).parent / "policies" / "exceptions"
DAY = "2027-01-25"
KEY = b"0123456789abcdef0123456789abcdef"
NS = "gpu-diag"
GRANT = "gpu-admission.io/exception-grant"


def _owner(kind: str, name: str, api_version: str = "apps/v1") -> list[dict]:
    return [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    ]


def _pod(name: str, template: dict, owners: list[dict] | None = None) -> dict:
    meta = copy.deepcopy(template["metadata"])
    meta.update({"name": name, "namespace": NS, "uid": f"uid-{name}"})
    if owners:
        meta["ownerReferences"] = owners
    spec = {**copy.deepcopy(template["spec"]), "nodeName": "a100-node-1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def cluster() -> list[dict]:
    policy = load_policy(POLICY)
    labels = {"kubernetes.io/metadata.name": NS, "team": "gpu-diag"}
    container = {
        "name": "dcgm",
        "image": "nvcr.io/nvidia/dcgm:3",
        "securityContext": {"privileged": True},
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    template = {"metadata": {"labels": {"app": "dcgm"}}, "spec": {"containers": [container]}}
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "dcgm-diag", "namespace": NS, "uid": "uid-dcgm-diag"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dcgm"}}, "template": template},
    }
    mutated = mutate(
        policy,
        Request(
            deploy,
            namespace=NS,
            namespace_labels=labels,
            requester=Requester("alice@example.com"),
            today=datetime.date.fromisoformat(DAY),
            grant_keys=GrantKeys((KEY,)),
        ),
    )
    deploy = jsonpatch.apply_patch(deploy, list(mutated.patch))
    granted = deploy["spec"]["template"]
    assert GRANT in granted["metadata"]["annotations"], "the webhook wrote no grant: the fixture is wrong"
    rs_template = copy.deepcopy(granted)
    rs_template["metadata"]["labels"]["pod-template-hash"] = "5d8f"
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "dcgm-diag-5d8f",
            "namespace": NS,
            "uid": "uid-dcgm-diag-5d8f",
            "ownerReferences": _owner("Deployment", "dcgm-diag"),
        },
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dcgm"}}, "template": rs_template},
    }

    def placed(pod: dict, by: str) -> dict:
        """The pod as the webhook's /mutate stored it (placed; a grant kept only where it holds)."""
        m = mutate(
            policy,
            Request(
                pod,
                namespace=NS,
                namespace_labels=labels,
                requester=Requester(by),
                today=datetime.date.fromisoformat(DAY),
                grant_keys=GrantKeys((KEY,)),
            ),
        )
        return jsonpatch.apply_patch(pod, list(m.patch))

    controller = "system:serviceaccount:kube-system:replicaset-controller"
    legit = placed(_pod("dcgm-diag-5d8f-abcde", rs_template, _owner("ReplicaSet", "dcgm-diag-5d8f")), controller)
    assert GRANT in legit["metadata"]["annotations"]
    copycat = placed(_pod("copycat", rs_template, _owner("ReplicaSet", "other-7c9d")), controller)
    copycat["metadata"].setdefault("annotations", {})[GRANT] = granted["metadata"]["annotations"][GRANT]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}},
        deploy,
        replicaset,
        legit,
        placed(_pod("rogue", template), "mallory@example.com"),  # privileged, no grant: not for it
        copycat,  # a copied grant under another owner (stored while the webhook was down, say)
    ]


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster()}))
    return path


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "grant.key"
    path.write_bytes(KEY + b"\n")
    return path


def audit(snapshot: Path, *args: str | Path, date: str = DAY):
    return run_cli("--snapshot", snapshot, "--policy", POLICY, "--date", date, *args)


COVERED = {"Deployment/dcgm-diag", "ReplicaSet/dcgm-diag-5d8f", "Pod/dcgm-diag-5d8f-abcde"}


def test_text_names_the_exception_what_it_covered_and_what_expires(snapshot: Path, key: Path) -> None:
    ran = audit(snapshot, "--grant-key", key)
    assert ran.code == 1, ran.err  # rogue and copycat are still denied
    out = ran.out
    assert f"exceptions in use on {DAY} (1):" in out
    assert "dcgm-diag (privileged-gpu; owner platform-team; expires 2027-01-28): 3 finding(s) on 3 object(s)" in out
    for label in COVERED:
        assert f"{NS}/{label}" in out.split("exceptions in use", 1)[1]
    used = out.split("exceptions in use", 1)[1].split("exceptions expiring", 1)[0]
    assert "rogue" not in used and "copycat" not in used
    assert f"exceptions expiring within 7 days of {DAY} (2):" in out
    assert "old-migration (node-name-set; owner infra-team): expired on 2027-01-20: no longer applies" in out
    assert "dcgm-diag (privileged-gpu; owner platform-team): expires on 2027-01-28 (in 3 days)" in out
    assert "long-term" not in out
    denied = out.split("[privileged-gpu] deny", 1)[1].split("\n", 1)[1]
    assert "Pod/rogue" in denied and "Pod/copycat" in denied and "dcgm-diag-5d8f-abcde" not in denied.split("[")[0]


def test_json_lists_uses_by_exception_and_marks_each_finding(snapshot: Path, key: Path) -> None:
    ran = audit(snapshot, "--grant-key", key, "-o", "json")
    doc = json.loads(ran.out)
    exceptions = doc["exceptions"]
    assert exceptions["date"] == DAY and exceptions["grantsVerified"] is True
    (used,) = exceptions["inUse"]
    assert used["exception"] == "dcgm-diag" and used["findings"] == 3 and used["objects"] == 3
    assert used["owner"] == "platform-team" and used["expires"] == "2027-01-28"
    assert used["subjects"] == ["User:alice@example.com"] and used["rules"] == ["privileged-gpu"]
    assert {c["object"] for c in used["covered"]} == {f"{NS}/{x}" for x in COVERED}
    owners = {c["object"]: c.get("owner") for c in used["covered"]}
    assert owners[f"{NS}/Pod/dcgm-diag-5d8f-abcde"] == "Deployment/dcgm-diag (via ReplicaSet/dcgm-diag-5d8f)"
    assert owners[f"{NS}/Deployment/dcgm-diag"] is None
    assert [(e["exception"], e["daysLeft"], e["expired"]) for e in exceptions["expiring"]] == [
        ("old-migration", -5, True),
        ("dcgm-diag", 3, False),
    ]
    by_name = {r["name"]: r for r in doc["results"]}
    marked = [v for v in by_name["dcgm-diag"]["violations"] if v["rule"] == "privileged-gpu"]
    assert marked == [{**marked[0], "action": "audit", "exception": "dcgm-diag"}]
    for label in COVERED:  # the grant is the webhook's own annotation, not a mistyped intent key
        assert not [v for v in by_name[label.split("/")[1]]["violations"] if v["rule"] == "intent-unknown-key"]
    rogue = [v for v in by_name["rogue"]["violations"] if v["rule"] == "privileged-gpu"]
    assert rogue and all(v["action"] == "deny" and "exception" not in v for v in rogue)


def test_junit_carries_the_exceptions_as_suite_properties(snapshot: Path, key: Path) -> None:
    ran = audit(snapshot, "--grant-key", key, "-o", "junit")
    suite = ET.fromstring(ran.out)
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["exceptions-date"] == DAY
    used = props["exception-in-use.dcgm-diag"]
    assert used.startswith("3 finding(s) of privileged-gpu on 3 object(s): ")
    assert all(f"{NS}/{label}" in used for label in COVERED) and "owner platform-team" in used
    assert props["exception-expiring.old-migration"].startswith("expired on 2027-01-20")
    assert props["exception-expiring.dcgm-diag"].startswith("expires on 2027-01-28 (in 3 days)")
    assert "exception-expiring.long-term" not in props
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"Pod/rogue", "Pod/copycat"}


def test_openreports_stay_valid_and_carry_the_exceptions(snapshot: Path, key: Path) -> None:
    ran = audit(snapshot, "--grant-key", key, "-o", "openreports")
    docs = list(yaml.safe_load_all(ran.out))
    for doc in docs:
        jsonschema.validate(doc, schema(doc["kind"]))
        counted = {k: 0 for k in doc["summary"]}
        for r in doc["results"]:
            counted[r["result"]] += 1
            assert all(isinstance(v, str) for v in r["properties"].values())
        assert all(doc["summary"][k] >= counted[k] for k in counted)
    by_kind = {d["kind"]: d for d in docs}
    team = by_kind["Report"]
    excepted = [r for r in team["results"] if r["properties"].get("exception")]
    assert {r["resources"][0]["name"] for r in excepted} == {x.split("/")[1] for x in COVERED}
    assert {(r["rule"], r["result"], r["properties"]["action"]) for r in excepted} == {
        ("privileged-gpu", "warn", "audit")
    }
    cluster_report = by_kind["ClusterReport"]
    rules = [(r["rule"], r["properties"]["exception"]) for r in cluster_report["results"]]
    assert sorted(rules) == [
        ("exception-expiring", "dcgm-diag"),
        ("exception-expiring", "old-migration"),
        ("exception-in-use", "dcgm-diag"),
    ]
    in_use = next(r for r in cluster_report["results"] if r["rule"] == "exception-in-use")
    assert in_use["properties"]["findings"] == "3" and in_use["properties"]["owner"] == "platform-team"
    assert "gpu-diag/Pod/dcgm-diag-5d8f-abcde" in in_use["message"]
    assert cluster_report["summary"]["warn"] == 3


def test_without_the_grant_key_grants_are_not_honoured_and_the_report_says_so(snapshot: Path) -> None:
    ran = audit(snapshot, "-o", "json")
    doc = json.loads(ran.out)
    assert doc["exceptions"]["inUse"] == [] and doc["exceptions"]["grantsVerified"] is False
    text = audit(snapshot).out
    assert "note: exception grants were not verified (no --grant-key)" in text
    assert "exceptions in use" not in text and "old-migration" in text


def test_on_the_expiry_day_the_exception_no_longer_covers_anything(snapshot: Path, key: Path) -> None:
    doc = json.loads(audit(snapshot, "--grant-key", key, "-o", "json", date="2027-01-28").out)
    assert doc["exceptions"]["inUse"] == []
    expiring = [(e["exception"], e["daysLeft"], e["expired"]) for e in doc["exceptions"]["expiring"]]
    assert ("dcgm-diag", 0, True) in expiring
    by_name = {r["name"]: r for r in doc["results"]}
    assert {v["action"] for v in by_name["dcgm-diag"]["violations"] if v["rule"] == "privileged-gpu"} == {"deny"}


def test_far_from_expiry_nothing_is_listed_as_expiring(snapshot: Path, key: Path) -> None:
    doc = json.loads(audit(snapshot, "--grant-key", key, "-o", "json", date="2027-01-10").out)
    assert doc["exceptions"]["expiring"] == []
    assert [u["exception"] for u in doc["exceptions"]["inUse"]] == ["dcgm-diag"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--date", "25.01.2027"), "--date: expected YYYY-MM-DD, got '25.01.2027'"),
        (("--grant-key", "/nonexistent/grant.key"), "--grant-key: cannot read /nonexistent/grant.key"),
    ],
)
def test_bad_date_or_key_is_one_line_and_exit_2(snapshot: Path, args: tuple[str, ...], says: str) -> None:
    ran = run_cli("--snapshot", snapshot, "--policy", POLICY, *args)
    assert ran.code == 2 and ran.out == ""
    assert says in ran.err and len(ran.err.strip().splitlines()) == 1 and "Traceback" not in ran.err


def test_a_short_grant_key_is_refused_with_how_to_make_one(snapshot: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.key"
    short.write_bytes(b"tooshort\n")
    ran = run_cli("--snapshot", snapshot, "--policy", POLICY, "--grant-key", short)
    assert ran.code == 2 and "openssl rand -hex 32" in ran.err
