"""Best-of timing of ``report`` for the latency benchmark's objects, in the source tree given.

Comparing two trees by alternating them in one session is the only fair comparison on a noisy
machine: ``for t in OLD NEW OLD NEW; do python bench/engine_compare.py $t; done`` (an old tree is
``git archive <commit> | tar -x -C /tmp/old``). Each run imports the tree's own ``webhook`` and
``bench`` packages and uses its shipped ``policies/``.

Run: ``python bench/engine_compare.py [TREE] [--number N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=".", help="source tree to import (default: .)")
    parser.add_argument("--number", type=int, default=300, help="calls per timing (default 300)")
    parser.add_argument("--repeat", type=int, default=7, help="timings, the best is reported (default 7)")
    args = parser.parse_args()
    tree = os.path.abspath(args.tree)
    os.chdir(tree)
    sys.path.insert(0, tree)
    from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD, TRAINING_NAMESPACE
    from webhook.engine import Request, report
    from webhook.policy import load_policy

    policy = load_policy("policies")
    web = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]},
    }
    cases = {
        "training": Request(TRAINING_JOB_POD, namespace="llm", namespace_labels=TRAINING_NAMESPACE),
        "inference": Request(INFERENCE_POD, namespace="serving"),
        "non-gpu": Request(web),
    }
    out = []
    for name, request in cases.items():
        best = min(timeit.repeat(lambda r=request: report(policy, r), number=args.number, repeat=args.repeat))
        out.append(f"{name} {best / args.number * 1e6:.1f} µs")
    print(f"{tree}: " + ", ".join(out))


if __name__ == "__main__":
    main()
