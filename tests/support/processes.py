"""Processes a test starts on this machine, to be seen by `ps`, /proc and the probe."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.polling import until_sync


@contextlib.contextmanager
def running(*argv: str) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` as a child process once its command line shows in /proc (Popen may return
    before that); killed and reaped at exit."""
    process = subprocess.Popen(list(argv))
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline")
        until_sync(cmdline.read_bytes, f"{argv} starting", 10.0, interval=0.005)
        yield process
    finally:
        process.kill()
        process.wait()


def ps_row(pid: int, columns: str) -> list[str]:
    """The words `ps -o COLUMNS -p PID` prints for `pid` (COLUMNS such as "user=,etimes=,args=",
    without a header); [] once it is gone."""
    command = ["ps", "-o", columns, "-p", str(pid)]
    return subprocess.run(command, capture_output=True, text=True, check=False).stdout.split()
