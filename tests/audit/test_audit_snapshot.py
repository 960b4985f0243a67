"""``--snapshot``: kubectl's List output and multi-document YAML, read item by item; what is the user's."""

from __future__ import annotations

import copy
import io
import json
import random
from pathlib import Path

import yaml

from tests.audit.cluster import EXPECTED, mutated, pod, stored
from tests.audit.conftest import POLICIES, run_cli
from webhook.audit.snapshot import _block_chunks, _blocks, _chunks, without_system_blocks
from webhook.audit.stored import as_admitted


def test_a_snapshot_judges_like_the_cluster(snapshot: Path) -> None:
    ran = run_cli("--snapshot", snapshot, "--policy", POLICIES, "-o", "json")
    assert ran.code == 1, ran.err
    doc = json.loads(ran.out)
    assert {(r["namespace"], r["kind"], r["name"]): r["status"] for r in doc["results"]} == EXPECTED


def test_list_items_are_split_on_their_own_lines() -> None:
    text = (
        "apiVersion: v1\nitems:\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n  spec:\n    containers:\n    - name: c\n"
        "      args:\n      - |\n        line one\n        - not an item\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\n"
        "kind: List\nmetadata:\n  resourceVersion: \"\"\n"
        "---\n"
        "apiVersion: v1\nkind: List\nitems:\n  - {apiVersion: v1, kind: Node, metadata: {name: n}}\n"
        "---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: solo}\n"
    )
    items = list(_chunks(text.splitlines(keepends=True), "f"))
    loaded = [yaml.safe_load(i.text) for i in items]
    assert [(i.line, o["metadata"]["name"]) for i, o in zip(items, loaded, strict=True)] == [
        (3, "a"),
        (14, "b"),
        (24, "n"),
        (26, "solo"),
    ]
    assert loaded[0]["spec"]["containers"][0]["args"] == ["line one\n- not an item\n"]


_SPLIT_CASES = {
    "kubectl's List": "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n"
    "- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\nkind: List\nmetadata:\n  resourceVersion: \"\"\n",
    "indented items, blank and comment lines": "kind: List\nitems:\n\n  # first\n  - a: 1\n\n    b:\n"
    "    - x\n# column 0 comment\n    c: 2\n  -\n    d: 3\n  - e\nmetadata: {}\n",
    "items on the items: line": "kind: List\nitems: [{a: 1}, {b: 2}]\n---\nkind: List\nitems:\nnot: a sequence\n",
    "documents and ends": "---\na: 1\n...\n--- # c\nitems:\n- q: 1\n---\n\n---\nb: 2",
    "CRLF": "kind: List\r\nitems:\r\n- a: 1\r\n  b: 2\r\n- c: 3\r\nkind: List\r\n",
    "lone CR": "kind: List\ritems:\r- a: 1\r  b: 2\n- c: 3\r\n  d: 4\n",
    "no final line end": "items:\n- a: 1\n  b: 2",
    "a long line": "items:\n- a: " + "x" * 300 + "\n  b: " + "y" * 300 + "\n- c: 1\n",
    "tabs and a lone dash": "items:\n\t- a\n-\n  a: 1\n-\tb\n",
}

_PIECES = ("items:", "kind: List", "- a: 1", "  b: 2", "  - c", "    d: 3", "-", "", "# note", "  # note",
           "---", "...", "x: |", "  - not an item", "  - k: v", "    - k: v", "\t- t", "metadata: {}")


def _split_by_blocks(text: str, size: int) -> list[tuple[str, int, str, str, str]]:
    items = _block_chunks(_blocks(io.StringIO(text, newline=""), size), "f")
    return [(i.file, i.line, i.raw, i.indent, i.text) for i in items]


def _split_by_lines(text: str) -> list[tuple[str, int, str, str, str]]:
    items = _chunks(io.StringIO(text, newline=""), "f")  # a text file's lines, as the file reader gives them
    return [(i.file, i.line, i.raw, i.indent, i.text) for i in items]


def test_the_block_splitter_finds_the_line_splitters_items(policy) -> None:
    """The snapshot reader appends runs of continuation lines in one search per run, in blocks: every
    item, first line, text and indentation must be what the line-by-line splitter finds, whatever the
    block size (1 character cuts every line; lines longer than a block are joined)."""
    from tests.audit.cluster import cluster_objects

    cases = dict(_SPLIT_CASES)
    cases["stored objects"] = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster_objects(policy)})
    rng = random.Random(20261204)
    for n in range(300):
        lines = [rng.choice(_PIECES) for _ in range(rng.randint(1, 25))]
        ends = [rng.choice(("\n", "\n", "\n", "\r\n", "\r")) for _ in lines]
        text = "".join(line + end for line, end in zip(lines, ends, strict=True))
        cases[f"generated {n}"] = text[: rng.randint(1, len(text))]
    for name, text in cases.items():
        expected = _split_by_lines(text)
        for size in (1, 2, 5, 64, 1 << 20):
            assert _split_by_blocks(text, size) == expected, (name, size)
    assert len(_split_by_lines(cases["stored objects"])) == len(cluster_objects(policy)) > 5
    assert [i[1] for i in _split_by_lines(cases["kubectl's List"])] == [3, 7]  # not the List's own keys


def test_multi_document_files_and_directories(policy, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    snap.mkdir()
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    good = stored(mutated(policy, pod("good", "team-a", cls="inference")))
    bad = stored(pod("bad", "team-a", cls="inference"))
    (snap / "ns.yaml").write_text(yaml.safe_dump(ns))
    (snap / "pods.yaml").write_text(yaml.safe_dump(good) + "---\n" + yaml.safe_dump(bad))
    ran = run_cli("--snapshot", snap, "--policy", POLICIES, "-o", "json")
    assert ran.code == 1
    assert {r["name"]: r["status"] for r in json.loads(ran.out)["results"]} == {"good": "admitted", "bad": "denied"}


def test_mirror_pods_are_not_judged(tmp_path: Path) -> None:
    mirror = pod("static-gpu", "team-a", gpus=1)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    snap = tmp_path / "s.yaml"
    snap.write_text(yaml.safe_dump(stored(mirror)))
    ran = run_cli("--snapshot", snap, "--policy", POLICIES, "-o", "json")
    assert ran.code == 0
    summary = json.loads(ran.out)["summary"]
    assert (summary["judged"], summary["mirrorPods"]) == (0, 1)


def test_unreadable_snapshots_are_exit_2_with_file_and_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {labels: {gpu-admission.io/workload: [x\n"
    )
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("apiVersion: v1\nitems:\n- just a string\nkind: List\n")
    for path, words in (
        (broken, f"{broken}:6:1: YAML syntax error"),  # the flow sequence never closes
        (scalar, f"{scalar}:3: not a Kubernetes object"),
        (tmp_path / "missing.yaml", "no such file"),
    ):
        ran = run_cli("--snapshot", path, "--policy", POLICIES)
        assert ran.code == 2, ran.err
        assert words in ran.err and ran.err.count("\n") == 1 and "Traceback" not in ran.err


def test_system_set_fields_are_not_the_users() -> None:
    scheduled = stored(pod("p", "ns", gpus=1))
    before = copy.deepcopy(scheduled)
    admitted = as_admitted(scheduled)
    assert scheduled == before  # the stored object is not changed
    assert "nodeName" not in admitted["spec"] and "status" not in admitted
    assert not {"managedFields", "uid", "creationTimestamp"} & set(admitted["metadata"])
    assert admitted["spec"]["schedulerName"] == "default-scheduler"  # defaulted before admission: /validate saw it
    pinned = as_admitted(stored(pod("p", "ns", gpus=1), user_node=True))
    assert pinned["spec"]["nodeName"] == "gpu-node-1"
    # without managedFields (kubectl hides them) a nodeName is taken as the scheduler's
    hidden = stored(pod("p", "ns", gpus=1), user_node=True)
    del hidden["metadata"]["managedFields"]
    assert "nodeName" not in as_admitted(hidden)["spec"]


def test_status_and_managed_fields_are_cut_before_parsing(policy) -> None:
    from tests.audit.cluster import cluster_objects

    for obj in cluster_objects(policy):
        text = yaml.safe_dump(obj)  # kubectl's layout: sorted keys, sequences not indented
        cut = yaml.safe_load(without_system_blocks(text))
        expected = copy.deepcopy(obj)
        expected.pop("status", None)
        if "f:nodeName" not in text:
            expected["metadata"].pop("managedFields", None)
        assert cut == expected, obj["metadata"]["name"]
        assert as_admitted(cut) == as_admitted(obj)


def test_the_judgement_crosses_a_process_boundary(policy) -> None:
    """What a process pool needs: a module-level function and a picklable result."""
    import pickle

    from webhook.audit.judge import judge
    from webhook.engine.model.cluster import EMPTY_CLUSTER

    obj = stored(pod("bad", "team-a", cls="inference"))
    j = judge(policy, obj, cluster=EMPTY_CLUSTER, namespace_labels=None)
    assert j.violations and pickle.loads(pickle.dumps(j)) == j
    assert pickle.loads(pickle.dumps(judge)) is judge


def test_claim_objects_are_judged_for_what_they_give_a_pod(tmp_path: Path) -> None:
    """A template created after the pod that names it was never judged with the pod: the audit judges
    each stored ResourceClaim(Template) on its own (adminAccess: privileged-gpu). A claim carrying the
    scheduler's extended-resource marker is not reported forged: who wrote it is not in the object."""
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}}]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "watch", "namespace": "team-a", "uid": "t1"},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    plain = copy.deepcopy(template)
    plain["metadata"].update(name="one", uid="t2")
    del plain["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"]
    marked = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "p-extended-resources-x", "namespace": "team-a", "uid": "c1",
                     "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    snap = tmp_path / "s.yaml"
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [ns, template, plain, marked]}))
    ran = run_cli("--snapshot", snap, "--policy", POLICIES, "-o", "json")
    assert ran.code == 1, ran.err
    listed = json.loads(ran.out)["results"]
    results = {(r["kind"], r["name"]): r for r in listed}
    assert len(listed) == len(results) == 3, "each claim object judged once (as context, not again as an item)"
    for workers in ("1", "2"):
        again = run_cli("--snapshot", snap, "--policy", POLICIES, "-o", "json", "--workers", workers)
        assert len(json.loads(again.out)["results"]) == 3, workers
    assert results[("ResourceClaimTemplate", "watch")]["status"] == "denied"
    assert [v["rule"] for v in results[("ResourceClaimTemplate", "watch")]["violations"]] == ["privileged-gpu"]
    assert results[("ResourceClaimTemplate", "one")]["status"] == "admitted"
    assert results[("ResourceClaim", "p-extended-resources-x")]["status"] == "admitted"


def test_the_context_pass_decides_on_items_as_written_as_on_them_dedented(policy) -> None:
    """The context pass asks its screen (context kinds, claimants, grant carriers) about each item as
    written, sparing the dedent: every item of every split case, List items indented or not, gets the
    same answer both ways, and each context kind is found at any indentation."""
    from tests.audit.cluster import cluster_objects
    from webhook.audit.inventory import _context_or_grant
    from webhook.audit.snapshot import kept

    cases = dict(_SPLIT_CASES)
    cases["stored objects"] = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster_objects(policy)})
    kinds = ("Namespace", "Node", "ResourceClaimTemplate", "ResourceClaim", "DeviceClass", "ResourceSlice",
             "ComputeDomain", "Pod")
    for indent in (0, 2, 4):
        pad = " " * indent
        items = "".join(f"{pad}- kind: {k}\n{pad}  metadata: {{name: x, annotations: {{a: exception-grant}}}}\n"
                        f"{pad}  spec:\n{pad}    resourceClaimTemplateName: t\n" for k in kinds)
        cases[f"list at {indent}"] = f"apiVersion: v1\nkind: List\nitems:\n{items}"
    rng = random.Random(20261205)
    for n in range(300):
        pieces = (*_PIECES, "- kind: Node", "  kind: Namespace", "    kind: 'DeviceClass' # c",
                  "  resourceClaimTemplateName: t", "  - kind: ResourceClaim")
        lines = [rng.choice(pieces) for _ in range(rng.randint(1, 25))]
        cases[f"generated {n}"] = "".join(line + rng.choice(("\n", "\r\n")) for line in lines)
    found = 0
    for name, text in cases.items():
        for item in _block_chunks(_blocks(io.StringIO(text, newline=""), 1 << 20), "f"):
            assert kept(item, _context_or_grant, True) == kept(item, _context_or_grant), (name, item.raw)
            found += kept(item, _context_or_grant, True)
    assert found > 300
