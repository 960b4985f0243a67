"""Sharing stacks are data: a stack declared only in the table works end to end, and the table is judged.

The first test runs in a fresh interpreter with a table that adds an invented stack (``acme``) to the
shipped ones: no code names it, yet a class pod on its pool gets its resources in its unit, the
stack's own scheduler, and a raw request for its resources counts as a GPU request (judged, pinned to
the only pool that offers it) without the policy listing it in ``gpuResourcePrefixes``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from webhook.policy import PolicyError, load_policy_texts
from webhook.policy.stacks import TABLE_ENV, load_table, stacks

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "webhook" / "policy" / "sharing_stacks.yaml"

ACME = {
    "title": "ACME vGPU",
    "resources": ["acme.example/vgpu", "acme.example/vgpu-mem"],
    "count": {"resource": "acme.example/vgpu", "perCard": 1},
    "memory": {"resource": "acme.example/vgpu-mem", "unit": "MiB", "perDevice": True},
    "severalCards": "count",
    "scheduler": "acme-scheduler",
    "setsScheduler": True,
}

POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  pools:
    acme:
      gpuModel: T4
      gpusPerNode: 4
      nodeSelector: {pool: acme}
      isolation: [shared]
      sharing: {provider: acme}
    plain:
      gpuModel: A100-80GB
      gpusPerNode: 8
      nodeSelector: {pool: plain}
  classes:
    small: {pools: [acme], isolation: {default: shared}}
    big: {pools: [plain]}
  namespaces:
    - selector: {}
      classes: [small, big]
"""

SCRIPT = """\
import json, sys
from pathlib import Path
from webhook.engine import Request, explain
from webhook.policy import load_policy_texts

policy = load_policy_texts([("policy.yaml", Path(sys.argv[1]).read_text())])
def pod(labels, annotations, limits):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team", "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}}
out = {}
cls = explain(policy, Request(pod({"gpu-admission.io/workload": "small"},
                                  {"gpu-admission.io/gpu-memory": "3Gi", "gpu-admission.io/gpus": "2"}, {})))
out["class"] = {"allowed": cls.allowed, "patch": cls.patch, "trace": list(cls.explanation), "mutated": cls.mutated}
raw = explain(policy, Request(pod({}, {}, {"acme.example/vgpu": "1", "acme.example/vgpu-mem": "1024"})))
out["raw"] = {"allowed": raw.allowed, "patch": raw.patch, "mutated": raw.mutated,
              "violations": [v.rule for v in raw.violations]}
out["is_gpu"] = policy.is_gpu_resource("acme.example/vgpu-mem")
print(json.dumps(out, default=str))
"""


def _table_with_acme(tmp_path: Path) -> Path:
    table = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    table["stacks"]["acme"] = ACME
    path = tmp_path / "stacks.yaml"
    path.write_text(yaml.safe_dump(table), encoding="utf-8")
    return path


def test_a_stack_declared_only_in_the_table_works_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    env = {**os.environ, TABLE_ENV: str(_table_with_acme(tmp_path))}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "policy.yaml")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    cls = out["class"]
    assert cls["allowed"], cls
    spec = cls["mutated"]["spec"]
    # 2 cards x 3 GiB per card, in the stack's unit (MiB per device) and its count resource
    assert spec["containers"][0]["resources"]["limits"] == {
        "acme.example/vgpu": "2",
        "acme.example/vgpu-mem": "3072",
    }, spec
    assert spec["schedulerName"] == "acme-scheduler", spec  # the stack's own scheduler, set by the mutation
    assert spec["nodeSelector"] == {"pool": "acme"}, spec
    assert any("acme-scheduler" in line for line in cls["trace"]), cls["trace"]
    # a raw request of the stack's resources is a GPU request, with no gpuResourcePrefixes entry for it
    assert out["is_gpu"] is True
    raw = out["raw"]
    assert raw["allowed"], raw
    assert raw["mutated"]["spec"]["nodeSelector"] == {"pool": "acme"}, raw  # the only pool offering it



def test_the_shipped_table_is_what_the_policy_accepts() -> None:
    ids = stacks().ids()
    assert set(ids) == {"aliyun-cgpu", "hami", "volcano-vgpu", "tencent-qgpu", "time-slicing"}
    with pytest.raises(PolicyError) as err:
        load_policy_texts([("p.yaml", POLICY)])
    assert "acme" in str(err.value) and "hami" in str(err.value)  # names the bad value and what is allowed


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({**ACME, "count": {"resource": "acme.example/other"}}, "count names 'acme.example/other'"),
        ({**ACME, "severalCards": "podLabel"}, "severalCards: podLabel needs podLabel"),
        ({**ACME, "scheduler": None}, "setsScheduler needs scheduler"),
        ({**ACME, "memory": {"resource": "acme.example/vgpu-mem", "unit": "KiB", "perDevice": True}}, "memory.unit"),
        ({**ACME, "colour": "red"}, "colour"),
    ],
)
def test_a_wrong_table_entry_is_refused_with_where_and_what(entry: dict, said: str) -> None:
    text = yaml.safe_dump({"stacks": {"acme": entry}})
    with pytest.raises(ValueError) as err:
        load_table(text, "stacks.yaml")
    message = str(err.value)
    assert message.startswith("stacks.yaml: stacks.acme"), message
    assert said in message, message


@pytest.mark.parametrize(
    ("sharing", "said"),
    [
        ("{provider: aliyun-cgpu, cores: 30}", "aliyun-cgpu has no per-slice compute resource"),
        ("{provider: hami, renamed: true}", "hami advertises no renamed resource"),
    ],
)
def test_a_pool_setting_its_stack_cannot_honour_is_refused(sharing: str, said: str) -> None:
    text = textwrap.dedent(
        f"""\
        apiVersion: gpu-admission.io/v1
        kind: GPUPolicy
        spec:
          pools:
            p: {{gpuModel: T4, gpusPerNode: 4, nodeSelector: {{pool: p}}, isolation: [shared], sharing: {sharing}}}
          classes:
            c: {{pools: [p], isolation: {{default: shared}}}}
        """
    )
    with pytest.raises(PolicyError) as err:
        load_policy_texts([("p.yaml", text)])
    assert said in str(err.value)
    assert "p.yaml:" in str(err.value)  # the file (and line) of the setting


def test_every_stack_resource_counts_as_a_gpu_whatever_the_prefixes() -> None:
    text = POLICY.replace("sharing: {provider: acme}", "sharing: {provider: volcano-vgpu}").replace(
        "spec:\n", "spec:\n  settings:\n    gpuResourcePrefixes: [nvidia.com/gpu]\n", 1
    )
    policy = load_policy_texts([("p.yaml", text)])
    for resource in stacks().resources:
        assert policy.is_gpu_resource(resource), resource
    assert not policy.is_gpu_resource("example.com/fpga")


@pytest.mark.parametrize("content", [None, "stacks: {acme: {title: A}}\n", "stacks: [\n"])
def test_a_bad_table_file_is_one_clear_error_not_a_traceback(tmp_path: Path, content: str | None) -> None:
    table = tmp_path / "stacks.yaml"
    if content is not None:
        table.write_text(content, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "lint", str(ROOT / "tests" / "engine" / "policies")],
        env={**os.environ, TABLE_ENV: str(table)},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"gpu-admission: error: {TABLE_ENV}={table}" if content is None else
                                  f"gpu-admission: error: {table}"), done.stderr
    assert "unset GPU_ADMISSION_SHARING_STACKS" in done.stderr
