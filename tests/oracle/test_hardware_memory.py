"""Every model x stack x memory step against an oracle written from the sourced tables, not from the catalog.

The tables below are copied from the sources (not imported from ``webhook``): what nodes report per card
(GFD ``nvidia.com/gpu.memory`` = NVML total, MiB, as nvidia-smi prints it) and what each MIG profile holds
(``nvidia-smi mig -lgip``, GiB with two decimals). The rounding rules are each device plugin's:

- Alibaba gpushare/cGPU: ``aliyun.com/gpu-mem`` in GiB, a card advertises floor(MiB / 1024)
  (AliyunContainerService/gpushare-device-plugin, ``--memory-unit=GiB``); a request rounds up;
- Tencent qGPU: ``tke.cloud.tencent.com/qgpu-memory`` whole GiB, 1 GiB granularity
  (tencentcloud.com/document/product/457/59103); the card's capacity is not documented: counted like cGPU;
- HAMi ``nvidia.com/gpumem`` and Volcano vGPU ``volcano.sh/vgpu-memory``: MiB of the card (memoryFactor 1);
- exclusive and time-slicing: the card; MIG: the smallest plain profile that holds the request.

A step the oracle says no device holds must be denied ``gpu-memory-exceeded`` with the largest that fits.
"""

from __future__ import annotations

import math

import pytest

from tests.engine.helpers import intent, limits, mutated, pod, rules, violation
from webhook.engine import Request, report
from webhook.policy import load_policy_texts

MIB = 2**20
GIB = 2**30

# card -> MiB per card as nodes report it. Sources (public nvidia-smi / GFD output of each card):
CARD_MIB = {
    "A30": 24576,  # nvidia-smi "24576MiB", NVIDIA A30
    "A100-40GB": 40960,  # nvidia-smi "40960MiB", NVIDIA A100-SXM4-40GB
    "A100-80GB": 81920,  # nvidia-smi "81920MiB", NVIDIA A100-SXM4-80GB
    "H100-80GB": 81559,  # GFD nvidia.com/gpu.memory=81559 (NVIDIA-H100-PCIe, NVIDIA-H100-80GB-HBM3)
    "H100-94GB": 95830,  # nvidia-smi "95830MiB", NVIDIA H100 NVL
    "H200-141GB": 143771,  # nvidia-smi "143771MiB", NVIDIA H200
    "GH200-96GB": 97871,  # nvidia-smi "97871MiB", NVIDIA GH200 480GB
    "B200": 183359,  # nvidia-smi "183359MiB", NVIDIA B200
    "T4": 15360,  # GFD nvidia.com/gpu.memory=15360, Tesla-T4
    "L4": 23034,  # nvidia-smi "23034MiB", NVIDIA L4
    "A10": 23028,  # nvidia-smi "23028MiB", NVIDIA A10 / A10G
    "L40S": 46068,  # nvidia-smi "46068MiB", NVIDIA L40S
}

# plain MIG profile -> GiB as `nvidia-smi mig -lgip` lists it (x 1024 = MiB; the listing is in 1/8 GiB steps)
MIG_GIB = {
    "A30": {"1g.6gb": 5.8125, "2g.12gb": 11.6875, "4g.24gb": 23.4375},
    "A100-40GB": {
        "1g.5gb": 4.75, "1g.10gb": 9.625, "2g.10gb": 9.625, "3g.20gb": 19.5, "4g.20gb": 19.5, "7g.40gb": 39.25,
    },
    "A100-80GB": {
        "1g.10gb": 9.5, "1g.20gb": 19.5, "2g.20gb": 19.5, "3g.40gb": 39.25, "4g.40gb": 39.25, "7g.80gb": 79.0,
    },
    "H100-80GB": {
        "1g.10gb": 9.75, "1g.20gb": 19.625, "2g.20gb": 19.625, "3g.40gb": 39.5, "4g.40gb": 39.5, "7g.80gb": 79.25,
    },
    "H100-94GB": {
        "1g.12gb": 10.625, "1g.24gb": 21.5, "2g.24gb": 21.5, "3g.47gb": 46.125, "4g.47gb": 46.125, "7g.94gb": 92.625,
    },
    "GH200-96GB": {
        "1g.12gb": 11.0, "1g.24gb": 23.0, "2g.24gb": 23.0, "3g.48gb": 46.5, "4g.48gb": 46.5, "7g.96gb": 93.0,
    },
    "H200-141GB": {
        "1g.18gb": 16.0, "1g.35gb": 32.5, "2g.35gb": 32.5, "3g.71gb": 69.75, "4g.71gb": 69.75, "7g.141gb": 140.0,
    },
}  # fmt: skip
# B200 has no public listing: the catalog's conservative estimate is checked for order, not value (below).

STACKS = ("exclusive", "mig", "aliyun-cgpu", "tencent-qgpu", "hami", "volcano-vgpu", "time-slicing")


def _pool_name(model: str, stack: str) -> str:
    return f"{model.lower()}-{stack}".replace(".", "-")


def _policy_text() -> str:
    pools, mig_pools, shared_pools, whole_pools = [], [], [], []
    for model in CARD_MIB:
        for stack in STACKS:
            if stack == "mig" and model not in MIG_GIB:
                continue
            name = _pool_name(model, stack)
            body = f"{{gpuModel: {model}, gpusPerNode: 8, nodeSelector: {{pool: {name}}}"
            if stack == "exclusive":
                body += ", isolation: [exclusive]}"
                whole_pools.append(name)
            elif stack == "mig":
                body += ", isolation: [mig], mig: {strategy: mixed}}"
                mig_pools.append(name)
            else:
                body += f", isolation: [shared], sharing: {{provider: {stack}}}}}"
                shared_pools.append(name)
            pools.append(f"    {name}: {body}")
    return (
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n  pools:\n"
        + "\n".join(pools)
        + "\n  classes:\n"
        + f"    whole: {{pools: [{', '.join(whole_pools)}], isolation: {{default: exclusive}}, maxGPUs: 8}}\n"
        + f"    slice: {{pools: [{', '.join(mig_pools)}], isolation: {{default: mig}}}}\n"
        + f"    share: {{pools: [{', '.join(shared_pools)}], isolation: {{default: shared}}, maxGPUs: 8}}\n"
        + "  namespaces: [{selector: {}, classes: [whole, slice, share]}]\n"
        + "  rules: {inference-not-guaranteed: {action: 'off'}}\n"
    )


@pytest.fixture(scope="module")
def hardware():
    return load_policy_texts([("hardware.yaml", _policy_text())])


def _steps(model: str) -> list[int]:
    """MiB: every 2 GiB up to past the card, and both sides of every boundary the oracle knows."""
    card = CARD_MIB[model]
    steps = set(range(512, card + 2048, 2048))
    for edge in [card, (card // 1024) * 1024, *(int(g * 1024) for g in MIG_GIB.get(model, {}).values())]:
        steps.update({edge - 1, edge, edge + 1})
    return sorted(s for s in steps if s > 0)


def _oracle(model: str, stack: str, mib: int) -> dict[str, str] | int:
    """The resources a pod asking ``mib`` MiB gets, or the largest request (MiB) that fits when none does."""
    card = CARD_MIB[model]
    if stack in ("exclusive", "time-slicing"):
        return {"nvidia.com/gpu": "1"} if mib <= card else card
    if stack == "mig":
        table = sorted(MIG_GIB[model].items(), key=lambda kv: (kv[1], int(kv[0].split("g")[0])))
        for profile, gib in table:
            if gib * 1024 >= mib:
                return {f"nvidia.com/mig-{profile}": "1"}
        return int(table[-1][1] * 1024)
    if stack in ("aliyun-cgpu", "tencent-qgpu"):
        per_card = card // 1024
        gib = math.ceil(mib / 1024)
        if gib > per_card:
            return per_card * 1024
        key = "aliyun.com/gpu-mem" if stack == "aliyun-cgpu" else "tke.cloud.tencent.com/qgpu-memory"
        return {key: str(gib)}
    if mib > card:
        return card
    if stack == "hami":
        return {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}
    return {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(mib)}


def _quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


@pytest.mark.parametrize("model", sorted(CARD_MIB))
def test_every_stack_and_memory_step_matches_the_oracle(hardware, model):
    checked = 0
    for stack in STACKS:
        if stack == "mig" and model not in MIG_GIB:
            continue
        cls = {"exclusive": "whole", "mig": "slice"}.get(stack, "share")
        for mib in _steps(model):
            meta = intent(cls, gpu_memory=f"{mib}Mi", pool=_pool_name(model, stack))
            d = report(hardware, Request(pod(meta), namespace="team"))
            expected = _oracle(model, stack, mib)
            where = f"{model} {stack} {mib}Mi"
            if isinstance(expected, dict):
                assert d.allowed, (where, d.message)
                assert limits(mutated(d)) == expected, where
            else:
                assert not d.allowed and "gpu-memory-exceeded" in rules(d), (where, d.message)
                message = violation(d, "gpu-memory-exceeded").message
                assert f"ask for at most {_quantity(expected)}" in message, (where, message)
            checked += 1
    assert checked > 50  # the loop really ran (a T4 has 6 stacks x ~12 steps)


def test_b200_estimates_keep_the_profiles_order_and_stay_below_the_card(hardware):
    """No public -lgip listing of a B200: the catalog's estimates must at least order like the names and fit."""
    pool = hardware.pools[_pool_name("B200", "exclusive")]
    profiles = {p.name: p.memory for p in pool.gpu.profiles}
    assert profiles["1g.23gb"] < profiles["1g.45gb"] == profiles["2g.45gb"] < profiles["3g.90gb"]
    assert profiles["3g.90gb"] == profiles["4g.90gb"] < profiles["7g.180gb"] <= CARD_MIB["B200"] * MIB
