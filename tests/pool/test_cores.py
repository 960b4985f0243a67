"""How many workers ``check`` and ``audit`` start by default: never more than the pod's CPU limit.

The cgroup trees here are real directories with the kernel's file names and formats (cgroup v2
``cpu.max``; v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` under the ``cpu,cpuacct`` mount), as a
kubelet leaves them for a container with ``limits.cpu``."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook import pool
from webhook.pool import cgroup_cpu_quota, usable_cores


def _tree(root: Path, files: dict[str, str], membership: str) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = root / "proc-self-cgroup"
    proc.write_text(membership)
    return proc


POD = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope"


@pytest.mark.parametrize(
    ("files", "membership", "cores"),
    [
        # v2, a container with limits.cpu: 1500m (the kubelet writes quota and period)
        ({f"fs/{POD}/cpu.max": "150000 100000\n"}, f"0::/{POD}\n", 2),
        # v2, no limit on the container but one on its pod: the ancestor's applies
        ({f"fs/{POD}/cpu.max": "max 100000\n", "fs/kubepods.slice/kubepods-burstable.slice/"
          "kubepods-burstable-pod1.slice/cpu.max": "300000 100000\n"}, f"0::/{POD}\n", 3),
        # v2 with a cgroup namespace: the process sees "/" and the mount is its own cgroup
        ({"fs/cpu.max": "100000 100000\n"}, "0::/\n", 1),
        # v2, no limit anywhere
        ({f"fs/{POD}/cpu.max": "max 100000\n"}, f"0::/{POD}\n", None),
        # v1, the cpu and cpuacct controllers mounted together, quota of half a core
        ({"fs/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
          "fs/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"},
         "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n", 1),
        # v1, no quota (-1), as on this machine's host cgroup
        ({"fs/cpu/cpu.cfs_quota_us": "-1\n", "fs/cpu/cpu.cfs_period_us": "100000\n"}, "1:cpu:/\n", None),
        # nothing mounted where it should be, or an unreadable value: no cap rather than a failure
        ({}, f"0::/{POD}\n", None),
        ({f"fs/{POD}/cpu.max": "garbage\n"}, f"0::/{POD}\n", None),
    ],
)
def test_the_cgroup_quota_in_whole_cores(tmp_path: Path, files: dict[str, str], membership: str, cores) -> None:
    proc = _tree(tmp_path, files, membership)
    assert cgroup_cpu_quota(tmp_path / "fs", proc) == cores


def test_without_cgroups_there_is_no_cap(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path / "fs", tmp_path / "missing") is None


def test_the_default_worker_count_is_capped_by_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    uncapped = usable_cores()
    monkeypatch.setattr(pool, "cgroup_cpu_quota", lambda: 1)
    assert usable_cores() == 1
    monkeypatch.setattr(pool, "cgroup_cpu_quota", lambda: uncapped + 8)
    assert usable_cores() == uncapped  # a quota above the affinity does not add cores
