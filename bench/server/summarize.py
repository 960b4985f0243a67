"""Medians over several ``run.py`` result files (machines are noisy: quote medians of several runs).

Run: ``python bench/server/summarize.py .benchmarks/server-a.json .benchmarks/server-b.json``
Throughput figures pool every round of every file; latency figures pool every fixed-rate round.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def summarize(files: list[Path]) -> dict[str, Any]:
    runs = [json.loads(f.read_text()) for f in files]
    rounds = [r for run in runs for r in run.get("throughput", {}).get("rounds", [])]
    lat = [r for run in runs for r in run.get("latency", {}).get("rounds", [])]

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    out: dict[str, Any] = {
        "files": [str(f) for f in files],
        "throughput_rounds": len(rounds),
        "latency_rounds": len(lat),
    }
    if rounds:
        out["ratio_median"] = med([r["ratio"] for r in rounds])
        out["ratio_min_max"] = [min(r["ratio"] for r in rounds), max(r["ratio"] for r in rounds)]
        for name in ("floor", "ours"):
            out[f"{name}_rps_median"] = med([r[name]["rps"] for r in rounds])
            out[f"{name}_cpu_us_median"] = med([r[name]["worker_cpu_us_per_request"] for r in rounds])
    if lat:
        for name in ("floor", "ours"):
            for p in ("p50", "p99", "p99.9"):
                out[f"{name}_{p}_ms_median"] = med([r[name]["latency_ms"][p] for r in lat])
        out["p99_ratio"] = round(out["ours_p99_ms_median"] / out["floor_p99_ms_median"], 2)
    mem = [run["memory"] for run in runs if "memory" in run]
    for name in ("floor", "ours"):
        for key in ("rss_kib", "pss_kib"):
            values = [w[key] / 1024 for m in mem for w in m[name]["workers"] if key in w]
            if values:
                out[f"{name}_{key.split('_')[0]}_mib_median"] = round(statistics.median(values), 1)
    return out


def main() -> None:
    files = [Path(a) for a in sys.argv[1:]]
    if not files:
        raise SystemExit(__doc__)
    for key, value in summarize(files).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
