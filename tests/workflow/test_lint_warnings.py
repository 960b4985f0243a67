"""``policy lint`` warnings: policies that load but mislead, each at file:line with a code and a hint."""

from __future__ import annotations

import json
import re
import textwrap
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import ROOT
from tests.workflow.conftest import line_of, write_policy
from webhook.lint.checks import WARNING_CODES

HEAD = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n"
# three days after today (UTC, the CLI's clock): within the week lint warns ahead, whatever the day
SOON = (datetime.now(UTC).date() + timedelta(days=3)).isoformat()


def spec(body: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(body), "  ")


# code -> (policy text, the line the warning must point at, a phrase of the message, a phrase of the hint)
CASES: dict[str, tuple[str, str, str, str]] = {
    "unreachable-class": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes:
              infer: {pools: [a100]}
              lonely: {pools: [a100]}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "lonely:",
        "class 'lonely' is not granted to any namespace",
        "add it to the classes of a spec.namespaces rule",
    ),
    "shadowed-namespace-rule": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes:
              infer: {pools: [a100]}
              train: {pools: [a100]}
            namespaces:
              - name: everyone
                selector: {}
                classes: [infer, train]
              - name: trainers
                selector: {matchLabels: {tier: training}}
                classes: [train]
            """
        ),
        "selector: {matchLabels: {tier: training}}",
        "namespaces[1] (trainers) never applies: namespaces[0] (everyone) selects every namespace",
        "move it above namespaces[0] (everyone)",
    ),
    "entitlement-without-pool": (
        spec(
            """\
            pools:
              a100: {gpuModel: A100-40GB, gpusPerNode: 8}
              h100: {gpuModel: H100-80GB, gpusPerNode: 8}
            classes:
              infer: {pools: [a100]}
              train: {pools: [h100]}
            namespaces:
              - selector: {}
                classes: [infer, train]
                pools: [a100]
            """
        ),
        "classes: [infer, train]",
        "grants class 'train' but its pools ['a100'] exclude every pool of the class",
        "add one of h100",
    ),
    "entitlement-default-unserved": (
        spec(
            """\
            pools:
              a100: {gpuModel: A100-40GB, gpusPerNode: 8, isolation: [mig], mig: {layout: all-1g.5gb}}
              a10: {gpuModel: A10, gpusPerNode: 4, isolation: [shared], sharing: {provider: aliyun-cgpu}}
            classes:
              infer: {pools: [a100, a10], isolation: {default: mig, allowed: [mig, shared]}, defaultGPUMemory: 4Gi}
            namespaces:
              - name: shared-only
                selector: {matchLabels: {tier: shared}}
                classes: [infer]
                pools: [a10]
              - {selector: {}, classes: [infer]}
            """
        ),
        "classes: [infer]",
        "leaves class 'infer' only pools a10, none of which serves its default isolation 'mig'",
        "set defaultIsolation: {infer: shared} on the rule",
    ),
    "unused-pool": (
        spec(
            """\
            pools:
              a100: {gpuModel: A100-40GB, gpusPerNode: 8}
              spare: {gpuModel: L4, gpusPerNode: 2}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "spare:",
        "pool 'spare' is not listed by any class",
        "add it to a class's pools, or remove the pool",
    ),
    "isolation-unserved": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8, isolation: [mig, exclusive], mig: {}}}
            classes:
              infer: {pools: [a100], isolation: {default: mig, allowed: [mig, shared]}, defaultGPUMemory: 5Gi}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "allowed: [mig, shared]",
        "class 'infer' allows isolation 'shared' but none of its pools (a100) serves it",
        "add 'shared' (and its sharing section)",
    ),
    "sharing-scheduler": (
        spec(
            """\
            pools: {t4: {gpuModel: T4, gpusPerNode: 4, isolation: [shared], sharing: {provider: volcano-vgpu}}}
            classes:
              dev: {pools: [t4], isolation: {default: shared}, defaultGPUMemory: 4Gi, schedulerName: kai-scheduler}
            namespaces: [{selector: {}, classes: [dev]}]
            """
        ),
        "dev: {pools: [t4]",
        "sends pods to scheduler 'kai-scheduler', but pool 't4' shares GPUs with volcano-vgpu",
        "use schedulerName 'volcano'",
    ),
    "mig-product-missing": (
        spec(
            """\
            gpuModels:
              A100-PCIE: {memory: 40Gi, mig: [[1g.5gb, 7], [7g.40gb, 1]]}
            pools:
              a100: {gpuModel: A100-PCIE, gpusPerNode: 8, isolation: [mig], mig: {strategy: single}}
            classes: {infer: {pools: [a100], isolation: {default: mig}, defaultGPUMemory: 5Gi}}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "mig: {strategy: single}",
        "uses the single MIG strategy, which selects nodes by nvidia.com/gpu.product",
        "set spec.gpuModels.A100-PCIE.product",
    ),
    "adopt-outside-class": (
        spec(
            """\
            pools:
              a100: {gpuModel: A100-40GB, gpusPerNode: 8}
              h100: {gpuModel: H100-80GB, gpusPerNode: 8, adoptAs: infer}
            classes:
              infer: {pools: [a100]}
              train: {pools: [h100]}
            namespaces: [{selector: {}, classes: [infer, train]}]
            """
        ),
        "h100: {gpuModel: H100-80GB",
        "adopts raw requests as class 'infer', but that class's pools (a100) do not include 'h100'",
        "add 'h100' to spec.classes.infer.pools",
    ),
    "gang-without-backend": (
        spec(
            """\
            pools: {h100: {gpuModel: H100-80GB, gpusPerNode: 8}}
            classes:
              train:
                pools: [h100]
                gang: {required: true}
            namespaces: [{selector: {}, classes: [train]}]
            """
        ),
        "gang: {required: true}",
        "requires a gang but has no gang backend",
        "set gang.backend to volcano, kueue, coscheduling or kai",
    ),
    "kueue-queue-missing": (
        spec(
            """\
            pools: {h100: {gpuModel: H100-80GB, gpusPerNode: 8}}
            classes:
              train:
                pools: [h100]
                gang: {backend: kueue}
            namespaces: [{selector: {}, classes: [train]}]
            """
        ),
        "gang: {backend: kueue}",
        "uses the kueue gang backend but neither the class nor every namespace rule",
        "set kueueQueue",
    ),
    "rdma-unserved": (
        spec(
            """\
            pools: {h100: {gpuModel: H100-80GB, gpusPerNode: 8}}
            classes:
              train:
                pools: [h100]
                rdma: true
            namespaces: [{selector: {}, classes: [train]}]
            """
        ),
        "rdma: true",
        "wants RDMA but none of its pools (h100) has an rdma section",
        "add rdma (networks, resource) to the pool",
    ),
    "topology-unmapped": (
        spec(
            """\
            pools: {h100: {gpuModel: H100-80GB, gpusPerNode: 8, topology: {node: kubernetes.io/hostname}}}
            classes:
              train:
                pools: [h100]
                topology: rack
            namespaces: [{selector: {}, classes: [train]}]
            """
        ),
        "topology: rack",
        "packs gangs by 'rack' but pool 'h100' maps no node label to that level (mapped: node)",
        "add topology.rack: <node label key> to pool 'h100'",
    ),
    "max-gpus-unschedulable": (
        spec(
            """\
            pools: {l4: {gpuModel: L4, gpusPerNode: 2}}
            classes:
              infer:
                pools: [l4]
                maxGPUs: 4
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "maxGPUs: 4",
        "allows 4 GPUs per pod but its largest pool node has 2",
        "lower maxGPUs to 2",
    ),
    "default-memory-too-large": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8, isolation: [mig], mig: {}}}
            classes:
              infer:
                pools: [a100]
                isolation: {default: mig}
                defaultGPUMemory: 60Gi
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "defaultGPUMemory: 60Gi",
        # the largest profile holds what nvidia-smi mig -lgip lists (7g.40gb: 39.25Gi), not the name's 40
        "defaultGPUMemory 60Gi of class 'infer' fits no mig device of its pools (largest 40192Mi)",
        "lower defaultGPUMemory to at most 40192Mi",
    ),
    "shadowed-rule-override": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            rules:
              raw-gpu-request:
                namespaces:
                  - selector: {matchExpressions: [{key: team, operator: Exists}]}
                    action: audit
                  - selector: {matchLabels: {team: ml, env: dev}}
                    action: "off"
            """
        ),
        "selector: {matchLabels: {team: ml, env: dev}}",
        "this override of rule 'raw-gpu-request' never applies: namespaces[0] selects team",
        "move it above namespaces[0]",
    ),
    "render-needed": (
        spec(
            """\
            settings:
              prefix: acme.example
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "prefix: acme.example",
        "settings.prefix (acme.example) is not the default the shipped webhook configurations match on",
        "re-run `gpu-admission policy render` and apply its output",
    ),
    "priority-class-undefined": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100], priorityClassName: gpu-infer}}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "classes: {infer:",
        "class 'infer' sets priorityClassName 'gpu-infer', which spec.priorityClasses does not define",
        "add gpu-infer: {value: ...} under spec.priorityClasses",
    ),
    "builtin-kind-overridden": (
        spec(
            """            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            workloadKinds:
              - apiVersion: kubeflow.org/v1
                kind: PyTorchJob
                mutate: true
                templates: [{path: spec.pytorchReplicaSpecs.*.template}]
            """
        ),
        "kind: PyTorchJob",
        "kubeflow.org/v1 PyTorchJob is a built-in kind: this entry replaces",
        "remove the entry to keep the shipped description",
    ),
    "mig-geometry-unstated": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8, isolation: [mig], mig: {strategy: mixed}}}
            classes: {infer: {pools: [a100], isolation: {default: mig}, defaultGPUMemory: 4Gi}}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "mig: {strategy: mixed}",
        "pool 'a100' does not say how its A100-40GB cards are partitioned",
        "set mig.layout to the nodes' nvidia.com/mig.config (all-1g.10gb, all-1g.5gb",
    ),
    "memory-above-card": (
        spec(
            """\
            pools: {a10: {gpuModel: A10, gpusPerNode: 4, isolation: [shared], sharing: {provider: aliyun-cgpu}}}
            classes:
              dev: {pools: [a10], isolation: {default: shared}, maxGPUMemory: 24Gi, defaultGPUMemory: 4Gi}
            namespaces: [{selector: {}, classes: [dev]}]
            """
        ),
        "dev: {pools: [a10]",
        # an A10 reports 23028Mi; gpushare advertises floor(23028 / 1024) = 22 GiB per card
        "maxGPUMemory 24Gi of class 'dev' is above what any device of its pools holds (22Gi",
        "lower maxGPUMemory to 22Gi",
    ),
    "memory-not-enforced": (
        spec(
            """\
            pools: {t4: {gpuModel: T4, gpusPerNode: 1, isolation: [shared], sharing: {provider: time-slicing}}}
            classes:
              dev: {pools: [t4], isolation: {default: shared}, defaultGPUMemory: 4Gi}
            namespaces: [{selector: {}, classes: [dev]}]
            """
        ),
        "dev: {pools: [t4]",
        "class 'dev' sizes GPU memory (defaultGPUMemory) but its pool 't4' is served by time-slicing",
        "use a memory-isolating stack",
    ),
    "mutation-off-enforced": (
        spec(
            """\
            settings:
              mutation: off
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "mutation: off",
        "settings.mutation is off and settings.enforcement is enforce: nothing places a class pod",
        "set mutation: apply before enforcing, or observe first",
    ),
    "system-critical-allowed": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes:
              infer: {pools: [a100], allowedPriorityClasses: [system-node-critical]}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "infer: {pools: [a100], allowedPriorityClasses",
        "class 'infer' names 'system-node-critical': scheduling-not-allowed denies it on every GPU pod",
        "remove it; exempt the namespaces",
    ),
    "kind-path-unmatched": (
        spec(
            """            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            workloadKinds:
              - apiVersion: example.com/v1
                kind: TrainRun
                mutate: true
                templates:
                  - path: "spec.worker[*].template"
                sample: {spec: {workers: [{template: {spec: {containers: []}}}]}}
            """
        ),
        'path: "spec.worker[*].template"',
        "template path 'spec.worker[*].template' matches nothing in the sample TrainRun",
        "fix the path",
    ),
    "device-taint-unknown": (
        spec(
            """\
            pools:
              a100: {gpuModel: A100-40GB, gpusPerNode: 8, allowedDeviceTaints: [gpu.nvidia.com/unmonitored]}
            classes:
              infer: {pools: [a100], allowedDeviceTaints: [example.com/resrved]}
            namespaces: [{selector: {}, classes: [infer]}]
            """
        ),
        "allowedDeviceTaints: [example.com/resrved]",
        "class 'infer' allows device taint 'example.com/resrved', which is neither built in nor declared",
        "declare it under spec.deviceTaints",
    ),
    "exception-expired": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            exceptions:
              - name: old-diag
                rules: [privileged-gpu]
                namespaces: {matchLabels: {team: diag}}
                subjects: [{kind: User, name: ci-bot}]
                expires: 2020-01-31
                reason: diagnostics
                owner: platform
            """
        ),
        "expires: 2020-01-31",
        "exception 'old-diag' expired on 2020-01-31 and no longer applies",
        "remove it, or set a new expires date",
    ),
    "exception-expiring": (
        spec(
            f"""\
            pools: {{a100: {{gpuModel: A100-40GB, gpusPerNode: 8}}}}
            classes: {{infer: {{pools: [a100]}}}}
            namespaces: [{{selector: {{}}, classes: [infer]}}]
            exceptions:
              - name: soon
                rules: [gang-required]
                namespaces: {{matchLabels: {{team: ml}}}}
                subjects: [{{kind: Group, name: ml}}]
                expires: {SOON}
                reason: migrating to gangs
                owner: ml-team
            """
        ),
        f"expires: {SOON}",
        f"exception 'soon' expires on {SOON}",
        "fix the workloads it covers, or renew it",
    ),
    "exception-every-namespace": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            exceptions:
              - name: everywhere
                rules: [privileged-gpu]
                namespaces: {}
                subjects: [{kind: ServiceAccount, namespace: gpu-operator, name: dcgm}]
                expires: 2099-01-31
                reason: the DCGM exporter runs in every namespace
                owner: platform
            """
        ),
        "namespaces: {}",
        "exception 'everywhere' applies in every namespace",
        "select the namespaces it is for",
    ),
    "exception-subject-exposed": (
        spec(
            """\
            pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
            classes: {infer: {pools: [a100]}}
            namespaces: [{selector: {}, classes: [infer]}]
            exceptions:
              - name: team-pipeline
                rules: [privileged-gpu]
                namespaces: {matchLabels: {kubernetes.io/metadata.name: ml}}
                subjects:
                  - {kind: User, name: ci-bot}
                  - {kind: ServiceAccount, namespace: ml, name: deployer}
                expires: 2099-01-31
                reason: the team's own pipeline
                owner: ml-team
            """
        ),
        "{kind: ServiceAccount, namespace: ml, name: deployer}",
        "exception 'team-pipeline' names ServiceAccount ml/deployer, and its namespace is one the exception applies",
        "keep the pipeline's service account in a namespace only the platform",
    ),
}


def test_every_warning_code_has_a_case():
    # pool-nodes-disagree needs Node objects (--context): tests/workflow/test_lint_context.py
    # device-class-unrendered needs DeviceClass objects (--context): tests/deploy/test_cluster_device_classes.py
    assert set(CASES) | {"pool-nodes-disagree", "device-class-unrendered"} == set(WARNING_CODES)


@pytest.mark.parametrize("code", sorted(CASES))
def test_warning_at_file_line_with_hint(tmp_path, cli, code):
    text, anchor, message, hint = CASES[code]
    policy = write_policy(tmp_path / "p", text, "policy.yaml")
    run = cli("policy", "lint", policy)
    assert run.code == 0, run.out  # warnings alone do not fail
    file = policy / "policy.yaml"
    lines = [line for line in run.out.splitlines() if f"[{code}]" in line]
    assert lines, run.out
    line = next((x for x in lines if message in x), None)
    assert line is not None, run.out
    assert line.startswith(f"{file}:{line_of(text, anchor)}:") and ": warning: spec." in line
    assert f"(hint: {hint}" in line
    strict = cli("policy", "lint", policy, "--strict")
    assert strict.code == 1 and "fails --strict" in strict.out


def test_warnings_in_json_and_github(tmp_path, cli):
    text, anchor, _, _ = CASES["unused-pool"]
    policy = write_policy(tmp_path / "p", text, "policy.yaml")
    report = json.loads(cli("policy", "lint", policy, "-o", "json").out)
    (issue,) = report["issues"]
    assert issue["code"] == "unused-pool" and issue["severity"] == "warning"
    assert issue["line"] == line_of(text, anchor) and issue["path"] == "spec.pools.spare"
    assert report["warnings"] == 1 and report["errors"] == 0 and report["exitCode"] == 0
    run = cli("policy", "lint", policy, "-o", "github")
    assert f"::warning file={policy / 'policy.yaml'},line={line_of(text, anchor)}," in run.out
    assert "title=[unused-pool]::spec.pools.spare: pool 'spare' is not listed" in run.out


def test_shadowing_is_proven_not_guessed(tmp_path, cli):
    """Disjoint or incomparable selectors are no warning; a narrower rule after a broader one is."""
    text = spec(
        """\
        pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
        classes: {infer: {pools: [a100]}}
        namespaces:
          - {selector: {matchLabels: {tier: training}}, classes: [infer]}
          - {selector: {matchLabels: {tier: serving}}, classes: [infer]}
          - {selector: {matchExpressions: [{key: team, operator: In, values: [a, b]}]}, classes: [infer]}
          - {selector: {matchLabels: {team: a, env: dev}}, classes: [infer]}
          - {selector: {matchExpressions: [{key: tier, operator: NotIn, values: [training]}]}, classes: [infer]}
          - {selector: {}, classes: [infer]}
        """
    )
    run = cli("policy", "lint", write_policy(tmp_path / "p", text))
    shadowed = [line for line in run.out.splitlines() if "[shadowed-namespace-rule]" in line]
    assert len(shadowed) == 1 and "namespaces[3] never applies: namespaces[2] selects team in (a,b)" in shadowed[0]


def test_warning_codes_are_documented():
    doc = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", doc, re.MULTILINE))
    assert set(WARNING_CODES) <= documented


@pytest.mark.parametrize(
    ("today", "codes", "phrase"),
    [
        ("2027-01-23", set(), ""),  # eight days ahead: quiet
        ("2027-01-24", {"exception-expiring"}, "expires on 2027-01-31 (in 7 days)"),
        ("2027-01-30", {"exception-expiring"}, "(in 1 day)"),
        ("2027-01-31", {"exception-expired"}, "expired on 2027-01-31 and no longer applies"),  # the day itself
        ("2027-06-01", {"exception-expired"}, "expired on 2027-01-31"),
    ],
)
def test_exception_expiry_at_a_fixed_date(today, codes, phrase):
    """(``render-needed`` is there whatever the day: see the next test.)"""
    from datetime import date

    from webhook.lint.checks import lint_texts

    text = spec(
        """\
        pools: {a100: {gpuModel: A100-40GB, gpusPerNode: 8}}
        classes: {infer: {pools: [a100]}}
        namespaces: [{selector: {}, classes: [infer]}]
        exceptions:
          - name: diag
            rules: [privileged-gpu]
            namespaces: {matchLabels: {team: diag}}
            subjects: [{kind: User, name: ci-bot}]
            expires: 2027-01-31
            reason: diagnostics
            owner: platform
        """
    )
    found = lint_texts([("policy.yaml", text)], today=date.fromisoformat(today))
    findings = [f for f in found if f.code != "render-needed"]
    assert {f.code for f in findings} == codes
    if phrase:
        (finding,) = findings
        assert phrase in finding.issue.message and finding.issue.line == line_of(text, "expires: 2027-01-31")


def test_a_policy_with_exceptions_needs_a_render(cli, tmp_path):
    """The shipped webhook configurations send no controller kinds to /mutate, where grants are written."""
    from tests.engine.test_exceptions import POLICY_DIR

    run = cli("policy", "lint", POLICY_DIR)
    (line,) = [x for x in run.out.splitlines() if "[render-needed]" in x]
    assert line.startswith(f"{POLICY_DIR / 'exceptions.yaml'}:6:") and "the policy has exceptions" in line


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_an_observe_mode_needs_a_render_and_is_no_mutation_warning(tmp_path, cli, mode):
    """Without a re-render the shipped validating webhook still fails closed and the in-tree deny binding
    still denies: lint says so at the setting; observing with mutation off is the intended first step."""
    text = spec(
        f"""\
        settings:
          enforcement: {mode}
          mutation: off
        pools: {{a100: {{gpuModel: A100-40GB, gpusPerNode: 8}}}}
        classes: {{infer: {{pools: [a100]}}}}
        namespaces: [{{selector: {{}}, classes: [infer]}}]
        """
    )
    policy = write_policy(tmp_path / "p", text, "policy.yaml")
    run = cli("policy", "lint", policy)
    needed = [x for x in run.out.splitlines() if "[render-needed]" in x]
    assert any(f":{line_of(text, f'enforcement: {mode}')}:" in x and "still fails closed" in x for x in needed)
    assert any(f":{line_of(text, 'mutation: off')}:" in x for x in needed)
    assert "[mutation-off-enforced]" not in run.out
