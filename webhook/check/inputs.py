"""Where manifests come from: files, directories (recursively) and stdin, read line by line.

Nothing here holds a whole input in memory: a source is opened when it is read and yields its lines,
so ``check`` keeps one document at a time however large the file (a 50 MB stream stays flat). Stdin is
copied to a temporary file first, because ``check`` reads its inputs twice: once for the context
objects they carry (Namespaces, Nodes, claim templates, device classes), then to judge them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import IO

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "<stdin>"


BLOCK = 1 << 20
"""Bytes per read of :meth:`Source.blocks`."""


class ReadError(Exception):
    """An input that stops being readable part way (not UTF-8, an I/O error): ``line`` is where."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # what messages call it: the path as given (or found under a directory), or "<stdin>"
    path: Path | None = None
    error: str | None = None  # unreadable before the first line: a missing file, a permission
    empty: str | None = None  # holds nothing to check, and why (a directory with no manifests)
    note: str | None = None  # not manifests, skipped with this note (kustomize configuration, a Helm chart)
    spool: IO[bytes] | None = None  # stdin, on disk

    def lines(self, errors: list[ReadError] | None = None) -> Iterator[str]:
        """The source's lines, line endings kept (``-o yaml`` reprints documents verbatim).

        UTF-8, with or without a byte-order mark (as kubectl reads it), decoded line by line so that a
        bad byte is reported at its own line and the lines before it are already out. A line that is
        not UTF-8 raises :class:`ReadError` at that line, or, given ``errors``, is recorded there and
        read on (with U+FFFD for the bad bytes) so the caller can report that document and keep the
        file's good ones. A read error raises :class:`ReadError` with the line it stopped at.
        """
        stream = self._open()
        number = 0
        try:
            for raw in stream:
                number += 1
                yield _decode(raw, number, errors)
        except OSError as exc:
            raise ReadError(number + 1, f"cannot read: {exc.strerror or exc}") from None
        finally:
            if self.spool is None:
                stream.close()  # the spool stays open for the second read


    def blocks(self, errors: list[ReadError] | None = None, size: int = BLOCK) -> Iterator[str]:
        """:meth:`lines`' text in blocks of whole lines: ``"".join(self.blocks())`` is
        ``"".join(self.lines())``, with the same encoding errors at the same lines (an I/O error is
        reported at the first line of the block it stopped in).

        ``check``'s main process reads every input this way (``yamlpos.iter_block_chunks`` splits the
        blocks into documents): one decode per block of ``size`` bytes instead of one per line. A block
        that is not UTF-8 is decoded line by line, as :meth:`lines` does, so a bad byte is reported at
        its own line. Lines end at ``\\n`` only, as a binary file's lines do (a lone CR stays inside one).
        """
        stream = self._open()
        number = 0  # the lines of the blocks yielded so far
        rest = b""
        try:
            while True:
                block = stream.read(size)
                if block:
                    data = rest + block
                    cut = data.rfind(b"\n") + 1
                    if not cut:  # no whole line yet
                        rest = data
                        continue
                    data, rest = data[:cut], data[cut:]
                elif rest:
                    data, rest = rest, b""
                else:
                    return
                try:
                    text = data.decode("utf-8-sig" if number == 0 else "utf-8")
                except UnicodeDecodeError:
                    for raw in _split_lf(data):
                        number += 1
                        yield _decode(raw, number, errors)
                    continue
                number += text.count("\n")
                yield text
        except OSError as exc:
            raise ReadError(number + 1, f"cannot read: {exc.strerror or exc}") from None
        finally:
            if self.spool is None:
                stream.close()

    def _open(self) -> IO[bytes]:
        if self.spool is not None:
            self.spool.seek(0)
            return self.spool
        assert self.path is not None
        try:
            return self.path.open("rb")
        except OSError as exc:
            raise ReadError(0, f"cannot read: {exc.strerror or exc}") from None


def _split_lf(data: bytes) -> list[bytes]:
    """Lines ending at ``\\n`` only, each with its ending (``bytes.splitlines`` also splits at CR)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _decode(raw: bytes, number: int, errors: list[ReadError] | None) -> str:
    """One line of a source, UTF-8 (a byte-order mark skipped on line 1). A line that is not UTF-8 raises
    :class:`ReadError` at that line, or, given ``errors``, is recorded there and decoded with U+FFFD."""
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        bom = 3 if number == 1 and raw.startswith(b"\xef\xbb\xbf") else 0
        problem = ReadError(
            number,
            f"not UTF-8 (byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1 - bom}); save the file as UTF-8",
        )
        if errors is None:
            raise problem from None
        errors.append(problem)
        return raw.decode("utf-8", "replace")


def excluded(name: str, patterns: Iterable[str]) -> bool:
    """``--exclude GLOB``: the path as printed, or its last component, matches (``*`` crosses ``/``)."""
    base = os.path.basename(name.rstrip("/")) or name
    return any(fnmatchcase(name, p) or fnmatchcase(base, p) for p in patterns)


def read_sources(paths: list[str], *, exclude: Iterable[str] = ()) -> Iterator[Source]:
    patterns = tuple(exclude)
    for raw in paths:
        if raw == "-":
            yield _stdin()
            continue
        if patterns and excluded(raw, patterns):
            continue
        path = Path(raw)
        if path.is_dir() and (chart := _chart_note(path)):
            yield Source(raw, path, note=chart)
        elif path.is_dir():
            files = list(_walk(path, patterns))
            if not files:
                what = "no *.yaml, *.yml or *.json files" + (" outside --exclude" if patterns else "")
                yield Source(raw, path, empty=f"a directory with {what}")
            for file in files:
                yield file if isinstance(file, Source) else _file(file)
        else:
            yield _file(path)


KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def _chart_note(directory: Path) -> str | None:
    """A Helm chart's directory (it holds Chart.yaml): templates, not manifests, until ``helm template``."""
    if not (directory / "Chart.yaml").is_file():
        return None
    return (
        "a Helm chart, skipped: its templates are not manifests until rendered; "
        f"check them with `helm template RELEASE {directory} | gpu-admission check -`"
    )


def _walk(root: Path, patterns: tuple[str, ...]) -> Iterator[Path | Source]:
    """Manifests under ``root`` in a stable order; excluded directories are not entered. A Helm chart
    or a kustomization file found on the way is a noted Source (skipped with how to check it), not a
    file to parse: a repository of manifests usually holds both, and neither is a manifest."""
    for current, dirs, files in os.walk(root):
        keep = []
        for d in sorted(dirs):
            full = os.path.join(current, d)
            if patterns and excluded(full, patterns):
                continue
            if chart := _chart_note(Path(full)):
                yield Source(full, Path(full), note=chart)
                continue
            keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            full = os.path.join(current, name)
            if patterns and excluded(full, patterns):
                continue
            if name in KUSTOMIZATIONS and os.path.isfile(full):
                yield Source(
                    full,
                    Path(full),
                    note="kustomize configuration, skipped: not a manifest; check what it builds with "
                    f"`kubectl kustomize {current} | gpu-admission check -`",
                )
            elif name.endswith(MANIFEST_SUFFIXES) and os.path.isfile(full):
                yield Path(full)


def _file(path: Path) -> Source:
    name = str(path)
    if path.is_dir():
        return Source(name, path, error="is a directory")
    if not path.exists():
        return Source(name, path, error="no such file")
    if not os.access(path, os.R_OK):
        return Source(name, path, error="cannot read: permission denied")
    return Source(name, path)


def _stdin() -> Source:
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - it lives as long as the Source
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        shutil.copyfileobj(buffer, spool, 1 << 20)
    else:  # a text stream without bytes underneath (tests, embedding)
        for block in iter(lambda: sys.stdin.read(1 << 20), ""):
            spool.write(block.encode("utf-8"))
    return Source(STDIN, spool=spool)
