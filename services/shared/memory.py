"""Large blocks go back to the system when freed.

glibc serves a block of 128 KiB or more with its own mmap, given back on free, but each such
free raises that threshold to the block's size (up to 32 MiB): after the first request body of
1 MiB, every later one came from the heap, whose freed space the process keeps. 300 such
bodies, 64 at a time, left the gateway 63 MiB bigger for good; with the threshold fixed, 21 MiB
(tests/e2e/test_gateway_memory.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept from now on


def keep_large_blocks_mapped() -> bool:
    """Fix glibc's mmap threshold; False where the C library is not glibc's."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return False
    return bool(mallopt and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
