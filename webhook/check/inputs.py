"""Where manifests come from: files, directories (recursively) and stdin, each read once."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # what messages call it: the path as given, or "<stdin>"
    text: str | None
    error: str | None = None


def read_sources(paths: list[str]) -> Iterator[Source]:
    for raw in paths:
        if raw == "-":
            yield Source("<stdin>", sys.stdin.read())
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
            if not files:
                yield Source(raw, None, "directory holds no *.yaml, *.yml or *.json files")
            for file in files:
                yield _read(file)
        else:
            yield _read(path)


def _read(path: Path) -> Source:
    try:
        return Source(str(path), path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Source(str(path), None, "no such file")
    except IsADirectoryError:
        return Source(str(path), None, "is a directory")
    except (OSError, UnicodeDecodeError) as exc:
        return Source(str(path), None, f"cannot read: {exc}")
