"""``check`` reads its inputs in blocks (``Source.blocks`` + ``yamlpos.iter_block_chunks``): the same
documents, first lines, texts and UTF-8 errors as the line-by-line reference (``Source.lines`` +
``yamlpos.iter_chunks``), at every block size, on separators in every spelling YAML allows."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from webhook import yamlpos
from webhook.check.inputs import ReadError, Source

PIECES = [
    "---\n", "---", "--- a: 1\n", "--- # c\n", "...\n", "... x\n", "---\r\n", "---\rx\n", "--\n", " ---\n",
    "a: 1\n", "b:\n  - c\n", "\n", "x\r", "# c\n", "----\n", "---\t\n", "...", "é: ü\n", "x---\n", "a: |\n  ---x\n",
]
BAD = [b"caf\xe9\n", b"\xef\xbb\xbfa: 1\n", b"\xff\n", b"\xff", b"--- \xff\n"]
SIZES = (1, 2, 3, 5, 7, 64, 1 << 20)


def both(path: Path, size: int) -> tuple[tuple[list[tuple[int, str]], list[tuple[int, str]]], ...]:
    source = Source(path.name, path=path)
    ref_errors: list[ReadError] = []
    got_errors: list[ReadError] = []
    ref = list(yamlpos.iter_chunks(source.lines(ref_errors)))
    got = list(yamlpos.iter_block_chunks(source.blocks(got_errors, size)))
    return (got, ref), ([(e.line, e.message) for e in got_errors], [(e.line, e.message) for e in ref_errors])


@pytest.mark.parametrize("size", SIZES)
def test_generated_streams_split_as_line_by_line(tmp_path: Path, size: int) -> None:
    rng = random.Random(size)
    path = tmp_path / "s.yaml"
    for _ in range(150):
        parts = [rng.choice(PIECES).encode() if rng.random() > 0.05 else rng.choice(BAD)
                 for _ in range(rng.randint(0, 30))]
        if rng.random() < 0.2:
            parts.insert(0, b"\xef\xbb\xbf")
        path.write_bytes(b"".join(parts))
        (got, ref), (got_errors, ref_errors) = both(path, size)
        assert got == ref
        assert got_errors == ref_errors


def test_a_bad_line_without_errors_list_raises_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"a: 1\n---\nb: caf\xe9\n")
    with pytest.raises(ReadError) as raised:
        list(Source("s", path=path).blocks())
    assert raised.value.line == 3


def test_the_benchmark_stream(tmp_path: Path) -> None:
    from bench.check_throughput import write_stream

    path = tmp_path / "m.yaml"
    write_stream(path, 300)
    for size in (1000, 1 << 20):
        (got, ref), _ = both(path, size)
        assert got == ref and len(got) == 300
