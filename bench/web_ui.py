"""The web UI's weight and the dashboard's smoothness with 400 GPUs streaming every 2 s.

Starts `warden run all` serving the built UI (frontend/dist, `make frontend`) against a
simulated fleet of 50 hosts x 8 GPUs over SSH with churn, the monitor polling every 2 s
(tests/e2e/web_system.py), then opens the dashboard as admin in Debian's Chromium
(frontend/e2e/perf.mjs): it counts the JavaScript the first load transfers (gzip), waits for the
cards and a warm-up, then measures for a minute the tab's main-thread busy time, the renderer
processes' CPU, frame intervals and long tasks while samples stream in.

    python bench/web_ui.py            # 50 hosts x 8 GPUs, 20 s warm-up, 60 s measured
    python bench/web_ui.py --quick    # 10 hosts x 8 GPUs, 5 s warm-up, 10 s measured

Targets (issue: web UI): initial load < 500 kB of gzip JavaScript; the tab's CPU < 20 % of one
core; no visibly dropped frames. Ends with
`RESULT initial_js_gzip_kb=... tab_cpu_pct=... renderer_cpu_pct=... frames_over_50ms=... gpus=...`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRONTEND = REPO / "frontend"
TARGET_JS_KB = 500.0
TARGET_CPU_PCT = 20.0


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def chromium_version() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["/usr/bin/chromium", "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    return "chromium: not found"


def measure(hosts: int, gpus: int, warmup_s: int, measure_s: int) -> dict[str, float]:
    fleet = ["--hosts", str(hosts), "--gpus", str(gpus), "--interval", "2", "--churn"]
    system = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.web_system", *fleet],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert system.stdout is not None
        ready = system.stdout.readline()
        if not ready:
            raise SystemExit("the system did not start (see its output above)")
        url = json.loads(ready)["url"]
        perf = subprocess.run(
            ["node", "e2e/perf.mjs", url, str(warmup_s), str(measure_s)],
            cwd=FRONTEND,
            capture_output=True,
            text=True,
            timeout=warmup_s + measure_s + 180,
        )
        if perf.returncode != 0:
            raise SystemExit(f"frontend/e2e/perf.mjs failed:\n{perf.stderr}")
        result: dict[str, float] = json.loads(perf.stdout.strip().splitlines()[-1])
        return result
    finally:
        system.terminate()
        try:
            system.wait(60)
        except subprocess.TimeoutExpired:
            system.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 hosts, 15 s: a smoke run")
    args = parser.parse_args()
    if not (FRONTEND / "dist" / "index.html").is_file():
        raise SystemExit("no build in frontend/dist: run `make frontend` first")
    hosts, gpus = (10, 8) if args.quick else (50, 8)
    warmup_s, measure_s = (5, 10) if args.quick else (20, 60)
    r = measure(hosts, gpus, warmup_s, measure_s)

    js_kb = r["initial_js_gzip_bytes"] / 1000
    tab = r["main_thread_busy_pct"]
    rows = [
        ("GPUs on the dashboard", f"{r['cards']:.0f} ({hosts} hosts x {gpus})", ""),
        ("host samples received", f"{r['samples'] / r['measured_s']:.1f}/s", ""),
        (
            "initial JavaScript (gzip)",
            f"{js_kb:.1f} kB in {r['initial_js_files']:.0f} files",
            f"< {TARGET_JS_KB:.0f} kB: {'met' if js_kb < TARGET_JS_KB else 'MISSED'}",
        ),
        (
            "tab main thread busy",
            f"{tab:.1f} % of a core",
            f"< {TARGET_CPU_PCT:.0f} %: {'met' if tab < TARGET_CPU_PCT else 'MISSED'}",
        ),
        ("renderer processes CPU", f"{r['renderer_cpu_pct']:.1f} % of a core", "(all threads)"),
        (
            "frame interval p50 / p99 / max",
            f"{r['frame_p50_ms']:.1f} / {r['frame_p99_ms']:.1f} / {r['frame_max_ms']:.1f} ms",
            f"{r['frames']:.0f} frames",
        ),
        ("frames over 50 ms", f"{r['frames_over_50ms']:.0f}", ""),
        ("long tasks (> 50 ms)", f"{r['long_tasks']:.0f}", f"max {r['long_task_max_ms']:.0f} ms"),
    ]
    print(
        f"machine: nproc={len(os.sched_getaffinity(0))}, {cpu_model()}, {chromium_version()} "
        f"headless; warden, simulator and browser share it"
    )
    print(f"measured {r['measured_s']:.0f} s after a {warmup_s} s warm-up, monitor every 2 s\n")
    width = max(len(name) for name, _, _ in rows)
    value_width = max(len(value) for _, value, _ in rows)
    print(f"{'measure':<{width}}  {'value':<{value_width}}  target / note")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:<{value_width}}  {note}")
    print(
        f"\nRESULT initial_js_gzip_kb={js_kb:.1f} tab_cpu_pct={tab:.1f} "
        f"renderer_cpu_pct={r['renderer_cpu_pct']:.1f} "
        f"frames_over_50ms={r['frames_over_50ms']:.0f} gpus={r['cards']:.0f}"
    )


if __name__ == "__main__":
    main()
