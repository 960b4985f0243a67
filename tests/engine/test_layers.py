"""The import graph runs one way: base values, the policy, the engine's model, its rules and mutations
(peers), the engine's entries, then the edges (server, CLI, check, audit, policy test, render, lint).

Read from the source with ``ast`` (every import, including those inside functions and under
``TYPE_CHECKING``), so an arrow that runs up fails here before it becomes an import cycle or a policy
that cannot load without the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "webhook"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("webhook.actions", "webhook.quantity", "webhook.validation_errors", "webhook.yaml_events", "webhook.yamlpos"),
    ("webhook.policy",),
    ("webhook.engine.model", "webhook.engine.patch", "webhook.engine.deadline"),
    ("webhook.engine.rules", "webhook.engine.mutations"),
    ("webhook.engine",),
)
"""Lowest first. A module may import its own layer and those below; anything not listed is an edge."""

PEERS = (("webhook.engine.rules", "webhook.engine.mutations"),)
"""Packages of one layer that must not import each other: a rule reads the model, never a mutation step."""


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_of(module: str) -> int:
    # the most specific package wins (webhook.engine.model before webhook.engine)
    best, depth = len(LAYERS), -1
    for index, packages in enumerate(LAYERS):
        for package in packages:
            if _within(module, package) and package.count(".") > depth:
                best, depth = index, package.count(".")
    return best


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names if alias.name.startswith("webhook"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("webhook"):
            # "from webhook.engine import rules" imports webhook.engine.rules: judge the submodule
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (ROOT.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    ROOT.parent / Path(*candidate.split("."))
                ).is_dir()
                out.append((node.lineno, candidate if is_module else node.module))
    return out


def _arrows() -> list[tuple[str, int, str]]:
    return [(_module_name(p), line, target) for p in sorted(ROOT.rglob("*.py")) for line, target in _imports(p)]


def test_no_arrow_runs_up() -> None:
    upward = [
        f"{source}:{line} imports {target}"
        for source, line, target in _arrows()
        if layer_of(target) > layer_of(source)
    ]
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


@pytest.mark.parametrize(("one", "other"), [*PEERS, *((b, a) for a, b in PEERS)])
def test_peers_do_not_import_each_other(one: str, other: str) -> None:
    crossing = [
        f"{source}:{line} imports {target}"
        for source, line, target in _arrows()
        if _within(source, one) and _within(target, other)
    ]
    assert not crossing, f"{one} must read the model, not {other}:\n" + "\n".join(crossing)


def test_the_layers_are_what_the_checks_see() -> None:
    """The checks above would pass vacuously if the layer table named packages that do not exist."""
    for packages in LAYERS:
        for package in packages:
            path = ROOT.parent / Path(*package.split("."))
            assert path.is_dir() or path.with_suffix(".py").exists(), package
    assert (
        layer_of("webhook.engine.model.gang") < layer_of("webhook.engine.rules.gang") < layer_of("webhook.engine.core")
    )
    assert layer_of("webhook.policy.loader") < layer_of("webhook.engine.model.intent")
    assert layer_of("webhook.server.app") == len(LAYERS)
