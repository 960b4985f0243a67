"""Per-document YAML parse cost: ``yamlpos.load_fast`` (events) against PyYAML's standard load.

``check`` loads every document of its input with ``load_fast``. This times both loaders on the same
chunks, in one process, interleaved (new, old, new, old...) so the machine's load falls on both
alike, and reports the best of ``--rounds`` per loader (the least disturbed run) plus the events
alone (libyaml's share, the floor of any loader built on them). Results are compared first: the
benchmark refuses to time loaders that disagree; documents PyYAML refuses are left out.

Run: ``python bench/yaml_load.py [--documents 3000] [--rounds 7] [FILE]`` (default: the mixed stream
of ``bench/check_throughput.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.check_throughput import write_stream
from webhook import yamlpos


def events_only(text: str) -> None:
    parser = yamlpos._Loader(text)
    try:
        while parser.get_event() is not None and parser.check_event():
            pass
    finally:
        parser.dispose()


def per_document_us(load: Callable[[str], Any], chunks: list[str]) -> float:
    start = time.perf_counter()
    for chunk in chunks:
        load(chunk)
    return (time.perf_counter() - start) / len(chunks) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", nargs="?", help="a YAML stream (default: the check benchmark's mix)")
    parser.add_argument("--documents", type=int, default=3000, help="documents of the default stream")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.file:
        text = Path(args.file).read_text(encoding="utf-8")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "stream.yaml"
            write_stream(path, args.documents)
            text = path.read_text(encoding="utf-8")
    chunks = []
    for _, chunk in yamlpos.split_documents(text):
        if not yamlpos.has_content(chunk):
            continue
        try:
            expected = repr(yamlpos.load_standard(chunk))
        except (yaml.YAMLError, ValueError):  # a broken document: errors are not what is timed here
            continue
        if repr(yamlpos.load_fast(chunk)) != expected:
            raise SystemExit(f"loaders disagree on:\n{chunk}")
        chunks.append(chunk)
    if not chunks:
        raise SystemExit("no loadable document")
    loaders = {"events": yamlpos.load_fast, "standard": yamlpos.load_standard, "events only": events_only}
    best = dict.fromkeys(loaders, float("inf"))
    for _ in range(args.rounds):
        for name, load in loaders.items():
            best[name] = min(best[name], per_document_us(load, chunks))
    print(f"{len(chunks):,} documents, best of {args.rounds}, load {os.getloadavg()[0]:.2f} (1 min):")
    for name, us in best.items():
        print(f"  {name:12} {us:7.1f} µs/document")
    print(f"  standard/events: {best['standard'] / best['events']:.2f}x")


if __name__ == "__main__":
    main()
