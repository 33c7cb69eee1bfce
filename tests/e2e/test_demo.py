"""`warden demo` as a newcomer runs it: live GPUs from the simulated fleet, health all ok."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from services.sim.demo import format_snapshot
from tests.support.polling import until_sync
from tests.support.ports import free_port


def health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=2) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_demo_shows_live_gpus_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    env = {
        **os.environ,
        "WARDEN_GATEWAY_PORT": str(port),
        "HOME": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("WARDEN_CONFIG", None)
    with log.open("w") as out:
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "demo",
                "--hosts",
                "2",
                "--gpus-per-host",
                "2",
                "--watch",
                "1",
                "--data-dir",
                str(tmp_path / "demo"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:

        def live() -> dict | None:
            answer = health(port)
            if answer and answer["status"] == "ok" and "sim-002     1" in log.read_text():
                return answer
            assert demo.poll() is None, f"demo exited early:\n{log.read_text()}"
            return None

        answer = until_sync(live, "live GPUs", 60, interval=0.2, report=log.read_text)
        assert set(answer["services"]) == {
            "gateway",
            "monitor",
            "reservations",
            "jobs",
            "violations",
        }
        assert "HOST      GPU  UTIL" in log.read_text()
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            code = demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            demo.kill()
            raise
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def test_format_snapshot_lists_gpus_processes_and_unreachable_hosts() -> None:
    gpu = {
        "uuid": "GPU-1",
        "index": 0,
        "utilization_gpu_percent": None,
        "memory_used_mib": 100.0,
        "memory_total_mib": 81920.0,
        "temperature_c": 40.0,
    }
    snapshot = {
        "hosts": [
            {
                "name": "h1",
                "reachable": True,
                "sample": {"gpus": [gpu]},
                "processes": [{"gpu_uuid": "GPU-1", "pid": 7, "user": "bob"}],
            },
            {
                "name": "h2",
                "reachable": False,
                "sample": None,
                "processes": [],
                "down_reason": "timed out",
            },
        ]
    }
    lines = format_snapshot(snapshot).splitlines()
    assert lines[1].split() == ["h1", "0", "n/a", "100/81920", "MiB", "40C", "bob:7"]
    assert lines[2].split()[:3] == ["h2", "-", "unreachable:"]
