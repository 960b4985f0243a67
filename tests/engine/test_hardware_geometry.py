"""Pools translate to the hardware their nodes have: MIG geometry (mig-parted layouts, profiles with
counts), the default policy's classes at their defaults and maxima, several shared cards per pod with each
vendor's keys, time-slicing's unenforced memory, hints that name only what the class can get, and the gang
capacity of a MIG layout."""

from __future__ import annotations

import pytest

from tests.conftest import POLICIES, ROOT
from tests.engine.helpers import (
    assert_valid,
    container,
    intent,
    job,
    limits,
    mutated,
    pod,
    rules,
    run,
    template_meta,
)
from tests.engine.helpers import violation as find
from webhook.check.waste import WasteTotals, describe
from webhook.engine import Request, report
from webhook.policy import load_policy, load_policy_texts
from webhook.render import RenderOptions
from webhook.render.claimtemplates import render as render_templates

# mig-parted's all-balanced config per device ID (NVIDIA/mig-parted deployments/systemd/config-default.yaml,
# bd7160f): written out here, not read from the catalog
ALL_BALANCED = {
    "A30": {"1g.6gb": 2, "2g.12gb": 1},
    "A100-40GB": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    "A100-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H100-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H100-94GB": {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1},
    "H200-141GB": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
    "GH200-96GB": {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1},
    "B200": {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
}

HEAD = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n"


def _load(body: str):
    return load_policy_texts([("p.yaml", HEAD + body)])


@pytest.mark.parametrize("model", sorted(ALL_BALANCED))
def test_a_layout_name_gives_exactly_mig_parteds_profiles(model):
    policy = _load(
        f"  pools: {{p: {{gpuModel: {model}, gpusPerNode: 8, isolation: [mig], "
        "mig: {strategy: mixed, layout: all-balanced}}}\n"
        "  classes: {c: {pools: [p], isolation: {default: mig}}}\n"
        "  namespaces: [{selector: {}, classes: [c]}]\n"
    )
    assert {p.name: p.per_gpu for p in policy.pools["p"].profiles} == ALL_BALANCED[model]


def test_all_1g_10gb_follows_mig_parteds_device_filter():
    """The same config name means 4 instances on an A100-40GB and 7 on an A100-80GB (device filters)."""
    counts = {}
    for model in ("A100-40GB", "A100-80GB"):
        policy = _load(
            f"  pools: {{p: {{gpuModel: {model}, gpusPerNode: 8, isolation: [mig], "
            "mig: {layout: all-1g.10gb}}}\n  classes: {c: {pools: [p], isolation: {default: mig}}}\n"
            "  namespaces: [{selector: {}, classes: [c]}]\n"
        )
        counts[model] = {p.name: p.per_gpu for p in policy.pools["p"].profiles}
    assert counts == {"A100-40GB": {"1g.10gb": 4}, "A100-80GB": {"1g.10gb": 7}}


def test_profiles_with_counts_and_as_a_list():
    policy = _load(
        "  pools:\n"
        "    counted: {gpuModel: H100-80GB, gpusPerNode: 8, isolation: [mig], mig: {profiles: {3g.40gb: 2}}}\n"
        "    listed: {gpuModel: H100-80GB, gpusPerNode: 8, isolation: [mig], mig: {profiles: [1g.10gb, 3g.40gb]}}\n"
        "  classes: {c: {pools: [counted, listed], isolation: {default: mig}}}\n"
        "  namespaces: [{selector: {}, classes: [c]}]\n"
    )
    assert {p.name: p.per_gpu for p in policy.pools["counted"].profiles} == {"3g.40gb": 2}
    assert {p.name: p.per_gpu for p in policy.pools["listed"].profiles} == {"1g.10gb": 7, "3g.40gb": 2}
    # 8Gi on the counted pool: only 3g.40gb is there, never a 1g.10gb the nodes lack
    d = run(policy, pod(intent("c", gpu_memory="8Gi", pool="counted")))
    assert limits(mutated(d)) == {"nvidia.com/mig-3g.40gb": "1"}
    assert_valid(mutated(d))
    d = run(policy, pod(intent("c", gpu_memory="8Gi"), [container(limits={"nvidia.com/mig-1g.10gb": "1"})]))
    assert "mig-profile-unavailable" not in rules(d)  # listed offers it (the class's first fitting pool)


# --- the default policy at its classes' defaults and maxima ----------------------------------------------


@pytest.fixture(scope="module")
def default():
    return load_policy(POLICIES)


@pytest.mark.parametrize(
    ("workload", "memory", "expected"),
    [
        ("inference", None, {"nvidia.com/mig-1g.5gb": "1"}),  # defaultGPUMemory 4Gi: 1g.5gb holds 4.75Gi
        ("inference", "19968Mi", {"nvidia.com/mig-3g.20gb": "1"}),  # the largest all-balanced profile, exactly
        ("batch", None, {"nvidia.com/mig-2g.10gb": "1"}),  # defaultGPUMemory 9Gi: 2g.10gb holds 9.625Gi
        ("dev", None, {"aliyun.com/gpu-mem": "4"}),  # defaultGPUMemory 4Gi
        ("dev", "22Gi", {"aliyun.com/gpu-mem": "22"}),  # maxGPUMemory: all an A10 gives on gpushare
    ],
)
def test_default_policy_classes_fit_at_their_defaults_and_maxima(default, workload, memory, expected):
    meta = intent(workload, gpu_memory=memory) if memory else intent(workload)
    d = run(default, pod(meta))
    assert d.allowed, d.message
    assert {k: v for k, v in limits(mutated(d)).items() if k not in ("cpu", "memory")} == expected
    assert_valid(mutated(d))


@pytest.mark.parametrize(("workload", "memory"), [("inference", "19969Mi"), ("batch", "20Gi"), ("dev", "23Gi")])
def test_default_policy_denies_just_above_what_the_nodes_give(default, workload, memory):
    d = run(default, pod(intent(workload, gpu_memory=memory)))
    assert not d.allowed and "gpu-memory-exceeded" in rules(d), d.message


def test_default_policy_lints_clean_of_memory_warnings(cli_lint_default):
    assert cli_lint_default == []


@pytest.fixture
def cli_lint_default():
    from webhook.lint.checks import lint_path

    return [f.render() for f in lint_path(POLICIES).findings]


# --- the DRA example's rendered templates -------------------------------------------------------------


def test_dra_example_renders_only_what_its_nodes_have():
    policy = load_policy(ROOT / "examples" / "dra-policy")
    names = {t["metadata"]["name"] for t in render_templates(policy, RenderOptions(namespaces=("team-a",)))}
    mig = {n for n in names if n.startswith("gpu-admission-mig-")}
    mem = {n for n in names if n.startswith("gpu-admission-mem-")}
    assert mig == {"gpu-admission-mig-1g-5gb", "gpu-admission-mig-2g-10gb", "gpu-admission-mig-3g-20gb"}
    # the A10 pool's slices: none above the 23028Mi the card reports
    assert mem == {f"gpu-admission-mem-{s}" for s in ("1gi", "2gi", "4gi", "8gi", "12gi", "22gi")}
    for t in render_templates(policy, RenderOptions(namespaces=("team-a",))):
        asked = t["spec"]["spec"]["devices"]["requests"][0]["exactly"].get("capacity")
        if asked is not None:
            quantity = asked["requests"]["memory"]
            assert quantity.endswith("Gi") and int(quantity[:-2]) * 1024 <= 23028


def test_dra_example_dev_above_the_card_is_denied():
    policy = load_policy(ROOT / "examples" / "dra-policy")
    d = run(policy, pod(intent("dev", gpu_memory="23Gi")))
    assert "gpu-memory-exceeded" in rules(d)


# --- several shared cards per pod -------------------------------------------------------------------------

STACK = "{{gpuModel: T4, gpusPerNode: 4, nodeSelector: {{s: {0}}}, isolation: [shared], sharing: {{provider: {1}}}}}"
SHARED = (
    "  pools:\n"
    + "".join(
        f"    {name}: {STACK.format(name, provider)}\n"
        for name, provider in (
            ("hami", "hami"),
            ("vgpu", "volcano-vgpu"),
            ("cgpu", "aliyun-cgpu"),
            ("qgpu", "tencent-qgpu"),
            ("ts", "time-slicing"),
        )
    )
    + """\
    whole: {gpuModel: T4, gpusPerNode: 4, nodeSelector: {s: whole}, isolation: [exclusive]}
  classes:
    share: {pools: [hami, vgpu, cgpu, qgpu, ts], isolation: {default: shared}, maxGPUs: 4}
    full: {pools: [whole], isolation: {default: exclusive}, maxGPUs: 4}
  namespaces: [{selector: {}, classes: [share, full]}]
"""
)


@pytest.fixture(scope="module")
def shared():
    return _load(SHARED)


@pytest.mark.parametrize(
    ("pool", "expected", "labels"),
    [
        # HAMi: nvidia.com/gpu is the number of cards, gpumem is MiB per card
        ("hami", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3072"}, {}),
        # Volcano vGPU: vgpu-number cards, vgpu-memory MiB per vGPU
        ("vgpu", {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "3072"}, {}),
        # ACK multi-GPU sharing: pod label aliyun.com/gpu-count, gpu-mem the total (an equal share of each card)
        ("cgpu", {"aliyun.com/gpu-mem": "6"}, {"aliyun.com/gpu-count": "2"}),
    ],
)
def test_several_shared_cards_with_each_vendors_keys(shared, pool, expected, labels):
    d = run(shared, pod(intent("share", gpus=2, gpu_memory="3Gi", pool=pool)))
    assert d.allowed, d.message
    out = mutated(d)
    assert limits(out) == expected
    for key, value in labels.items():
        assert template_meta(out)["labels"][key] == value
    assert_valid(out)


@pytest.mark.parametrize("pool", ["qgpu", "ts"])
def test_several_shared_cards_where_the_stack_cannot(shared, pool):
    d = run(shared, pod(intent("share", gpus=2, gpu_memory="3Gi", pool=pool)))
    v = find(d, "intent-invalid")
    assert "ask for 1" in v.message and "isolation exclusive" in v.message


def test_several_shared_cards_count_per_card_memory_against_the_card(shared):
    # 15Gi per card: a T4 reports 15360Mi, HAMi counts MiB of the card, so 15Gi fits and 15361Mi does not
    assert run(shared, pod(intent("share", gpus=2, gpu_memory="15Gi", pool="hami"))).allowed
    d = run(shared, pod(intent("share", gpus=2, gpu_memory="15361Mi", pool="hami")))
    assert "gpu-memory-exceeded" in rules(d)
    # cGPU: floor(15360 / 1024) = 15 GiB per card
    d = run(shared, pod(intent("share", gpu_memory="16Gi", pool="cgpu")))
    assert "at most 15Gi (aliyun.com/gpu-mem: 15 per card)" in find(d, "gpu-memory-exceeded").message


# --- time-slicing is not memory isolation --------------------------------------------------------------


def test_time_slicing_warns_that_memory_is_not_enforced_and_counts_the_card_once(shared):
    d = run(shared, pod(intent("share", gpu_memory="4Gi", pool="ts")))
    assert d.allowed
    v = find(d, "whole-gpu-waste")
    assert "gpu-memory 4Gi is not enforced: pool ts time-slices whole T4 cards" in v.message
    assert len(v.message) <= 120
    assert d.waste is not None and d.waste.shared and d.waste.wasted_bytes == 0
    text = describe(d.waste)
    assert "not enforced" in text and "% used" not in text and "idle" not in text
    totals = WasteTotals()
    totals.add(d.waste)
    assert totals.allocated_bytes == 0 and totals.shared_objects == 1
    assert totals.line() == "1 object on time-sliced cards (memory not isolated)"


def test_time_slicing_without_memory_is_not_a_whole_card_each(shared):
    d = report(shared, Request(pod(intent("share", pool="ts")), namespace="team"))
    assert d.allowed and d.waste is not None and d.waste.shared
    assert "whole-gpu-waste" not in rules(d)


# --- hints name only what the class and its pools serve -------------------------------------------------


def test_whole_gpu_waste_on_a_t4_never_suggests_mig(shared):
    d = run(shared, pod(intent("full", gpu_memory="2Gi")))
    v = find(d, "whole-gpu-waste")
    assert "mig" not in v.message and "shared" not in v.message  # class full allows only exclusive


def test_whole_gpu_waste_suggests_the_profile_the_pool_has(default):
    d = run(default, pod(intent("inference", gpu_memory="8Gi", isolation="exclusive")))
    assert "use isolation mig (MIG 2g.10gb on pool infer-a100)" in find(d, "whole-gpu-waste").message


# --- the gang capacity check counts the layout's instances ------------------------------------------------

GANG = """\
  pools:
    mig: {gpuModel: A100-40GB, gpusPerNode: 8, nodes: 2, nodeSelector: {p: mig}, isolation: [mig],
          mig: {layout: all-balanced}}
  classes:
    par: {pools: [mig], isolation: {default: mig}, gang: {backend: volcano, required: true}}
  namespaces: [{selector: {}, classes: [par]}]
"""


@pytest.mark.parametrize(("pods", "fits"), [(16, True), (17, False)])
def test_gang_capacity_is_nodes_x_gpus_x_the_layouts_instances(pods, fits):
    """2 nodes x 8 GPUs x one 3g.20gb each (all-balanced) = 16: a 17th pod never starts."""
    policy = _load(GANG)
    obj = job(intent("par", gpu_memory="12Gi"), parallelism=pods)
    obj["spec"]["completions"] = pods
    d = run(policy, obj)
    if fits:
        assert "gang-unschedulable" not in rules(d), d.message
    else:
        message = find(d, "gang-unschedulable").message
        assert "17 MIG 3g.20gb devices" in message and "2 nodes x 8 GPUs x 1 3g.20gb per GPU (16)" in message
