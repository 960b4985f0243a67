"""Build the real control plane (etcd, kube-apiserver, kube-scheduler, kubectl) from the Go module proxy.

The versions live in ``go.mod`` and ``go.sum`` beside this file, so the build is reproducible and the
binaries are the ones upstream releases (``CGO_ENABLED=0``, the version stamped in with ``-ldflags`` as
upstream's ``hack/lib/version.sh`` does, or ``/version`` would say v0.0.0). They go into a cache outside
the tracked tree, keyed by the Kubernetes version and a digest of ``go.mod`` + ``go.sum``: built once per
machine, reused by every test run and by a developer's ``python -m tests.e2e.plane up``. A changed pin
is a new key, so a stale binary is never reused. A build is written to a temporary directory and renamed
into place, under a lock, so an interrupted or concurrent build never leaves half a cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KUBERNETES_VERSION = "v1.36.3"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kubectl")
# the Go packages, in BINARIES' order; etcd's module root is its `package main`
PACKAGES = (
    "go.etcd.io/etcd/server/v3",
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    "k8s.io/kubernetes/cmd/kubectl",
)
# what `go build -o DIR/` names each package's binary (a /vN major suffix is dropped)
BUILT_NAMES = ("server", "kube-apiserver", "kube-scheduler", "kubectl")
_VERSION_PKG = "k8s.io/component-base/version"


class BuildError(RuntimeError):
    """The control plane could not be built; the message says which step and shows the tail of its log."""


def cache_root() -> Path:
    """``$GPU_ADMISSION_PLANE_CACHE``, else ``$XDG_CACHE_HOME/gpu-admission``, else ``~/.cache/gpu-admission``."""
    explicit = os.environ.get("GPU_ADMISSION_PLANE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-admission"


def cache_key() -> str:
    digest = hashlib.sha256((HERE / "go.mod").read_bytes() + (HERE / "go.sum").read_bytes()).hexdigest()[:12]
    return f"plane-{KUBERNETES_VERSION}-{digest}"


def bin_dir() -> Path:
    return cache_root() / cache_key() / "bin"


def built() -> bool:
    d = bin_dir()
    return all(os.access(d / name, os.X_OK) for name in BINARIES)


def go_missing() -> str | None:
    """Why this machine cannot build the plane, or None when it can."""
    if shutil.which("go") is None:
        return "no `go` on PATH (the end-to-end tier builds kube-apiserver 1.36 from the Go module proxy)"
    return None


def ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    stamps = {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    return "-s -w " + " ".join(f"-X {_VERSION_PKG}.{k}={v}" for k, v in stamps.items())


def build(log=sys.stderr) -> Path:
    """The cached binaries' directory, building them first if this machine has none for this pin."""
    if built():
        return bin_dir()
    why = go_missing()
    if why:
        raise BuildError(why)
    final = bin_dir()
    final.parent.mkdir(parents=True, exist_ok=True)
    lock_path = final.parent / ".lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second build waits for the first and then finds it done
        if built():
            return final
        staging = Path(tempfile.mkdtemp(prefix="bin-", dir=final.parent))
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        env.setdefault("GOTOOLCHAIN", "local")
        started = time.monotonic()
        print(f"building the control plane {KUBERNETES_VERSION} into {final} (cold: ~4 min on 2 idle cores)", file=log)
        log_file = final.parent / "build.log"
        with open(log_file, "w") as out:
            proc = subprocess.run(
                ["go", "build", "-trimpath", "-ldflags", ldflags(), "-o", str(staging) + "/", *PACKAGES],
                cwd=HERE,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = log_file.read_text(errors="replace")[-4000:]
            raise BuildError(f"`go build` of the control plane failed (exit {proc.returncode}); {log_file}:\n{tail}")
        for built_name, name in zip(BUILT_NAMES, BINARIES, strict=True):
            (staging / built_name).rename(staging / name) if built_name != name else None
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        (final.parent / "build-seconds").write_text(f"{time.monotonic() - started:.0f}\n")
        print(f"built the control plane in {time.monotonic() - started:.0f} s", file=log)
    return final


if __name__ == "__main__":
    try:
        print(build())
    except BuildError as exc:
        print(f"tests/e2e/plane: {exc}", file=sys.stderr)
        sys.exit(2)
