"""The performance page's plots, drawn from the numbers its tables quote (docs/performance.md).

    python bench/plots.py            # writes docs/img/*.svg
    python bench/plots.py --check    # exit 1 if a committed plot differs from what these numbers draw

When a table in docs/performance.md gets a new measurement, add it here and re-run: the SVGs are
committed, and ``tests/workflow/test_perf_plots.py`` fails when they are stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.svg import Series, bar_chart, line_chart

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
ROUNDS = ["before", "round 1", "round 2", "round 3"]

# "Results": engine p50 per round (ms; the lower end of each round's range)
ENGINE_P50 = {
    "training pod (8 GPUs)": [0.167, 0.129, 0.100, 0.082],
    "inference pod": [0.123, 0.096, 0.068, 0.061],
}
# "Results": check documents/s over 10,000 documents (lower end of each range); target 2,000
CHECK_RATE = [2867, 3051, 3109, 3623]
# "Results" and "Quiet re-measure": server throughput / Flask floor; target 0.70
SERVER_RATIO = (["before", "round 1", "round 2", "round 3", "quiet"], [0.48, 0.61, 0.686, 0.716, 0.756])
# "check on large inputs": peak RSS (MiB) over input size (MB), before and after streaming
CHECK_RSS = {
    "before streaming": [(4, 174.5), (50, 1062.6)],
    "after (streamed)": [(4, 35.3), (50, 35.3)],
}
# "Where one report spends its time": µs per stage, training pod and inference pod
REPORT_STAGES = [
    ("rules", (60.3, 45.2)),
    ("mutation steps", (59.0, 33.7)),
    ("inspect (devices)", (9.9, 10.1)),
    ("reading templates", (8.5, 7.3)),
    ("rule pool-spoofing", (9.6, 8.9)),
    ("rule gpu-count-exceeded", (4.2, 4.1)),
    ("rule privileged-gpu", (5.2, 2.9)),
]


def plots() -> dict[str, str]:
    """File name -> SVG text."""
    return {
        "perf-engine-p50.svg": line_chart(
            "Engine p50, mutate + validate (target 0.3 ms)", "optimisation round", "ms",
            [Series(name, list(enumerate(values))) for name, values in ENGINE_P50.items()],
            x_names=ROUNDS, target=("target 0.3 ms", 0.3),
        ),
        "perf-check-rate.svg": line_chart(
            "check throughput, 10,000 documents", "optimisation round", "documents/s",
            [Series("check", list(enumerate(CHECK_RATE)))], x_names=ROUNDS, target=("target 2,000/s", 2000),
        ),
        "perf-server-ratio.svg": line_chart(
            "Server throughput / Flask floor", "optimisation round", "ratio",
            [Series("ours / floor", list(enumerate(SERVER_RATIO[1])))], x_names=SERVER_RATIO[0],
            target=("target 0.70", 0.70),
        ),
        "perf-check-rss.svg": line_chart(
            "check peak RSS over input size", "input (MB of YAML)", "peak RSS (MiB)",
            [Series(name, points) for name, points in CHECK_RSS.items()],
        ),
        "perf-report-stages.svg": bar_chart(
            "Where one report spends its time", "µs per call", REPORT_STAGES, ("training pod", "inference pod"),
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed plot is stale")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    stale = []
    for name, text in plots().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print(f"stale plots: {', '.join(stale)}; run python bench/plots.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
