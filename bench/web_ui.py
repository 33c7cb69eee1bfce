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

import contextlib
import json
import subprocess
import sys

import _common as common

FRONTEND = common.REPO / "frontend"
TARGET_JS_KB = 500.0
TARGET_CPU_PCT = 20.0


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
        cwd=common.REPO,
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
        common.stop_process(system, "tests.e2e.web_system", grace_s=60)


def main() -> None:
    args = common.argument_parser(__doc__, "10 hosts, 15 s").parse_args()
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
            f"< {TARGET_JS_KB:.0f} kB: {common.verdict(js_kb < TARGET_JS_KB)}",
        ),
        (
            "tab main thread busy",
            f"{tab:.1f} % of a core",
            f"< {TARGET_CPU_PCT:.0f} %: {common.verdict(tab < TARGET_CPU_PCT)}",
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
    common.print_machine(
        f"{chromium_version()} headless", sharing="warden, simulator and browser share it"
    )
    print(f"measured {r['measured_s']:.0f} s after a {warmup_s} s warm-up, monitor every 2 s\n")
    common.print_table(["measure", "value", "target / note"], rows, "<<<")
    common.print_result(
        initial_js_gzip_kb=f"{js_kb:.1f}",
        tab_cpu_pct=f"{tab:.1f}",
        renderer_cpu_pct=f"{r['renderer_cpu_pct']:.1f}",
        frames_over_50ms=f"{r['frames_over_50ms']:.0f}",
        gpus=f"{r['cards']:.0f}",
    )


if __name__ == "__main__":
    main()
