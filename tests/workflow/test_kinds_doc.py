"""docs/policy.md's table of workload kinds says, for every built-in kind and gang backend, the keys the
webhook writes: checked against the shipped kind table (webhook/policy/builtin_kinds.yaml), so the
documentation cannot drift from what the engine does."""

from __future__ import annotations

from pathlib import Path

from webhook.policy.kinds import builtin_kinds, parse_path

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"
COLUMNS = {"volcano": 4, "kueue": 5, "coscheduling": 6, "kai": 7}


def _rows() -> dict[str, list[str]]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("| kind (apiVersion) | pod templates |")
    rows: dict[str, list[str]] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        for name in cells[0].split(", "):
            rows[name.split(" (")[0]] = cells
    return rows


def _shown(name: str) -> str:
    return name.replace("Volcano", "Volcano ") if name.startswith("Volcano") else name


def test_every_builtin_kind_has_a_row_naming_every_key_the_webhook_writes():
    rows = _rows()
    for kind in builtin_kinds():
        row = rows.get(_shown(kind.display))
        assert row is not None, f"docs/policy.md has no row for {kind.display}"
        assert len(row) == 8, row
        for backend, keys in kind.backends.items():
            cell = row[COLUMNS[backend.value]]
            for key in keys:
                if not key.write:
                    continue
                name = parse_path(key.path)[-1]  # a label/annotation key, or the field's own name
                assert str(name) in cell, f"{kind.display} / {backend.value}: {key.path} is not in {cell!r}"
        for backend, column in COLUMNS.items():
            if backend not in kind.backends:
                assert row[column].startswith(("—", "as its", "label on", "nothing")), (kind.display, backend)
