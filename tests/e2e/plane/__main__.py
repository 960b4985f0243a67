"""``python -m tests.e2e.plane build|up|down|env``: the end-to-end tier's control plane, by hand.

``up DIR`` builds (once per machine) and starts etcd, kube-apiserver and kube-scheduler with their
files in DIR and prints how to reach them; ``down DIR`` stops exactly the processes ``up`` started.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.e2e.plane import build, controlplane


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.e2e.plane", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build the binaries into the per-machine cache (no-op when cached)")
    for name, text in (("up", "start the plane"), ("down", "stop the plane"), ("env", "print its kubeconfig")):
        q = sub.add_parser(name, help=text)
        q.add_argument("dir", type=Path, help="the plane's directory (certificates, kubeconfigs, logs, etcd data)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "build":
            print(build.build())
        elif args.cmd == "up":
            plane = controlplane.start(args.dir.resolve(), build.build())
            print(f"kube-apiserver {plane.server}; processes {plane.pids}")
            print(f"export KUBECONFIG={plane.admin_kubeconfig}; alias kubectl={plane.bin_dir / 'kubectl'}")
            print(f"stop with: python -m tests.e2e.plane down {args.dir}")
        elif args.cmd == "down":
            controlplane.stop(args.dir.resolve())
        else:
            print(f"export KUBECONFIG={(args.dir / 'admin.kubeconfig').resolve()}")
    except (build.BuildError, controlplane.PlaneError) as exc:
        print(f"python -m tests.e2e.plane {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
