"""Where one ``report`` spends its time: per engine stage, per mutation step, per rule.

The engine has no single hotspot (a profile of the training pod spreads over ~20 rules and ~8
mutation steps), so the question "what would it take to halve it" is answered by this table, not by
a flame graph. Each stage is timed by wrapping the function the engine calls (module attributes
and the rule registry, in this process only); a wrapper adds about 0.2 µs per call, so the figures
are a little above the real cost and the total is the unwrapped run's. Stages nest: ``mutations``
contains the steps, ``rules`` the rules.

Run: ``python bench/engine_stages.py [--object training|inference] [--calls N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD, TRAINING_NAMESPACE
from webhook.engine import Request, report

Timings = dict[str, float]


def _timed(name: str, fn: Callable[..., Any], acc: Timings) -> Callable[..., Any]:
    clock = time.perf_counter

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[name] = acc.get(name, 0.0) + clock() - start

    return wrapper


def _rule(name: str, fn: Callable[..., Any], acc: Timings) -> Callable[..., Any]:
    clock = time.perf_counter

    def wrapper(ctx: Any) -> list[Any]:
        start = clock()
        try:
            return list(fn(ctx))  # a rule is a generator: its work happens while it is consumed
        finally:
            acc[name] = acc.get(name, 0.0) + clock() - start

    return wrapper


def instrument(acc: Timings) -> None:
    """Wrap the engine's stages, steps and rules so that each call adds its time to ``acc``."""
    import webhook.engine.core as core
    import webhook.engine.mutations as mutations
    from webhook.engine.model.context import Context, TemplateState
    from webhook.engine.rules import RULES

    for fn in ("shape_errors", "_read_templates", "unknown_keys", "_resolve_all", "_run_rules", "_waste",
               "_placements", "_template_at"):
        setattr(core, fn, _timed(f"stage {fn.lstrip('_')}", getattr(core, fn), acc))
    core.gang_model = _Proxy(core.gang_model, derive=_timed("stage gang model", core.gang_model.derive, acc))
    mutations.mutate = _timed("stage mutations", mutations.mutate, acc)
    mutations.TEMPLATE_STEPS = tuple((n, _timed(f"  step {n}", f, acc)) for n, f in mutations.TEMPLATE_STEPS)
    mutations.WORKLOAD_STEPS = tuple((n, _timed(f"  step {n}", f, acc)) for n, f in mutations.WORKLOAD_STEPS)
    mutations.TOPOLOGY_STEP = _timed("  step topology", mutations.TOPOLOGY_STEP, acc)
    mutations.DEVICE_ENV_STEP = _timed("  step device env", mutations.DEVICE_ENV_STEP, acc)
    TemplateState.inspect = _timed("stage inspect (devices of a template)", TemplateState.inspect, acc)
    Context.resolved = _timed("stage resolved (primary template)", Context.resolved, acc)
    for rule_id, r in list(RULES.items()):
        RULES[rule_id] = dataclasses.replace(r, check=_rule(f"  rule {rule_id}", r.check, acc))


class _Proxy:
    """A module stand-in that overrides some attributes (the engine calls ``gang_model.derive``)."""

    def __init__(self, module: Any, **overrides: Any) -> None:
        self._module, self._overrides = module, overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._module, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--object", choices=("training", "inference"), default="training")
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from webhook.policy import load_policy

    policy = load_policy("policies")
    request = (
        Request(TRAINING_JOB_POD, namespace="llm", namespace_labels=TRAINING_NAMESPACE)
        if args.object == "training"
        else Request(INFERENCE_POD, namespace="serving")
    )
    for _ in range(300):
        report(policy, request)
    clock = time.perf_counter
    best = float("inf")
    for _ in range(5):
        start = clock()
        for _ in range(args.calls):
            report(policy, request)
        best = min(best, (clock() - start) / args.calls)
    acc: Timings = {}
    instrument(acc)
    for _ in range(300):
        report(policy, request)
    acc.clear()
    start = clock()
    for _ in range(args.calls):
        report(policy, request)
    wrapped = (clock() - start) / args.calls
    print(f"{args.object} pod: report {best * 1e6:.1f} µs (best of 5 x {args.calls}); "
          f"instrumented {wrapped * 1e6:.1f} µs")
    print("| stage | µs per report |\n|---|---|")
    for name, seconds in sorted(acc.items(), key=lambda kv: -kv[1]):
        per = seconds / args.calls * 1e6
        if per >= 0.5:
            print(f"| {name} | {per:.1f} |")


if __name__ == "__main__":
    main()
