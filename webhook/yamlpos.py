"""YAML with positions: load a document fast, and find the line of any field path only when needed.

The libyaml composer gives every node a start mark. Loading through the composer costs little more
than a plain load, and keeping the node tree lets errors name ``file:line:column`` for the exact field
(``spec.minMember``) rather than just the document.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

try:  # libyaml: an order of magnitude faster; the pure-Python loader is the fallback.
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader


class _NoDuplicatesLoader(_Loader):  # type: ignore[misc, valid-type]
    """Duplicate mapping keys silently keep the last value in PyYAML; in a policy that hides a mistake."""


@dataclass(frozen=True, slots=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


@dataclass(slots=True)
class Document:
    """One YAML document: its data, its composed node tree and where it starts in the source."""

    data: Any
    node: yaml.Node | None
    line: int  # 1-based line of the document's first content
    text: str  # the document's source text, verbatim

    def position(self, path: Sequence[str | int]) -> Position:
        """Position of the deepest existing node on ``path`` (a missing key points at its parent)."""
        if self.node is None:
            return Position(self.line, 1)
        pos = locate(self.node, path, default=Position(1, 1))
        return Position(pos.line + self.line - 1, pos.column)

    def ensure_nodes(self) -> Document:
        """Compose the node tree on demand: the fast path (``check``) loads data only."""
        if self.node is None and self.text:
            self.node = compose(self.text)[1]
        return self


@dataclass(frozen=True, slots=True)
class SyntaxProblem:
    """A YAML syntax error, with its position in the whole file (libyaml marks are read-only)."""

    line: int
    column: int
    problem: str


def locate(node: yaml.Node | None, path: Sequence[str | int], default: Position) -> Position:
    best = default
    if node is not None:
        best = Position(node.start_mark.line + 1, node.start_mark.column + 1)
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    found = (key_node, value_node)
                    break
            if found is None:
                return best
            key_node, node = found
            best = Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            best = Position(node.start_mark.line + 1, node.start_mark.column + 1)
        else:
            return best
    return best


def duplicate_keys(
    node: yaml.Node | None, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple, Position]]:
    """Mapping keys that appear twice: PyYAML would silently keep the last one."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                yield (*path, key), Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            seen.add(key)
            yield from duplicate_keys(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from duplicate_keys(item, (*path, index))


def _is_separator(line: str) -> bool:
    return (line.startswith("---") and (len(line) == 3 or line[3] in " \t\r\n")) or (
        line.startswith("...") and (len(line) == 3 or line[3] in " \t\r\n")
    )


def split_documents(text: str) -> list[tuple[int, str]]:
    """Split a multi-document stream into (first line, text) chunks, keeping every byte.

    A ``---`` or ``...`` at column 0 always ends a document in YAML (even inside a block scalar),
    so splitting on lines is exact. Keeping each chunk verbatim lets ``check -o yaml`` reprint an
    untouched document byte for byte, comments included.
    """
    chunks: list[tuple[int, str]] = []
    start_line, current = 1, []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if _is_separator(line):
            chunks.append((start_line, "".join(current)))
            rest = line[3:]
            if rest.strip() and not rest.lstrip().startswith("#") and line.startswith("---"):
                current, start_line = [" " * 3 + rest], number  # '--- value' on one line
            else:
                current, start_line = [], number + 1
            continue
        current.append(line)
    chunks.append((start_line, "".join(current)))
    return chunks


def compose(text: str) -> tuple[Any, yaml.Node | None]:
    """Parse one document into (data, node tree); raises ``yaml.YAMLError`` with a mark."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node


def load_fast(text: str) -> Any:
    """Data only: the hot path of ``check`` when no position is needed."""
    return yaml.load(text, Loader=_Loader)


def has_content(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not stripped.startswith("%"):
            return True
    return False


def iter_documents(text: str, *, with_nodes: bool) -> Iterator[Document | SyntaxProblem]:
    """Documents of a stream; a syntax error is yielded in place so the other documents still count.

    Positions are kept relative to each chunk and offset by the chunk's first line on lookup.
    """
    for line, chunk in split_documents(text):
        if not has_content(chunk):
            continue
        try:
            if with_nodes:
                data, node = compose(chunk)
            else:
                data, node = load_fast(chunk), None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            context = getattr(exc, "context", None)
            if context:
                problem = f"{problem} ({context})"
            yield SyntaxProblem(
                (mark.line + line) if mark is not None else line,
                (mark.column + 1) if mark is not None else 1,
                problem,
            )
            continue
        yield Document(data=data, node=node, line=line, text=chunk)
