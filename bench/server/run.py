"""Server benchmark: ``gpu-admission serve`` against two floors, same stack, same run.

The floors: ``floor_app.py`` (minimal Flask) and ``bare_app.py`` (bare WSGI, no framework); both
are served by gunicorn with our options and TLS hook, with orjson. Ratios ours/floor and ours/bare
are taken within each round, so the machine's load cancels as far as it can.

One command (``python bench/server/run.py``) does everything on 127.0.0.1:

1. builds a serving certificate and the AdmissionReview mix (``reviews.py``), starts both servers with
   identical gunicorn settings (workers, threads, gthread, keep-alive, TLS context hook);
2. checks every body once against both: HTTP 200 and a contract-valid AdmissionReview response;
3. (a) throughput: wrk (closed loop, keep-alive TLS, same threads/connections/duration) against
   floor and ours, alternating which goes first, over several rounds; ratio = ours / floor per round;
4. (b) latency at a fixed rate (default 500 requests/s): the open-loop client (``openloop.py``),
   latency from the intended send time, alternating, several rounds;
5. (c) memory: RSS and PSS of every gunicorn worker after the runs (warm), from /proc;
6. prints a table (medians over rounds) and writes JSON (default ``.benchmarks/server.json``).

Targets (issue #29): throughput >= 0.85 x the bare floor; at 500 requests/s p99 <= 5 ms and <= 1.2 x the bare
floor's p99.
Noisy machines: compare within one run, read the medians, not one round.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.server import reviews  # noqa: E402
from bench.server.openloop import run_open_loop  # noqa: E402
from bench.server.procs import Server  # noqa: E402
from tests.server.support import ApiserverClient, check_response, free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
LUA = HERE / "rotate.lua"


def start_servers(tmp: Path, args: argparse.Namespace) -> tuple[Server, Server, Server]:
    from webhook.certs.generate import generate

    certs = generate(tmp / "certs", "gpu-admission", "gpu-admission", dns=("localhost",), ips=("127.0.0.1",))
    common = [
        "--tls-cert",
        str(certs.cert),
        "--tls-key",
        str(certs.key),
        "--workers",
        str(args.workers),
        "--threads",
        str(args.threads),
    ]
    ours_port, floor_port, bare_port = free_port(), free_port(), free_port()
    ours = Server(
        "ours",
        [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--policy",
            str(ROOT / "policies"),
            "--namespaces",
            str(tmp / "bodies" / "namespaces.yaml"),
            "--bind",
            f"127.0.0.1:{ours_port}",
            "--metrics-bind",
            f"127.0.0.1:{free_port()}",
            *common,
            *args.serve_arg,
        ],
        ours_port,
        args.workers,
        certs.ca_cert,
        tmp / "ours.log",
        code_root=args.code_root,
    )
    floor = Server(
        "floor",
        [sys.executable, str(HERE / "floor_app.py"), "--bind", f"127.0.0.1:{floor_port}", *common],
        floor_port,
        args.workers,
        certs.ca_cert,
        tmp / "floor.log",
        code_root=args.code_root,
    )
    bare = Server(
        "bare",
        [sys.executable, str(HERE / "bare_app.py"), "--bind", f"127.0.0.1:{bare_port}", *common],
        bare_port,
        args.workers,
        certs.ca_cert,
        tmp / "bare.log",
        code_root=args.code_root,
    )
    return ours.start(), floor.start(), bare.start()


def verify(server: Server, bodies: list[reviews.Body]) -> dict[str, int]:
    """Every body once: 200 and a response the apiserver would accept. Counts patched/denied answers."""
    client = ApiserverClient(server.port, [server.ca_file])
    seen = {"patched": 0, "denied": 0, "allowed": 0}
    try:
        for body in bodies:
            status, _, data = client.request("POST", body.path, body.data)
            if status != 200:
                raise SystemExit(f"{server.name}: {body.file.name} answered {status}: {data[:300]!r}")
            endpoint = body.path[1:].split("?")[0]
            response = check_response(json.loads(data), json.loads(body.data), endpoint)
            key = "patched" if "patch" in response else ("allowed" if response["allowed"] else "denied")
            seen[key] += 1
    finally:
        client.close()
    return seen


def wrk(server: Server, manifest: Path, args: argparse.Namespace, duration: float) -> dict[str, Any]:
    cmd = [
        "wrk",
        f"-t{args.wrk_threads}",
        f"-c{args.connections}",
        f"-d{duration:g}s",
        "--timeout",
        "5s",
        "-s",
        str(LUA),
        f"https://127.0.0.1:{server.port}",
        "--",
        str(manifest),
    ]
    cpu_before = server.workers_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    cpu = server.workers_cpu() - cpu_before
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    out = json.loads(lines[-1])
    out["rps"] = round(out["requests"] / (out["duration_us"] / 1e6), 1)
    out["worker_cpu_us_per_request"] = round(cpu * 1e6 / max(1, out["requests"]), 1)
    return out


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="gpu-admission server benchmark against the floor")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--connections", type=int, default=16, help="wrk connections (throughput runs)")
    p.add_argument("--wrk-threads", type=int, default=1)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    p.add_argument("--rounds", type=int, default=5, help="throughput rounds (each: floor and ours)")
    p.add_argument("--rate", type=float, default=500.0, help="requests/s of the fixed-rate runs")
    p.add_argument("--latency-duration", type=float, default=15.0)
    p.add_argument("--latency-rounds", type=int, default=3)
    p.add_argument("--latency-connections", type=int, default=8)
    p.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `gpu-admission serve` only (repeat), e.g. --serve-arg=--log-level=warning",
    )
    p.add_argument(
        "--code-root",
        type=Path,
        default=None,
        help="run both servers from another tree of this repository (e.g. `git archive HEAD | tar -x -C DIR`), "
        "to compare before/after with the same harness; the floor then uses that tree's gunicorn settings too",
    )
    p.add_argument("--only", choices=("all", "throughput", "latency"), default="all")
    p.add_argument("--out", type=Path, default=ROOT / ".benchmarks" / "server.json")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, bodies)")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None and args.only != "latency":
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")

    tmp = Path(tempfile.mkdtemp(prefix="gpu-admission-bench-"))
    bodies = reviews.build(tmp / "bodies")
    manifest = tmp / "bodies" / "manifest.txt"
    ours, floor, bare = start_servers(tmp, args)
    servers = {"bare": bare, "floor": floor, "ours": ours}
    pids_before = {name: s.worker_pids() for name, s in servers.items()}
    results: dict[str, Any] = {
        "machine": machine(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "mix": {"bodies": len(bodies), "mutate": sum(b.path.startswith("/mutate") for b in bodies)},
    }
    try:
        results["verify"] = {name: verify(s, bodies) for name, s in servers.items()}
        for s in servers.values():  # warm-up: imports, caches, TLS contexts, allocator
            wrk(s, manifest, args, 3)
        if args.only in ("all", "throughput"):
            results["throughput"] = throughput(servers, manifest, args)
        if args.only in ("all", "latency"):
            results["latency"] = latency(servers, bodies, args)
        results["memory"] = {name: s.memory() for name, s in servers.items()}
        results["workers_replaced"] = {
            name: sorted(set(pids_before[name]) ^ set(s.worker_pids())) for name, s in servers.items()
        }
    finally:
        for s in servers.values():
            s.stop()
        errors = [ln for ln in (tmp / "ours.log").read_text().splitlines() if '"level":"error"' in ln]
        results["ours_log_errors"] = errors[:5]
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    report(results)
    print(f"\nJSON: {args.out}")
    return 0


NAMES = ("bare", "floor", "ours")


def orders(r: int) -> tuple[str, ...]:
    """Round ``r``'s order: each server goes first, second and last as often, so none is always the
    one measured while the machine's other jobs are busiest."""
    return NAMES[r % 3 :] + NAMES[: r % 3]


def throughput(servers: dict[str, Server], manifest: Path, args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    for r in range(args.rounds):
        run = {name: wrk(servers[name], manifest, args, args.duration) for name in orders(r)}
        run["ratio"] = round(run["ours"]["rps"] / run["floor"]["rps"], 3)
        run["ratio_bare"] = round(run["ours"]["rps"] / run["bare"]["rps"], 3)
        rounds.append(run)
        print(
            f"round {r + 1}: bare {run['bare']['rps']:,.0f}, floor {run['floor']['rps']:,.0f}, "
            f"ours {run['ours']['rps']:,.0f} req/s; ours/floor {run['ratio']:.3f}, ours/bare {run['ratio_bare']:.3f}; "
            "worker CPU per request: "
            + ", ".join(f"{n} {run[n]['worker_cpu_us_per_request']:.0f} us" for n in NAMES),
            flush=True,
        )
    out: dict[str, Any] = {"rounds": rounds}
    for name in NAMES:
        out[name] = {
            "rps_median": median([r[name]["rps"] for r in rounds]),
            "non_2xx": sum(r[name]["errors"]["status"] for r in rounds),
            "socket_errors": sum(sum(v for k, v in r[name]["errors"].items() if k != "status") for r in rounds),
            "p99_ms_median": median([r[name]["latency_us"]["p99"] / 1000 for r in rounds]),
            "worker_cpu_us_per_request_median": median([r[name]["worker_cpu_us_per_request"] for r in rounds]),
        }
    out["ratio_median"] = median([r["ratio"] for r in rounds])
    out["ratio_of_medians"] = round(out["ours"]["rps_median"] / out["floor"]["rps_median"], 3)
    out["ratio_bare_median"] = median([r["ratio_bare"] for r in rounds])
    out["ratio_bare_of_medians"] = round(out["ours"]["rps_median"] / out["bare"]["rps_median"], 3)
    return out


def latency(servers: dict[str, Server], bodies: list[reviews.Body], args: argparse.Namespace) -> dict[str, Any]:
    from tests.server.support import SERVICE_DNS

    requests = [(b.path, b.data) for b in bodies]
    rounds = []
    for r in range(args.latency_rounds):
        run = {}
        for name in orders(r):
            s = servers[name]
            res = run_open_loop(
                s.port,
                s.context(),
                SERVICE_DNS,
                requests,
                rate=args.rate,
                duration=args.latency_duration,
                connections=args.latency_connections,
            )
            run[name] = res.summary()
            time.sleep(0.5)
        rounds.append(run)
        print(
            f"latency round {r + 1} @ {args.rate:g}/s: "
            + ", ".join(
                f"{n} p50 {run[n]['latency_ms']['p50']:.2f} ms p99 {run[n]['latency_ms']['p99']:.2f} ms"
                for n in NAMES
            ),
            flush=True,
        )
    out: dict[str, Any] = {"rounds": rounds}
    for name in NAMES:
        out[name] = {
            f"{k}_ms_median": median([r[name]["latency_ms"][k] for r in rounds]) for k in ("p50", "p90", "p99", "p99.9")
        }
        out[name]["service_p99_ms_median"] = median([r[name]["service_ms"]["p99"] for r in rounds])
        out[name]["client_lag_p99_ms_median"] = median([r[name]["client_lag_ms"]["p99"] for r in rounds])
        out[name]["errors"] = sum(r[name]["errors"] for r in rounds)
        out[name]["non_200"] = sum(r[name]["sent"] - r[name]["ok"] for r in rounds)
        out[name]["rate_achieved_median"] = median([r[name]["rate_achieved"] for r in rounds])
    out["p99_ratio"] = round(out["ours"]["p99_ms_median"] / out["floor"]["p99_ms_median"], 2)
    out["p99_ratio_bare"] = round(out["ours"]["p99_ms_median"] / out["bare"]["p99_ms_median"], 2)
    out["p99_ratios_bare"] = [round(r["ours"]["latency_ms"]["p99"] / r["bare"]["latency_ms"]["p99"], 2) for r in rounds]
    return out


def machine() -> dict[str, Any]:
    import gunicorn

    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    wrk_version = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.split("[")[0].strip()
    import os

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "gunicorn": gunicorn.__version__,
        "wrk": wrk_version,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def report(results: dict[str, Any]) -> None:
    m, s = results["machine"], results["settings"]
    print(f"\nmachine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, gunicorn {m['gunicorn']}")
    print(
        f"settings: {s['workers']} workers x {s['threads']} threads (gthread, TLS, keep-alive); "
        f"mix of {results['mix']['bodies']} bodies ({results['mix']['mutate']} /mutate)"
    )
    rows: list[tuple[str, str, str, str, str]] = []
    t = results.get("throughput")
    if t:
        ok = t["ratio_bare_median"] >= 0.85
        rows.append(
            (
                f"throughput, wrk -c{s['connections']} (req/s, median of {s['rounds']})",
                f"{t['bare']['rps_median']:,.0f}",
                f"{t['floor']['rps_median']:,.0f}",
                f"{t['ours']['rps_median']:,.0f}",
                f"ours/floor {t['ratio_median']:.3f}, ours/bare {t['ratio_bare_median']:.3f} "
                f"(target >= 0.85) " + ("PASS" if ok else "FAIL"),
            )
        )
        cpu = {n: t[n]["worker_cpu_us_per_request_median"] for n in NAMES}
        rows.append(
            (
                "worker CPU per request (us, median)",
                *(f"{cpu[n]:.0f}" for n in NAMES),
                f"ours adds {cpu['ours'] - cpu['bare']:.0f} us to bare",
            )  # type: ignore[arg-type]
        )
    lat = results.get("latency")
    if lat:
        label = f"@ {s['rate']:g} req/s open loop"
        ok = lat["ours"]["p99_ms_median"] <= 5 and lat["p99_ratio_bare"] <= 1.2
        for key in ("p50", "p99", "p99.9"):
            note = ""
            if key == "p99":
                note = (
                    f"ours/floor {lat['p99_ratio']:.2f}x, ours/bare {lat['p99_ratio_bare']:.2f}x "
                    f"(target <= 1.2x bare, <= 5 ms) " + ("PASS" if ok else "FAIL")
                )
            rows.append(
                (f"{key} {label} (ms)", *(f"{lat[n][key + '_ms_median']:.2f}" for n in NAMES), note)  # type: ignore[arg-type]
            )
    mem = results["memory"]
    for key, label in (("rss_kib", "RSS"), ("pss_kib", "PSS")):
        vals = {n: [w.get(key, 0) / 1024 for w in mem[n]["workers"]] for n in NAMES}
        rows.append((f"{label} per worker (MiB)", *(" / ".join(f"{v:.1f}" for v in vals[n]) for n in NAMES), ""))  # type: ignore[arg-type]
    width = max(len(r[0]) for r in rows)
    print(f"\n{'':{width}}  {'bare':>12}  {'floor':>12}  {'ours':>12}")
    for name, a, b, c, note in rows:
        print(f"{name:{width}}  {a:>12}  {b:>12}  {c:>12}  {note}")
    if t:
        print(
            "non-2xx: " + ", ".join(f"{n} {t[n]['non_2xx']}" for n in NAMES)
            + "; socket errors: " + ", ".join(f"{n} {t[n]['socket_errors']}" for n in NAMES)
        )
    if lat:
        print(
            "open-loop errors: " + ", ".join(f"{n} {lat[n]['errors']}" for n in NAMES)
            + "; client lag p99 (ms): " + " / ".join(f"{lat[n]['client_lag_p99_ms_median']:.2f}" for n in NAMES)
        )
    print(
        f"workers replaced during the run: {results['workers_replaced']}; "
        f"error lines in our log: {len(results['ours_log_errors'])}"
    )


if __name__ == "__main__":
    sys.exit(main())
